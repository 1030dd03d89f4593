// TEMPORARY: lets the config-info branch link kdtrain before the CPU backend
// lands. Drop this file at merge; the real make_cpu_backend replaces it.
#include <memory>

#include "backend/backend.h"
#include "core/error.h"

namespace kdtrain {

std::unique_ptr<Backend> make_cpu_backend(int64_t threads) {
  (void)threads;
  fail("the CPU backend is not part of this build (config-info branch stub)");
}

}  // namespace kdtrain
