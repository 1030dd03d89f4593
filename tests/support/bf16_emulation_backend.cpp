#include "support/bf16_emulation_backend.h"

namespace kdtrain::cudatest {

std::unique_ptr<Backend> make_bf16_emulation_backend() { return std::make_unique<Bf16EmulationBackend>(); }

}  // namespace kdtrain::cudatest
