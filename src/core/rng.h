// A small portable PRNG (splitmix64) and a Box-Muller normal sampler, so that
// initialisation and data order are bit-identical across compilers and libcs
// (std:: distributions are implementation-defined).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace kdtrain {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() is safe.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Jumps over n calls of next() (the state advances by a constant per call), so
  // parallel loops can draw exactly the sequence one thread would.
  void skip(uint64_t n) { state_ += n * 0x9E3779B97F4A7C15ull; }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

// FNV-1a of a string, for deriving per-tensor seeds from names.
inline uint64_t hash_string(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace kdtrain
