#include "io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace kdtrain::io {

namespace {

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {Dtype::BOOL, "BOOL", 1},      {Dtype::U8, "U8", 1},   {Dtype::I8, "I8", 1},
    {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::F8_E5M2, "F8_E5M2", 1},
    {Dtype::U16, "U16", 2},        {Dtype::I16, "I16", 2}, {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2},      {Dtype::U32, "U32", 4}, {Dtype::I32, "I32", 4},
    {Dtype::F32, "F32", 4},        {Dtype::U64, "U64", 8}, {Dtype::I64, "I64", 8},
    {Dtype::F64, "F64", 8},
};

// The reference implementation refuses headers above 100 MB; so do we, which
// also stops a corrupt length from making us parse gigabytes of garbage.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer, or fail naming the file, tensor and field.
uint64_t json_index(const nlohmann::json& v, const std::string& path, const std::string& name,
                    const char* field) {
  KD_CHECK(v.is_number_integer(), path, ": tensor '", name, "': ", field,
           " must contain integers, got ", v.dump());
  KD_CHECK(v.is_number_unsigned() || v.get<int64_t>() >= 0, path, ": tensor '", name, "': ", field,
           " must be non-negative, got ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace

const char* dtype_name(Dtype d) {
  for (const DtypeInfo& info : kDtypes)
    if (info.dtype == d) return info.name;
  return "?";
}

bool parse_dtype(const std::string& name, Dtype* out) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) {
      *out = info.dtype;
      return true;
    }
  }
  return false;
}

size_t dtype_size(Dtype d) {
  for (const DtypeInfo& info : kDtypes)
    if (info.dtype == d) return info.size;
  return 0;
}

uint16_t float_to_bf16(float x) { return float_to_bf16_bits(x); }

