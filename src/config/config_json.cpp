// JSON <-> Config. Every key is read by one line below that states its type and
// range; anything else in the document (unknown section or key, wrong type,
// value out of range) is an error naming "<source>: <section.key>".
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "io/json_parse.h"

namespace kdtrain {

using nlohmann::json;

namespace {

const char* type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a float";
  if (v.is_boolean()) return "a boolean";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

// Reads the keys of one JSON object. Each handler consumes its key; after all
// handlers ran, any key left over is unknown.
class Section {
 public:
  Section(const json& object, std::string path, std::string source)
      : object_(object), path_(std::move(path)), source_(std::move(source)) {
    if (!object_.is_object())
      fail(source_, ": ", path_, ": expected an object, got ", type_name(object_));
  }

  [[noreturn]] void error(const std::string& key, const std::string& what) const {
    fail(source_, ": ", path_, ".", key, ": ", what);
  }

  // Calls `handle` with the value when `key` is present.
  void on(const std::string& key, const std::function<void(const json&)>& handle) {
    known_.push_back(key);
    auto it = object_.find(key);
    if (it == object_.end()) return;
    try {
      handle(*it);
    } catch (const Error& e) {
      const std::string msg = e.what();
      // Messages from nested readers already carry the source; others get it here.
      if (msg.rfind(source_ + ": ", 0) == 0) throw;
      error(key, msg);
    }
  }

  void integer(const std::string& key, int64_t& out, int64_t min_value) {
    on(key, [&](const json& v) {
      if (!v.is_number_integer()) error(key, std::string("expected an integer, got ") + type_name(v));
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
        error(key, "value too large");
      const int64_t x = v.get<int64_t>();
      if (x < min_value)
        error(key, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
      out = x;
    });
  }

  void unsigned_integer(const std::string& key, uint64_t& out) {
    on(key, [&](const json& v) {
      if (!v.is_number_integer()) error(key, std::string("expected an integer, got ") + type_name(v));
      if (!v.is_number_unsigned()) error(key, "must be >= 0, got " + v.dump());
      out = v.get<uint64_t>();
    });
  }

  // `lo`/`hi` bound the value; `lo_open`/`hi_open` exclude the bound itself.
  void number(const std::string& key, double& out, double lo, bool lo_open, double hi,
              bool hi_open) {
    on(key, [&](const json& v) {
      if (!v.is_number()) error(key, std::string("expected a number, got ") + type_name(v));
      const double x = v.get<double>();
      const bool below = lo_open ? !(x > lo) : !(x >= lo);
      const bool above = hi_open ? !(x < hi) : !(x <= hi);
      if (!std::isfinite(x) || below || above) {
        std::ostringstream range;
        range << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
        error(key, "must be in " + range.str() + ", got " + v.dump());
      }
      out = x;
    });
  }

  void boolean(const std::string& key, bool& out) {
    on(key, [&](const json& v) {
      if (!v.is_boolean()) error(key, std::string("expected true or false, got ") + type_name(v));
      out = v.get<bool>();
    });
  }

  // A string; `choices` (when not empty) lists the accepted values.
  void string(const std::string& key, std::string& out, const std::vector<std::string>& choices = {}) {
    on(key, [&](const json& v) {
      if (!v.is_string()) error(key, std::string("expected a string, got ") + type_name(v));
      const std::string s = v.get<std::string>();
      if (!choices.empty()) {
        bool ok = false;
        std::string list;
        for (const std::string& c : choices) {
          ok = ok || s == c;
          list += (list.empty() ? "" : ", ") + c;
        }
        if (!ok) error(key, "unknown value '" + s + "' (choices: " + list + ")");
      }
      out = s;
    });
  }

  // An enum spelled as a string, parsed by `parse` (which names the choices).
  template <typename E>
  void enumeration(const std::string& key, E& out, E (*parse)(const std::string&)) {
    on(key, [&](const json& v) {
      if (!v.is_string()) error(key, std::string("expected a string, got ") + type_name(v));
      out = parse(v.get<std::string>());
    });
  }

  // A string or a list of strings.
  void string_list(const std::string& key, std::vector<std::string>& out) {
    on(key, [&](const json& v) {
      std::vector<std::string> items;
      if (v.is_string()) {
        items.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const json& item : v) {
          if (!item.is_string())
            error(key, std::string("expected a string or a list of strings, got a list with ") +
                           type_name(item));
          items.push_back(item.get<std::string>());
        }
      } else {
        error(key, std::string("expected a string or a list of strings, got ") + type_name(v));
      }
      out = std::move(items);
    });
  }

