// The cuBLASLt plan cache key (kernels/matmul_plan.h): equal for the calls that
// can share a plan, different when anything the plan depends on differs, and the
// alignment reduced to the power of two cuBLASLt is told about.
#include <catch2/catch.hpp>

#include <unordered_set>
#include <vector>

#include "kernels/matmul_plan.h"

using namespace kdtrain::cuda;

TEST_CASE("matmul plan keys: equal calls share, any difference separates", "[matmul]") {
  MatmulKey base;
  base.trans_a = true;
  base.m = 3072;
  base.n = 16384;
  base.k = 2048;
  base.lda = 2048;
  base.ldb = 2048;
  base.ldc = 3072;
  base.c_type = 14;  // CUDA_R_16BF
  base.align_a = base.align_b = base.align_c = 256;
  std::unordered_set<MatmulKey, MatmulKeyHash> keys{base};
  CHECK(keys.count(base) == 1);
  MatmulKey same = base;
  CHECK(same == base);
  CHECK(MatmulKeyHash{}(same) == MatmulKeyHash{}(base));

  std::vector<MatmulKey> variants(14, base);
  variants[0].trans_a = false;
  variants[1].trans_b = true;
  variants[2].m = 3071;
  variants[3].n = 8192;
  variants[4].k = 2047;
  variants[5].lda = 2056;
  variants[6].ldb = 2056;
  variants[7].ldc = 3080;
  variants[8].c_type = 0;  // CUDA_R_32F
  variants[9].accumulate = true;
  variants[10].align_a = 2;
  variants[11].align_b = 8;
  variants[12].align_c = 16;
  variants[13].epilogue = MatmulEpilogue::bias;
  for (const MatmulKey& v : variants) {
    CHECK_FALSE(v == base);
    keys.insert(v);
  }
  CHECK(keys.size() == variants.size() + 1);  // all distinct
}

TEST_CASE("matmul plan keys: address alignment as a power of two up to 256", "[matmul]") {
  alignas(256) static char buffer[1024];
  CHECK(address_alignment(buffer) == 256);
  CHECK(address_alignment(buffer + 2) == 2);
  CHECK(address_alignment(buffer + 48) == 16);
  CHECK(address_alignment(buffer + 512) == 256);
  CHECK(address_alignment(buffer + 1) == 1);
}