float bf16_to_float(uint16_t b) { return bf16_bits_to_float(b); }

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else {
    // Zero or subnormal: value = mantissa * 2^-24, exact in fp32.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  }
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint64_t file_size = file_.size();
  KD_CHECK(file_size >= 8, path, ": not a safetensors file: ", file_size,
           " bytes is shorter than the 8-byte header length");
  const uint64_t header_len = read_u64_le(file_.data());
  KD_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len,
           " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  KD_CHECK(header_len <= file_size - 8, path, ": header length ", header_len,
           " runs past the end of the file (", file_size, " bytes): truncated or corrupt");
  const char* header_begin = reinterpret_cast<const char*>(file_.data() + 8);
  // Strict parse: a tensor named twice would otherwise silently resolve to one entry.
  nlohmann::json header;
  std::string why;
  KD_CHECK(try_parse_json(std::string_view(header_begin, header_len), &header, &why) == JsonProblem::none,
           path, ": header is not valid JSON: ", why);
  KD_CHECK(header.is_object(), path, ": header JSON must be an object, got ", header.type_name());

  const uint8_t* buffer = file_.data() + 8 + header_len;
  const uint64_t buffer_size = file_size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      KD_CHECK(entry.is_object(), path, ": __metadata__ must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        KD_CHECK(m.value().is_string(), path, ": __metadata__ key '", m.key(),
                 "' must map to a string, got ", m.value().dump());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    KD_CHECK(entry.is_object(), path, ": tensor '", name, "': entry must be an object");
    for (auto f = entry.begin(); f != entry.end(); ++f)
      KD_CHECK(f.key() == "dtype" || f.key() == "shape" || f.key() == "data_offsets", path,
               ": tensor '", name, "': unknown field '", f.key(), "'");
    KD_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), path, ": tensor '", name,
             "': missing or non-string 'dtype'");
    KD_CHECK(entry.contains("shape") && entry["shape"].is_array(), path, ": tensor '", name,
             "': missing or non-array 'shape'");
    KD_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                 entry["data_offsets"].size() == 2,
             path, ": tensor '", name, "': 'data_offsets' must be an array [begin, end]");

    TensorView view;
    view.name = name;
    const std::string dtype = entry["dtype"].get<std::string>();
    KD_CHECK(parse_dtype(dtype, &view.dtype), path, ": tensor '", name, "': unknown dtype '", dtype,
             "'");
    // Element count is bounded by the buffer, so checking against it as we go
    // keeps the product from overflowing on hostile shapes.
    uint64_t numel = 1;
    bool any_zero = false;
    for (const nlohmann::json& d : entry["shape"]) {
      uint64_t dim = json_index(d, path, name, "shape");
      view.shape.push_back(static_cast<int64_t>(dim));
      if (dim == 0) any_zero = true;
      if (!any_zero) {
        KD_CHECK(dim <= buffer_size && numel <= buffer_size / dim, path, ": tensor '", name,
                 "': shape ", entry["shape"].dump(), " is larger than the data buffer (",
                 buffer_size, " bytes)");
        numel *= dim;
      }
    }
    if (any_zero) numel = 0;
    const uint64_t begin = json_index(entry["data_offsets"][0], path, name, "data_offsets");
    const uint64_t end = json_index(entry["data_offsets"][1], path, name, "data_offsets");
    KD_CHECK(begin <= end, path, ": tensor '", name, "': data_offsets [", begin, ", ", end,
             "] has begin after end");
    const uint64_t expected = numel * dtype_size(view.dtype);
    KD_CHECK(end - begin == expected, path, ": tensor '", name, "': data_offsets [", begin, ", ",
             end, "] span ", end - begin, " bytes but shape ", entry["shape"].dump(), " of ", dtype,
             " needs ", expected);
    KD_CHECK(end <= buffer_size, path, ": tensor '", name, "': data_offsets [", begin, ", ", end,
             "] run past the data buffer (", buffer_size, " bytes): truncated or corrupt");
    view.data = buffer + begin;
    view.nbytes = static_cast<size_t>(end - begin);
    tensors_.emplace(name, std::move(view));
  }

  // Tensors sorted by offset must tile the buffer exactly: an overlap means two
  // tensors alias, a gap or trailing bytes mean the header and data disagree.
  std::vector<const TensorView*> by_offset;
  for (const auto& kv : tensors_) by_offset.push_back(&kv.second);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) {
    return a->data != b->data ? a->data < b->data : a->nbytes < b->nbytes;
  });
  uint64_t cursor = 0;
  const TensorView* previous = nullptr;
  for (const TensorView* t : by_offset) {
    const uint64_t begin = static_cast<uint64_t>(t->data - buffer);
    KD_CHECK(begin >= cursor, path, ": tensor '", t->name, "' (bytes ", begin, "..",
             begin + t->nbytes, ") overlaps tensor '", previous ? previous->name : "", "' (ending at ",
             cursor, ")");
    KD_CHECK(begin == cursor, path, ": tensor '", t->name, "' starts at byte ", begin,
             " leaving a gap after byte ", cursor, " of the data buffer");
    cursor = begin + t->nbytes;
    previous = t;
  }
  KD_CHECK(cursor == buffer_size, path, ": ", buffer_size - cursor,
           " trailing bytes after the last tensor (data buffer is ", buffer_size,
           " bytes, tensors cover ", cursor, ")");
}

int64_t first_non_finite(const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) return i;
  return -1;
}

namespace {
bool finite_at(const TensorView& t, int64_t i) {
  if (t.dtype == Dtype::F32) {
    float x;
    std::memcpy(&x, t.data + 4 * i, 4);
    return std::isfinite(x);
  }
  if (t.dtype == Dtype::BF16 || t.dtype == Dtype::F16) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    // All-ones exponent means inf or NaN in both half formats.
    return t.dtype == Dtype::BF16 ? (h & 0x7f80u) != 0x7f80u : (h & 0x7c00u) != 0x7c00u;
  }
  double x;
  std::memcpy(&x, t.data + 8 * i, 8);
  return std::isfinite(x);
}
}  // namespace

