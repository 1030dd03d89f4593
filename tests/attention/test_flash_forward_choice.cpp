// choose_flash_forward_kernel (backend/cuda/attention_path.h), run once when the CUDA
// backend is built from train.attention_forward: `auto` takes the warp-specialised wgmma
// forward wherever it runs (a build with KDTRAIN_CUDA_SM90A on compute capability 9.0),
// `mma_sync` never, and `wgmma` or `wgmma_lockstep` where it cannot run is an error naming
// what is missing. The same rule for
// choose_flash_backward_kernel (train.attention_backward).
#include <catch2/catch.hpp>

#include "backend/cuda/attention_path.h"

using kdtrain::AttentionForward;
using kdtrain::cuda::choose_flash_forward_kernel;
using kdtrain::cuda::FlashForwardKernel;

TEST_CASE("forward kernel choice: wgmma where it runs, mma.sync elsewhere or on request", "[flash][choice]") {
  const AttentionForward automatic = AttentionForward::auto_select;
  CHECK(choose_flash_forward_kernel(automatic, 9, 0, true) == FlashForwardKernel::wgmma_sm90a);
  CHECK(choose_flash_forward_kernel(automatic, 9, 0, false) == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(automatic, 8, 0, true) == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(automatic, 10, 0, true) == FlashForwardKernel::mma_sync);  // sm_90a code: 9.0 only
  CHECK(choose_flash_forward_kernel(AttentionForward::mma_sync, 9, 0, true) == FlashForwardKernel::mma_sync);
  CHECK(choose_flash_forward_kernel(AttentionForward::wgmma, 9, 0, true) == FlashForwardKernel::wgmma_sm90a);
  CHECK(choose_flash_forward_kernel(AttentionForward::wgmma_lockstep, 9, 0, true) ==
        FlashForwardKernel::wgmma_sm90a_lockstep);
  CHECK_THROWS_WITH(choose_flash_forward_kernel(AttentionForward::wgmma_lockstep, 9, 0, false),
                    Catch::Contains("train.attention_forward=wgmma_lockstep:") &&
                        Catch::Contains("KDTRAIN_CUDA_SM90A (no)"));
  CHECK_THROWS_WITH(choose_flash_forward_kernel(AttentionForward::wgmma, 9, 0, false),
                    Catch::Contains("train.attention_forward=wgmma") && Catch::Contains("KDTRAIN_CUDA_SM90A (no)"));
  CHECK_THROWS_WITH(choose_flash_forward_kernel(AttentionForward::wgmma, 8, 9, true),
                    Catch::Contains("compute capability 9.0 (8.9)"));
}

TEST_CASE("backward kernel choice: wgmma where it runs, mma.sync elsewhere or on request", "[flash][choice]") {
  using kdtrain::AttentionBackward;
  using kdtrain::cuda::choose_flash_backward_kernel;
  using kdtrain::cuda::FlashBackwardKernel;
  const AttentionBackward automatic = AttentionBackward::auto_select;
  CHECK(choose_flash_backward_kernel(automatic, 9, 0, true) == FlashBackwardKernel::wgmma_sm90a);
  CHECK(choose_flash_backward_kernel(automatic, 9, 0, false) == FlashBackwardKernel::mma_sync);
  CHECK(choose_flash_backward_kernel(automatic, 8, 0, true) == FlashBackwardKernel::mma_sync);
  CHECK(choose_flash_backward_kernel(automatic, 10, 0, true) == FlashBackwardKernel::mma_sync);
  CHECK(choose_flash_backward_kernel(AttentionBackward::mma_sync, 9, 0, true) == FlashBackwardKernel::mma_sync);
  CHECK(choose_flash_backward_kernel(AttentionBackward::wgmma, 9, 0, true) == FlashBackwardKernel::wgmma_sm90a);
  CHECK_THROWS_WITH(choose_flash_backward_kernel(AttentionBackward::wgmma, 9, 0, false),
                    Catch::Contains("train.attention_backward=wgmma") && Catch::Contains("KDTRAIN_CUDA_SM90A (no)"));
  CHECK_THROWS_WITH(choose_flash_backward_kernel(AttentionBackward::wgmma, 10, 0, true),
                    Catch::Contains("compute capability 9.0 (10.0)"));
}

TEST_CASE("training path: the fused kernels' shape rule is the one the training path refuses by", "[flash][choice]") {
  using kdtrain::AttentionShape;
  using kdtrain::cuda::training_path_refusal;
  CHECK(training_path_refusal(AttentionShape{8, 2048, 32, 8, 64}) == nullptr);
  CHECK(training_path_refusal(AttentionShape{8, 2048, 32, 8, 128}) == nullptr);
  CHECK(std::string(training_path_refusal(AttentionShape{8, 2048, 32, 8, 96})) == "head dim not 64 or 128");
  CHECK(std::string(training_path_refusal(AttentionShape{65536, 16, 4, 4, 64})) == "batch or heads above 65535");
  // Through backend.h, which train/ calls: the CPU trains any shape.
  CHECK(kdtrain::training_path_refusal(kdtrain::Device::cpu, AttentionShape{1, 16, 4, 4, 16}).empty());
  CHECK(kdtrain::training_path_refusal(kdtrain::Device::cuda, AttentionShape{1, 16, 4, 4, 16}) == "head dim not 64 or 128");
}
