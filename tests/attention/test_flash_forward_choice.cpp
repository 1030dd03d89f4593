// choose_flash_forward_kernel (backend/cuda/attention_path.h): the wgmma forward runs by
// default exactly where it can and is meant to (built, compute capability 9.0, head dim
// 128), at head dim 64 only on request (KDTRAIN_FLASH_FORWARD=wgmma), and a request it
// cannot honour is an error naming the variable.
#include <catch2/catch.hpp>

#include "backend/cuda/attention_path.h"

using kdtrain::cuda::choose_flash_forward_kernel;
using kdtrain::cuda::FlashForwardKernel;

TEST_CASE("the wgmma forward is chosen on compute capability 9.0 at head dim 128 when built", "[attention][sm90a]") {
  CHECK(choose_flash_forward_kernel(128, 9, 0, true, nullptr) == FlashForwardKernel::wgmma_sm90a);
  CHECK(choose_flash_forward_kernel(128, 9, 0, true, "auto") == FlashForwardKernel::wgmma_sm90a);
  CHECK(choose_flash_forward_kernel(128, 9, 0, true, "") == FlashForwardKernel::wgmma_sm90a);
  CHECK(choose_flash_forward_kernel(64, 9, 0, true, nullptr) == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(128, 9, 0, false, nullptr) == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(128, 8, 0, true, nullptr) == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(128, 10, 0, true, nullptr) == FlashForwardKernel::mma_sync);  // sm_90a code: 9.0 only
  CHECK(choose_flash_forward_kernel(128, 9, 0, true, "mma_sync") == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(128, 9, 0, true, "wgmma") == FlashForwardKernel::wgmma_sm90a);
  CHECK(choose_flash_forward_kernel(64, 9, 0, true, "wgmma") == FlashForwardKernel::wgmma_sm90a);  // built, on request
  CHECK_THROWS_WITH(choose_flash_forward_kernel(96, 9, 0, true, "wgmma"), Catch::Contains("KDTRAIN_FLASH_FORWARD=wgmma"));
  CHECK_THROWS_WITH(choose_flash_forward_kernel(64, 9, 0, false, "wgmma"), Catch::Contains("KDTRAIN_CUDA_SM90A (no)"));
  CHECK_THROWS_WITH(choose_flash_forward_kernel(128, 8, 9, true, "wgmma"), Catch::Contains("compute capability 9.0 (8.9)"));
  CHECK_THROWS_WITH(choose_flash_forward_kernel(128, 9, 0, true, "fast"), Catch::Contains("KDTRAIN_FLASH_FORWARD=fast"));
}