// Blocks of 1 Mi elements scanned in parallel; the smallest bad index wins, so
// the answer is the sequential scan's.
int64_t first_non_finite(const TensorView& t) {
  if (t.dtype != Dtype::F32 && t.dtype != Dtype::BF16 && t.dtype != Dtype::F16 && t.dtype != Dtype::F64)
    return -1;
  const int64_t n = t.numel();
  constexpr int64_t kBlock = int64_t(1) << 20;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  int64_t first = n;
#pragma omp parallel for schedule(dynamic, 1) reduction(min : first) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i)
      if (!finite_at(t, i)) {
        first = std::min(first, i);
        break;
      }
  }
  return first < n ? first : -1;
}

void SafetensorsFile::prefetch(const std::string& name) const {
  const TensorView& t = tensor(name);
  file_.prefetch(static_cast<size_t>(t.data - file_.data()), t.nbytes);
}

void SafetensorsFile::require_finite(const std::string& name) const {
  const int64_t bad = first_non_finite(tensor(name));
  KD_CHECK(bad < 0, path(), ": tensor '", name, "' holds a non-finite value (NaN or infinity) at element ", bad,
           "; refusing to load it");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

const TensorView& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  KD_CHECK(it != tensors_.end(), path(), ": no tensor named '", name, "'");
  return it->second;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const TensorView& t = tensor(name);
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case Dtype::F32:
      if (n > 0) std::memcpy(out.data(), t.data, n * 4);
      break;
    case Dtype::BF16:
    case Dtype::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);  // data may be unaligned
        out[i] = t.dtype == Dtype::BF16 ? bf16_to_float(h) : f16_to_float(h);
      }
      break;
    case Dtype::F64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, t.data + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    default:
      fail(path(), ": tensor '", name, "' has dtype ", dtype_name(t.dtype),
           ", which cannot be read as fp32");
  }
  return out;
}

void SafetensorsWriter::add(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape,
                            const void* data, bool convert) {
  KD_CHECK(!name.empty() && name != "__metadata__", "safetensors writer: invalid tensor name '",
           name, "'");
  KD_CHECK(entries_.count(name) == 0, "safetensors writer: tensor '", name, "' added twice");
  for (int64_t d : shape)
    KD_CHECK(d >= 0, "safetensors writer: tensor '", name, "' has a negative dimension");
  entries_[name] = Entry{dtype, shape, data, convert};
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                                const float* data) {
  add(name, Dtype::F32, shape, data, false);
}
void SafetensorsWriter::add_f32_as_bf16(const std::string& name, const std::vector<int64_t>& shape,
                                        const float* data) {
  add(name, Dtype::BF16, shape, data, true);
}
void SafetensorsWriter::add_bf16(const std::string& name, const std::vector<int64_t>& shape,
                                 const uint16_t* data) {
  add(name, Dtype::BF16, shape, data, false);
}
void SafetensorsWriter::add_i32(const std::string& name, const std::vector<int64_t>& shape,
                                const int32_t* data) {
  add(name, Dtype::I32, shape, data, false);
}

void SafetensorsWriter::write(const std::string& path) const {
  // nlohmann::json objects keep keys sorted, matching the data order below.
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, e] : entries_) {
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t bytes = numel * dtype_size(e.dtype);
    header[name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  // Padding with spaces (valid JSON whitespace) makes the data buffer start
  // 8-byte aligned, so F32/I64 tensors in a mapped file are naturally aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFileWriter out(path);
  uint8_t len_bytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  out.write(len_bytes, 8);
  out.write(text.data(), text.size());
  std::vector<uint16_t> converted;
  for (const auto& [name, e] : entries_) {
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    if (numel == 0) continue;
    if (e.convert_f32_to_bf16) {
      const float* src = static_cast<const float*>(e.data);
      converted.resize(numel);
      for (uint64_t i = 0; i < numel; ++i) converted[i] = float_to_bf16(src[i]);
      out.write(converted.data(), numel * 2);
    } else {
      KD_CHECK(e.data != nullptr, path, ": tensor '", name, "' has no data");
      out.write(e.data, numel * dtype_size(e.dtype));
    }
  }
  out.commit();
}

}  // namespace kdtrain::io