  // Throws on the first key no handler claimed.
  void finish() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool known = false;
      for (const std::string& k : known_) known = known || k == it.key();
      if (!known) {
        std::string list;
        for (const std::string& k : known_) list += (list.empty() ? "" : ", ") + k;
        fail(source_, ": ", path_, ".", it.key(), ": unknown key (known keys of ", path_, ": ",
             list, ")");
      }
    }
  }

  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }

 private:
  const json& object_;
  std::string path_;
  std::string source_;
  std::vector<std::string> known_;
};

constexpr double kInf = HUGE_VAL;

void read_rope_scaling(RopeScaling& r, const json& v, const std::string& source) {
  Section s(v, "model.rope_scaling", source);
  s.string("type", r.type, {"default", "llama3"});
  s.number("factor", r.factor, 0.0, true, kInf, true);
  s.number("low_freq_factor", r.low_freq_factor, 0.0, true, kInf, true);
  s.number("high_freq_factor", r.high_freq_factor, 0.0, true, kInf, true);
  s.integer("original_max_position_embeddings", r.original_max_position_embeddings, 1);
  s.finish();
}

void read_model(ModelConfig& m, const json& v, const std::string& source) {
  Section s(v, "model", source);
  // The preset comes first so the file's other model keys override it.
  s.on("preset", [&](const json& p) {
    if (!p.is_string()) s.error("preset", std::string("expected a string, got ") + type_name(p));
    const std::string name = p.get<std::string>();
    if (name.empty()) return;
    const std::string init = m.init;
    m = model_preset(name);
    m.init = init;
  });
  s.string("init", m.init);
  s.string("family", m.family, {"llama", "qwen2"});
  s.integer("hidden_size", m.hidden_size, 1);
  s.integer("intermediate_size", m.intermediate_size, 1);
  s.integer("num_hidden_layers", m.num_hidden_layers, 1);
  s.integer("num_attention_heads", m.num_attention_heads, 1);
  s.integer("num_key_value_heads", m.num_key_value_heads, 1);
  s.integer("head_dim", m.head_dim, 1);
  s.integer("vocab_size", m.vocab_size, 1);
  s.integer("max_position_embeddings", m.max_position_embeddings, 1);
  s.number("rms_norm_eps", m.rms_norm_eps, 0.0, true, 1.0, true);
  s.number("rope_theta", m.rope_theta, 0.0, true, kInf, true);
  s.on("rope_scaling", [&](const json& r) { read_rope_scaling(m.rope_scaling, r, source); });
  s.boolean("tie_word_embeddings", m.tie_word_embeddings);
  s.boolean("attention_bias", m.attention_bias);
  s.number("initializer_range", m.initializer_range, 0.0, true, kInf, true);
  s.finish();
}

void read_attention(AttentionConfig& a, const json& v, const std::string& source) {
  Section s(v, "attention", source);
  s.enumeration("variant", a.variant, &parse_attention_variant);
  s.enumeration("alpha_activation", a.alpha_activation, &parse_alpha_activation);
  s.number("alpha_momentum", a.alpha_momentum, 0.0, false, 1.0, true);
  s.number("sink_init_std", a.sink_init_std, 0.0, false, kInf, true);
  s.finish();
}

void read_kd(KdConfig& k, const json& v, const std::string& source) {
  Section s(v, "kd", source);
  s.string("teacher", k.teacher);
  s.string("teacher_cache", k.teacher_cache);
  s.string("cache_tail", k.cache_tail, {"renormalize", "bucket"});
  s.enumeration("loss", k.loss, &parse_kd_loss);
  s.number("temperature", k.temperature, 0.0, true, kInf, true);
  s.number("weight", k.weight, 0.0, false, 1.0, false);
  s.integer("chunk_tokens", k.chunk_tokens, 0);
  s.finish();
}

void read_optimizer(OptimizerConfig& o, const json& v, const std::string& source) {
  Section s(v, "optimizer", source);
  s.number("lr", o.lr, 0.0, true, kInf, true);
  s.number("beta1", o.beta1, 0.0, false, 1.0, true);
  s.number("beta2", o.beta2, 0.0, false, 1.0, true);
  s.number("eps", o.eps, 0.0, true, kInf, true);
  s.number("weight_decay", o.weight_decay, 0.0, false, kInf, true);
  s.number("grad_clip", o.grad_clip, -kInf, true, kInf, true);  // <= 0 disables
  s.finish();
}

