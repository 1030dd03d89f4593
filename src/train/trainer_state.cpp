#include "train/trainer_state.h"

#include <cerrno>
#include <cstdlib>

#include "config/limits.h"
#include "core/error.h"

namespace kdtrain {

using nlohmann::json;

namespace {

int64_t integer_in(const json& doc, const char* key, int64_t lo, int64_t hi, const std::string& source) {
  KD_CHECK(doc.contains(key), source, ": missing key '", key, "'");
  const json& v = doc[key];
  KD_CHECK(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)), source,
           ": key '", key, "' must be an integer, got ", v.dump());
  const int64_t x = v.get<int64_t>();
  KD_CHECK(x >= lo && x <= hi, source, ": key '", key, "' is ", x, ", outside [", lo, ", ", hi, "]");
  return x;
}

}  // namespace

json trainer_state_json(const TrainingState& s, int world_size) {
  json doc;
  doc["step"] = s.step;
  doc["skipped_steps"] = s.skipped_steps;
  doc["consecutive_skips"] = s.consecutive_skips;
  doc["sampler"] = s.sampler;
  doc["data_fingerprint"] = std::to_string(s.data_fingerprint);
  doc["teacher_fingerprint"] = s.teacher_fingerprint;
  doc["world_size"] = world_size;
  if (!s.pending_metrics.empty()) doc["pending_metrics"] = s.pending_metrics;
  return doc;
}

void parse_trainer_state(const json& doc, const std::string& source, TrainingState* s) {
  KD_CHECK(doc.is_object(), source, ": must be a JSON object");
  // A checkpoint is written after at least one step.
  s->step = integer_in(doc, "step", 1, SizeLimits::steps, source);
  s->skipped_steps = integer_in(doc, "skipped_steps", 0, s->step, source);
  s->consecutive_skips =
      doc.contains("consecutive_skips") ? integer_in(doc, "consecutive_skips", 0, s->skipped_steps, source) : 0;
  s->world_size = doc.contains("world_size") ? integer_in(doc, "world_size", 1, SizeLimits::batch, source) : 1;
  KD_CHECK(doc.contains("sampler") && doc["sampler"].is_object(), source, ": key 'sampler' must be an object");
  s->sampler = doc["sampler"];
  KD_CHECK(doc.contains("data_fingerprint") && doc["data_fingerprint"].is_string(), source,
           ": key 'data_fingerprint' must be a string of decimal digits");
  const std::string fp = doc["data_fingerprint"].get<std::string>();
  KD_CHECK(!fp.empty() && fp.size() <= 20 && fp.find_first_not_of("0123456789") == std::string::npos, source,
           ": key 'data_fingerprint' is '", fp, "', not a 64-bit decimal number");
  errno = 0;
  const unsigned long long value = std::strtoull(fp.c_str(), nullptr, 10);
  KD_CHECK(errno == 0, source, ": key 'data_fingerprint' is '", fp, "', not a 64-bit decimal number");
  s->data_fingerprint = value;
  s->teacher_fingerprint.clear();
  if (doc.contains("teacher_fingerprint")) {
    KD_CHECK(doc["teacher_fingerprint"].is_string(), source, ": key 'teacher_fingerprint' must be a string");
    s->teacher_fingerprint = doc["teacher_fingerprint"].get<std::string>();
  }
  s->pending_metrics = json::array();
  if (doc.contains("pending_metrics")) {
    const json& pending = doc["pending_metrics"];
    KD_CHECK(pending.is_array(), source, ": key 'pending_metrics' must be a list of records");
    for (const json& record : pending)
      KD_CHECK(record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
                   record["step"].get<int64_t>() >= 1 && record["step"].get<int64_t>() <= s->step,
               source, ": key 'pending_metrics' holds a record without a step in [1, ", s->step, "]");
    s->pending_metrics = pending;
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    static const char* const kKnown[] = {"step", "skipped_steps", "consecutive_skips", "world_size", "sampler",
                                         "data_fingerprint", "teacher_fingerprint", "pending_metrics"};
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    KD_CHECK(known, source, ": unknown key '", it.key(), "'");
  }
}

}  // namespace kdtrain
