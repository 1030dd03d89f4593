// Reader and writer for the safetensors format (Hugging Face), done by hand:
//   u64 little-endian header length N | N bytes of JSON header | data buffer.
// Header: {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// offsets relative to the buffer start. The reader validates as strictly as the
// reference Rust implementation (docs/formats.md lists the rules): tensors must
// tile the buffer exactly, so gaps, overlaps and trailing bytes are all errors.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/file_util.h"

namespace kdtrain::io {

enum class Dtype { BOOL, U8, I8, F8_E4M3, F8_E5M2, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

const char* dtype_name(Dtype d);                 // "F32", "BF16", ...
bool parse_dtype(const std::string& name, Dtype* out);  // false if unknown
size_t dtype_size(Dtype d);                      // bytes per element

// fp32 <-> bf16 / f16 bit conversions. float_to_bf16 rounds to nearest even and
// keeps NaN a (quiet) NaN.
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t b);
float f16_to_float(uint16_t h);

// A tensor inside a mapped file; `data` points into the mapping (valid while the
// SafetensorsFile lives) and may be unaligned for its dtype.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
};

// Index of the first NaN or infinity among a floating-point tensor's elements,
// read straight from the mapping; -1 when there is none (and for integer dtypes).
int64_t first_non_finite(const TensorView& t);
// The same for values in memory.
int64_t first_non_finite(const float* values, int64_t n);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // maps and validates; throws naming file/tensor

  const std::string& path() const { return file_.path(); }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorView& tensor(const std::string& name) const;  // throws if absent
  // Any F32 / BF16 / F16 / F64 tensor converted to fp32.
  std::vector<float> read_f32(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Throws naming the file, the tensor and the element when it holds a NaN or infinity.
  void require_finite(const std::string& name) const;
  // Starts reading the tensor's bytes in from disk (MappedFile::prefetch).
  void prefetch(const std::string& name) const;

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors (by pointer: the caller keeps them alive until write()) and
// writes one file atomically. Names are written sorted, data packed in that
// order, header padded with spaces to a multiple of 8 bytes.
class SafetensorsWriter {
 public:
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  // Stores fp32 values as BF16 (round to nearest even); converted at write time.
  void add_f32_as_bf16(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void add_bf16(const std::string& name, const std::vector<int64_t>& shape, const uint16_t* data);
  void add_i32(const std::string& name, const std::vector<int64_t>& shape, const int32_t* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const;

 private:
  struct Entry {
    Dtype dtype;
    std::vector<int64_t> shape;
    const void* data;
    bool convert_f32_to_bf16;
  };
  void add(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape, const void* data,
           bool convert);
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kdtrain::io