void read_schedule(ScheduleConfig& c, const json& v, const std::string& source) {
  Section s(v, "schedule", source);
  s.enumeration("kind", c.kind, &parse_schedule_kind);
  s.integer("warmup", c.warmup, 0);
  s.number("decay_fraction", c.decay_fraction, 0.0, false, 1.0, false);
  s.enumeration("decay_shape", c.decay_shape, &parse_decay_shape);
  s.number("min_lr_ratio", c.min_lr_ratio, 0.0, false, 1.0, false);
  s.finish();
}

void read_data(DataConfig& d, const json& v, const std::string& source) {
  Section s(v, "data", source);
  s.string_list("train", d.train);
  s.string_list("val", d.val);
  s.finish();
}

void read_train(TrainConfig& t, const json& v, const std::string& source) {
  Section s(v, "train", source);
  s.integer("steps", t.steps, 1);
  s.integer("global_batch", t.global_batch, 1);
  s.integer("micro_batch", t.micro_batch, 1);
  s.integer("seq_len", t.seq_len, 1);
  s.unsigned_integer("seed", t.seed);
  s.string("device", t.device, {"cpu", "cuda"});
  s.enumeration("on_nonfinite", t.on_nonfinite, &parse_nonfinite_policy);
  s.integer("max_consecutive_skips", t.max_consecutive_skips, 1);
  s.integer("threads", t.threads, 0);
  s.finish();
}

void read_checkpoint(CheckpointConfig& c, const json& v, const std::string& source) {
  Section s(v, "checkpoint", source);
  s.integer("interval", c.interval, 0);
  s.integer("keep", c.keep, 1);
  s.finish();
}

void read_log(LogConfig& c, const json& v, const std::string& source) {
  Section s(v, "log", source);
  s.integer("interval", c.interval, 1);
  s.finish();
}

void read_eval(EvalConfig& c, const json& v, const std::string& source) {
  Section s(v, "eval", source);
  s.integer("interval", c.interval, 0);
  s.integer("batches", c.batches, 1);
  s.finish();
}

void read_dist(DistConfig& c, const json& v, const std::string& source) {
  Section s(v, "dist", source);
  s.enumeration("backend", c.backend, &parse_dist_backend);
  s.boolean("zero1", c.zero1);
  s.number("timeout_s", c.timeout_s, 0.0, true, kInf, true);
  s.number("bucket_mb", c.bucket_mb, 0.0, true, 4096.0, true);
  s.boolean("overlap", c.overlap);
  s.enumeration("reduce_dtype", c.reduce_dtype, &parse_reduce_dtype);
  s.finish();
}

}  // namespace

void apply_json(Config& c, const json& doc, const std::string& source) {
  if (!doc.is_object()) fail(source, ": expected a JSON object at the top level, got ", type_name(doc));
  const std::map<std::string, std::function<void(const json&)>> sections = {
      {"model", [&](const json& v) { read_model(c.model, v, source); }},
      {"attention", [&](const json& v) { read_attention(c.attention, v, source); }},
      {"kd", [&](const json& v) { read_kd(c.kd, v, source); }},
      {"optimizer", [&](const json& v) { read_optimizer(c.optimizer, v, source); }},
      {"schedule", [&](const json& v) { read_schedule(c.schedule, v, source); }},
      {"data", [&](const json& v) { read_data(c.data, v, source); }},
      {"train", [&](const json& v) { read_train(c.train, v, source); }},
      {"checkpoint", [&](const json& v) { read_checkpoint(c.checkpoint, v, source); }},
      {"log", [&](const json& v) { read_log(c.log, v, source); }},
      {"eval", [&](const json& v) { read_eval(c.eval, v, source); }},
      {"dist", [&](const json& v) { read_dist(c.dist, v, source); }},
  };
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    auto section = sections.find(it.key());
    if (section == sections.end()) {
      std::string list;
      for (const auto& entry : sections) list += (list.empty() ? "" : ", ") + entry.first;
      fail(source, ": ", it.key(), ": unknown section (known sections: ", list, ")");
    }
  }
  // Fixed order (model first) so a preset never overrides another section's keys.
  for (const char* name : {"model", "attention", "kd", "optimizer", "schedule", "data", "train",
                           "checkpoint", "log", "eval", "dist"}) {
    auto it = doc.find(name);
    if (it != doc.end()) sections.at(name)(*it);
  }
}

