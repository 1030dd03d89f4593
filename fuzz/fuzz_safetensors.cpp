// safetensors files: the 8-byte length, the JSON header, tensor tiling, and
// reading every tensor as fp32 and scanning it for non-finite values. A header
// the reference implementation refuses (a NUL in it, e.g. NUL padding) must be
// refused here too.
#include <cstring>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kdtrain::fuzz::write_scratch("input.safetensors", data, size);
  kdtrain::fuzz::expect_only_kdtrain_errors([&] {
    const kdtrain::io::SafetensorsFile file(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, data, 8);  // accepted: at least 8 bytes, the header inside the file
    if (std::memchr(data + 8, 0, header_len) != nullptr) std::abort();
    for (const std::string& name : file.names()) {
      (void)kdtrain::io::first_non_finite(file.tensor(name));
      kdtrain::fuzz::expect_only_kdtrain_errors([&] { (void)file.read_f32(name); });
    }
    (void)file.metadata();
  });
  return 0;
}
