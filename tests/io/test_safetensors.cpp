#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "io/safetensors.h"
#include "support/temp_dir.h"
#include "support/test_common.h"

using namespace kdtrain;
using namespace kdtrain::io;

namespace {

using kdtrain::testing::TempDir;

// Writes a raw safetensors file from a header string and a data buffer.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               uint64_t header_len_override = 0) {
  std::ofstream out(path, std::ios::binary);
  uint64_t len = header_len_override ? header_len_override : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << header << data;
}

std::string error_of(const std::string& path) {
  return testing::error_message([&] { SafetensorsFile f(path); });
}

}  // namespace

TEST_CASE("safetensors: fp32 round trip with metadata and several tensors", "[safetensors]") {
  TempDir dir;
  std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-20f, -7.0f};
  std::vector<float> b = {42.0f};
  std::vector<int32_t> c = {1, -2, 2147483647};
  SafetensorsWriter w;
  w.add_f32("z.weight", {2, 3}, a.data());
  w.add_f32("a.scalar", {}, b.data());
  w.add_i32("m.ids", {3}, c.data());
  w.set_metadata("format", "pt");
  w.set_metadata("note", "hello");
  const std::string path = dir.file("model.safetensors");
  w.write(path);
  REQUIRE_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));

  SafetensorsFile f(path);
  REQUIRE(f.names() == std::vector<std::string>{"a.scalar", "m.ids", "z.weight"});
  REQUIRE(f.metadata().at("format") == "pt");
  REQUIRE(f.metadata().at("note") == "hello");
  REQUIRE(f.read_f32("z.weight") == a);
  REQUIRE(f.tensor("z.weight").shape == std::vector<int64_t>{2, 3});
  REQUIRE(f.tensor("a.scalar").shape.empty());
  REQUIRE(f.read_f32("a.scalar") == b);
  const TensorView& ids = f.tensor("m.ids");
  REQUIRE(ids.dtype == Dtype::I32);
  std::vector<int32_t> back(3);
  std::memcpy(back.data(), ids.data, 12);
  REQUIRE(back == c);
  REQUIRE_THROWS_WITH(f.read_f32("m.ids"), Contains("m.ids") && Contains("I32"));
  REQUIRE_THROWS_WITH(f.tensor("nope"), Contains("nope") && Contains(path));

  // The header is padded to 8 bytes so the data buffer is aligned.
  std::ifstream in(path, std::ios::binary);
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  REQUIRE(len_bytes[0] % 8 == 0);
}

TEST_CASE("safetensors: bf16 rounds to nearest even", "[safetensors]") {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
  REQUIRE(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  REQUIRE(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  // Just above halfway rounds up.
  REQUIRE(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  REQUIRE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  REQUIRE(float_to_bf16(-2.0f) == 0xc000);

  TempDir dir;
  std::vector<float> v = {1.0f + std::ldexp(1.0f, -8), 3.14159f, -0.001f};
  SafetensorsWriter w;
  w.add_f32_as_bf16("x", {3}, v.data());
  w.write(dir.file("b.safetensors"));
  SafetensorsFile f(dir.file("b.safetensors"));
  REQUIRE(f.tensor("x").dtype == Dtype::BF16);
  std::vector<float> back = f.read_f32("x");
  for (size_t i = 0; i < v.size(); ++i) {
    REQUIRE(back[i] == bf16_to_float(float_to_bf16(v[i])));
    REQUIRE(std::fabs(back[i] - v[i]) <= std::fabs(v[i]) * std::ldexp(1.0f, -8));
  }
}

TEST_CASE("safetensors: f16 decoding", "[safetensors]") {
  REQUIRE(f16_to_float(0x3c00) == 1.0f);
  REQUIRE(f16_to_float(0xc000) == -2.0f);
  REQUIRE(f16_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  REQUIRE(f16_to_float(0x7bff) == 65504.0f);
  REQUIRE(std::isinf(f16_to_float(0x7c00)));
  REQUIRE(std::isnan(f16_to_float(0x7e00)));
}

TEST_CASE("safetensors: corrupt files give errors naming file and tensor", "[safetensors]") {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  const std::string eight(8, '\0');

  SECTION("shorter than the length prefix") {
    std::ofstream(p, std::ios::binary) << "abc";
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("shorter"));
  }
  SECTION("header length beyond the file") {
    write_raw(p, "{}", "", 4096);
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("past the end"));
  }
  SECTION("invalid JSON") {
    write_raw(p, "{\"a\": [1, 2", "");
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("not valid JSON"));
  }
  SECTION("JSON that is not an object") {
    write_raw(p, "[1, 2]", "");
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("object"));
  }
  SECTION("unknown dtype") {
    write_raw(p, R"({"w": {"dtype": "F31", "shape": [2], "data_offsets": [0, 8]}})", eight);
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("'w'") && Contains("F31"));
  }
  SECTION("missing field") {
    write_raw(p, R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", eight);
    REQUIRE_THAT(error_of(p), Contains("'w'") && Contains("shape"));
  }
  SECTION("negative dimension") {
    write_raw(p, R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", eight);
    REQUIRE_THAT(error_of(p), Contains("'w'") && Contains("non-negative"));
  }
  SECTION("shape does not match offsets") {
    write_raw(p, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight);
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("'w'") && Contains("needs 12"));
  }
  SECTION("offsets out of bounds") {
    write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", eight);
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("'w'") && Contains("past the data buffer"));
  }
  SECTION("truncated data") {
    write_raw(p, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", eight);
    REQUIRE_THAT(error_of(p), Contains("'w'") && Contains("truncated"));
  }
  SECTION("overlapping tensors") {
    write_raw(p,
              R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
              R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
              std::string(12, '\0'));
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("'b'") && Contains("overlaps tensor 'a'"));
  }
  SECTION("gap between tensors") {
    write_raw(p, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", eight);
    REQUIRE_THAT(error_of(p), Contains("'a'") && Contains("gap"));
  }
  SECTION("trailing bytes") {
    write_raw(p, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", eight);
    REQUIRE_THAT(error_of(p), Contains(p) && Contains("trailing"));
  }
  SECTION("metadata value not a string") {
    write_raw(p, R"({"__metadata__": {"k": 3}})", "");
    REQUIRE_THAT(error_of(p), Contains("__metadata__") && Contains("'k'"));
  }
  SECTION("missing file") {
    REQUIRE_THAT(error_of(dir.file("absent.safetensors")), Contains("absent.safetensors"));
  }
}

TEST_CASE("safetensors: writer rejects duplicate names", "[safetensors]") {
  float x = 1.0f;
  SafetensorsWriter w;
  w.add_f32("x", {1}, &x);
  REQUIRE_THROWS_WITH(w.add_f32("x", {1}, &x), Contains("'x'") && Contains("twice"));
}