json to_json(const Config& c) {
  const ModelConfig& m = c.model;
  json rope = {{"type", m.rope_scaling.type},
               {"factor", m.rope_scaling.factor},
               {"low_freq_factor", m.rope_scaling.low_freq_factor},
               {"high_freq_factor", m.rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings}};
  json doc;
  doc["model"] = {{"preset", m.preset},
                  {"init", m.init},
                  {"family", m.family},
                  {"hidden_size", m.hidden_size},
                  {"intermediate_size", m.intermediate_size},
                  {"num_hidden_layers", m.num_hidden_layers},
                  {"num_attention_heads", m.num_attention_heads},
                  {"num_key_value_heads", m.num_key_value_heads},
                  {"head_dim", m.head_dim},
                  {"vocab_size", m.vocab_size},
                  {"max_position_embeddings", m.max_position_embeddings},
                  {"rms_norm_eps", m.rms_norm_eps},
                  {"rope_theta", m.rope_theta},
                  {"rope_scaling", rope},
                  {"tie_word_embeddings", m.tie_word_embeddings},
                  {"attention_bias", m.attention_bias},
                  {"initializer_range", m.initializer_range}};
  const AttentionConfig& a = c.attention;
  doc["attention"] = {{"variant", to_string(a.variant)},
                      {"alpha_activation", to_string(a.alpha_activation)},
                      {"alpha_momentum", a.alpha_momentum},
                      {"sink_init_std", a.sink_init_std}};
  const KdConfig& k = c.kd;
  doc["kd"] = {{"teacher", k.teacher},         {"teacher_cache", k.teacher_cache},
               {"cache_tail", k.cache_tail},   {"loss", to_string(k.loss)},
               {"temperature", k.temperature}, {"weight", k.weight},
               {"chunk_tokens", k.chunk_tokens}};
  const OptimizerConfig& o = c.optimizer;
  doc["optimizer"] = {{"lr", o.lr},   {"beta1", o.beta1},
                      {"beta2", o.beta2}, {"eps", o.eps},
                      {"weight_decay", o.weight_decay}, {"grad_clip", o.grad_clip}};
  const ScheduleConfig& s = c.schedule;
  doc["schedule"] = {{"kind", to_string(s.kind)},
                     {"warmup", s.warmup},
                     {"decay_fraction", s.decay_fraction},
                     {"decay_shape", to_string(s.decay_shape)},
                     {"min_lr_ratio", s.min_lr_ratio}};
  doc["data"] = {{"train", c.data.train}, {"val", c.data.val}};
  const TrainConfig& t = c.train;
  doc["train"] = {{"steps", t.steps},
                  {"global_batch", t.global_batch},
                  {"micro_batch", t.micro_batch},
                  {"seq_len", t.seq_len},
                  {"seed", t.seed},
                  {"device", t.device},
                  {"on_nonfinite", to_string(t.on_nonfinite)},
                  {"max_consecutive_skips", t.max_consecutive_skips},
                  {"threads", t.threads}};
  doc["checkpoint"] = {{"interval", c.checkpoint.interval}, {"keep", c.checkpoint.keep}};
  doc["log"] = {{"interval", c.log.interval}};
  doc["eval"] = {{"interval", c.eval.interval}, {"batches", c.eval.batches}};
  doc["dist"] = {{"backend", to_string(c.dist.backend)}, {"zero1", c.dist.zero1},
                 {"timeout_s", c.dist.timeout_s},        {"bucket_mb", c.dist.bucket_mb},
                 {"overlap", c.dist.overlap},            {"reduce_dtype", to_string(c.dist.reduce_dtype)}};
  return doc;
}

void apply_override(Config& c, const std::string& assignment) {
  const std::string source = "--set '" + assignment + "'";
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    fail(source, ": expected section.key=value (no '=' found)");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() < 2)
    fail(source, ": ", key, ": expected section.key=value (the key needs a section, e.g. optimizer.lr)");
  for (const std::string& p : parts)
    if (p.empty()) fail(source, ": ", key, ": empty component in the key path");
  json value;
  std::string why;
  const io::JsonProblem problem = io::try_parse_json(text, &value, &why);
  // Text that is not JSON is taken as a string; a JSON object with a repeated key is a mistake.
  if (problem == io::JsonProblem::syntax) value = text;
  else if (problem != io::JsonProblem::none) fail(source, ": ", why);
  // Build {"section": {"key": value}} (or deeper) and apply it like a file.
  json doc = value;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) doc = json{{*it, doc}};
  apply_json(c, doc, source);
}

}  // namespace kdtrain
