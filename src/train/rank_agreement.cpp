#include "train/rank_agreement.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/resume_checks.h"

namespace kdtrain {

namespace {

using nlohmann::json;

// Paths whose spelling may differ between nodes (other mounts): compared by content instead.
const char* const kContentKeys[] = {"data.train", "data.val", "kd.teacher", "kd.teacher_cache"};

std::map<std::string, json> facts_of(const RankFacts& f) {
  std::map<std::string, json> flat;
  flatten_json(to_json(f.config), "", &flat);
  for (const char* key : kContentKeys) flat.erase(key);
  flat["(data.train content fingerprint)"] = std::to_string(f.data_fingerprint);
  flat["(teacher fingerprint)"] = f.teacher_fingerprint;
  flat["(resumed step)"] = f.start_step;
  return flat;
}

std::string differences(const std::map<std::string, json>& root, const std::map<std::string, json>& other, int rank) {
  std::string list;
  for (const auto& [key, value] : root) {
    const auto it = other.find(key);
    const json theirs = it == other.end() ? json() : it->second;
    if (theirs != value)
      list += "\n  " + key + ": " + value.dump() + " on rank 0, " + theirs.dump() + " on rank " + std::to_string(rank);
  }
  for (const auto& [key, value] : other)
    if (!root.count(key)) list += "\n  " + key + ": unset on rank 0, " + value.dump() + " on rank " + std::to_string(rank);
  return list;
}

}  // namespace

void require_ranks_agree(dist::Communicator& comm, const RankFacts& mine) {
  if (comm.world() == 1) return;
  const std::map<std::string, json> own = facts_of(mine);
  const std::string text = json(own).dump();
  std::string report;
  for (int r = 1; r < comm.world(); ++r) {
    const std::string theirs = dist::broadcast_string(comm, comm.rank() == r ? text : std::string(), r);
    if (comm.rank() == 0) report += differences(own, json::parse(theirs).get<std::map<std::string, json>>(), r);
  }
  if (!comm.any(!report.empty())) return;
  if (comm.rank() != 0) {
    comm.barrier();  // rank 0 reports and ends the job; its abort ends this wait
    fail("the ranks of this job disagree on their config, data or teacher (rank 0 names the differences)");
  }
  fail("the ranks of this job were started with different configs, data or teachers; nothing was written. "
       "Differences from rank 0:", report, "\nStart every rank with the same config and data.");
}

}  // namespace kdtrain
