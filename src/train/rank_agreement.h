// One validation pass on every rank, and agreement before anything is written.
// Every rank of a job resolves its own config, lists its own data
// and loads its own teacher; ranks started with different configs (another
// learning rate, another seed) or seeing different data would train together
// without a word. So, after every rank has checked everything it can on its
// own and before rank 0 creates, rewinds or writes anything in the run
// directory, each rank's facts go to rank 0, which compares them with its own.
// A difference ends the job naming the rank and each key that differs; a rank
// that failed its own checks has already ended it, before anything was written.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"
#include "dist/communicator.h"

namespace kdtrain {

struct RankFacts {
  const Config& config;            // resolved; compared key by key, paths by their content below
  uint64_t data_fingerprint = 0;   // data.train's content, as listed on this rank
  std::string teacher_fingerprint; // "" without a teacher
  int64_t start_step = 0;          // 0, or the step a resume starts from
};

// Collective. Returns when every rank's facts equal rank 0's; otherwise throws
// on rank 0 with the differences, while the other ranks wait for its abort.
void require_ranks_agree(dist::Communicator& comm, const RankFacts& mine);

}  // namespace kdtrain
