// JSON <-> Config through the visitors of config_fields.h: JsonReader checks each
// key's type and range as it reads it; anything else in the document (unknown
// section or key, wrong type, value out of range) is an error naming
// "<source>: <section.key>". JsonWriter writes every key; KeyLister lists them.
#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_fields.h"
#include "core/error.h"
#include "core/json_parse.h"

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

std::string range_text(const Range& r) {
  std::ostringstream out;
  out << (r.lo_open ? "(" : "[") << r.lo << ", " << r.hi << (r.hi_open ? ")" : "]");
  return out.str();
}

bool in_range(double x, const Range& r) {
  const bool below = r.lo_open ? !(x > r.lo) : !(x >= r.lo);
  const bool above = r.hi_open ? !(x < r.hi) : !(x <= r.hi);
  return std::isfinite(x) && !below && !above;
}

std::string joined(const std::vector<std::string>& items) {
  std::string list;
  for (const std::string& k : items) list += (list.empty() ? "" : ", ") + k;
  return list;
}

// The keys a section declares, in order.
struct KeyNames {
  std::vector<std::string> keys;
  void integer(const char* key, int64_t&, int64_t, const char*) { keys.emplace_back(key); }
  void seed(const char* key, uint64_t&, const char*) { keys.emplace_back(key); }
  void number(const char* key, double&, Range, const char*) { keys.emplace_back(key); }
  void boolean(const char* key, bool&, const char*) { keys.emplace_back(key); }
  void text(const char* key, std::string&, const char*) { keys.emplace_back(key); }
  template <typename E>
  void choice(const char* key, E&, const char*) { keys.emplace_back(key); }
  void text_list(const char* key, std::vector<std::string>&, const char*) { keys.emplace_back(key); }
  template <typename S>
  void section(const char* key, S&, const char*) { keys.emplace_back(key); }
  void preset(const char* key, ModelConfig&, const char*) { keys.emplace_back(key); }
};

template <typename S>
std::vector<std::string> keys_of(S& section) {
  KeyNames names;
  visit(names, section);
  return names.keys;
}

// Reads the keys of one JSON object into a section: each key present is checked
// and stored; after the visit, finish() refuses any key the section lacks.
class JsonReader {
 public:
  // quote_keys: errors say "key 'name': ..." as the other config.json readers do.
  JsonReader(const json& object, std::string path, std::string source, bool quote_keys = false)
      : object_(object), path_(std::move(path)), source_(std::move(source)), quote_keys_(quote_keys) {
    if (!object_.is_object())
      fail(source_, ": ", path_, ": expected an object, got ", type_name(object_));
  }

  void integer(const char* key, int64_t& out, int64_t min_value, const char*) {
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
  void seed(const char* key, uint64_t& out, const char*) {
    on(key, [&](const json& v) {
      if (!v.is_number_integer()) error(key, std::string("expected an integer, got ") + type_name(v));
      if (!v.is_number_unsigned()) error(key, "must be >= 0, got " + v.dump());
      out = v.get<uint64_t>();
    });
  }
  void number(const char* key, double& out, Range range, const char*) {
    on(key, [&](const json& v) {
      if (!v.is_number()) error(key, std::string("expected a number, got ") + type_name(v));
      const double x = v.get<double>();
      if (!in_range(x, range)) error(key, "must be in " + range_text(range) + ", got " + v.dump());
      out = x;
    });
  }
  void boolean(const char* key, bool& out, const char*) {
    on(key, [&](const json& v) {
      if (!v.is_boolean()) error(key, std::string("expected true or false, got ") + type_name(v));
      out = v.get<bool>();
    });
  }
  void text(const char* key, std::string& out, const char*) {
    on(key, [&](const json& v) { out = string_of(key, v); });
  }
  template <typename E>
  void choice(const char* key, E& out, const char*) {
    on(key, [&](const json& v) { out = parse_choice<E>(string_of(key, v)); });
  }
  void text_list(const char* key, std::vector<std::string>& out, const char*) {
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
  template <typename S>
  void section(const char* key, S& out, const char*) {
    on(key, [&](const json& v) {
      JsonReader inner(v, path_of(key), source_);
      visit(inner, out);
      inner.finish(keys_of(out));
    });
  }
  // An empty name keeps the model as it is.
  void preset(const char* key, ModelConfig& m, const char*) {
    on(key, [&](const json& v) {
      const std::string name = string_of(key, v);
      if (name.empty()) return;
      const std::string init = m.init;
      m = model_preset(name);
      m.init = init;
    });
  }

  // Throws on the first key of the object that is not in `known`.
  void finish(const std::vector<std::string>& known) const {
    for (auto it = object_.begin(); it != object_.end(); ++it)
      if (std::find(known.begin(), known.end(), it.key()) == known.end())
        fail(source_, ": ", path_of(it.key()), ": unknown key (known keys of ", path_, ": ",
             joined(known), ")");
  }

 private:
  [[noreturn]] void error(const std::string& key, const std::string& what) const {
    if (quote_keys_) fail(source_, ": key '", path_of(key), "': ", what);
    fail(source_, ": ", path_of(key), ": ", what);
  }
  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  std::string string_of(const std::string& key, const json& v) const {
    if (!v.is_string()) error(key, std::string("expected a string, got ") + type_name(v));
    return v.get<std::string>();
  }
  // Calls `handle` with the value when `key` is present.
  void on(const std::string& key, const std::function<void(const json&)>& handle) {
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

  const json& object_;
  std::string path_;
  std::string source_;
  bool quote_keys_;
};

// Writes every key of a section.
class JsonWriter {
 public:
  json out = json::object();
  void integer(const char* key, int64_t& v, int64_t, const char*) { out[key] = v; }
  void seed(const char* key, uint64_t& v, const char*) { out[key] = v; }
  void number(const char* key, double& v, Range, const char*) { out[key] = v; }
  void boolean(const char* key, bool& v, const char*) { out[key] = v; }
  void text(const char* key, std::string& v, const char*) { out[key] = v; }
  template <typename E>
  void choice(const char* key, E& v, const char*) { out[key] = to_string(v); }
  void text_list(const char* key, std::vector<std::string>& v, const char*) { out[key] = v; }
  template <typename S>
  void section(const char* key, S& v, const char*) {
    JsonWriter inner;
    visit(inner, v);
    out[key] = std::move(inner.out);
  }
  void preset(const char* key, ModelConfig& m, const char*) { out[key] = m.preset; }
};

// Lists every key with its default (the value in the visited config), and the
// top-level sections.
class KeyLister {
 public:
  std::vector<ConfigKey> keys, sections;
  void integer(const char* key, int64_t& v, int64_t min, const char* meaning) {
    add(key, "integer", ">= " + std::to_string(min), v, meaning);
  }
  void seed(const char* key, uint64_t& v, const char* meaning) { add(key, "integer", ">= 0", v, meaning); }
  void number(const char* key, double& v, Range r, const char* meaning) {
    add(key, "number", range_text(r), v, meaning);
  }
  void boolean(const char* key, bool& v, const char* meaning) {
    add(key, "boolean", "true, false", v, meaning);
  }
  void text(const char* key, std::string& v, const char* meaning) { add(key, "string", "a path", v, meaning); }
  template <typename E>
  void choice(const char* key, E& v, const char* meaning) {
    add(key, "choice", joined(choice_names<E>()), to_string(v), meaning);
  }
  void text_list(const char* key, std::vector<std::string>& v, const char* meaning) {
    add(key, "string list", "paths or globs", v, meaning);
  }
  template <typename S>
  void section(const char* key, S& v, const char* meaning) {
    if (prefix_.empty()) sections.push_back({key, "section", "", json::object(), meaning});
    const std::string outer = prefix_;
    prefix_ = outer + key + ".";
    visit(*this, v);
    prefix_ = outer;
  }
  void preset(const char* key, ModelConfig& m, const char* meaning) {
    add(key, "preset", "a preset name", m.preset, meaning);
  }

 private:
  void add(const char* key, const char* type, std::string accepts, json value, const char* meaning) {
    keys.push_back({prefix_ + key, type, std::move(accepts), std::move(value), meaning});
  }
  std::string prefix_;
};

KeyLister list_config() {
  Config defaults;
  KeyLister lister;
  visit(lister, defaults);
  return lister;
}

// Forwards the integer, number and boolean keys to `inner` and skips the rest:
// the model keys a Hugging Face config.json shares with ModelConfig.
template <typename V>
class SharedModelKeys {
 public:
  explicit SharedModelKeys(V& inner) : inner_(inner) {}
  void integer(const char* key, int64_t& v, int64_t min, const char* m) { inner_.integer(key, v, min, m); }
  void number(const char* key, double& v, Range r, const char* m) { inner_.number(key, v, r, m); }
  void boolean(const char* key, bool& v, const char* m) { inner_.boolean(key, v, m); }
  void text(const char*, std::string&, const char*) {}
  template <typename E>
  void choice(const char*, E&, const char*) {}
  template <typename S>
  void section(const char*, S&, const char*) {}
  void preset(const char*, ModelConfig&, const char*) {}

 private:
  V& inner_;
};

}  // namespace

void apply_json(Config& c, const json& doc, const std::string& source) {
  if (!doc.is_object()) fail(source, ": expected a JSON object at the top level, got ", type_name(doc));
  std::vector<std::string> sections = keys_of(c);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (std::find(sections.begin(), sections.end(), it.key()) != sections.end()) continue;
    std::sort(sections.begin(), sections.end());
    fail(source, ": ", it.key(), ": unknown section (known sections: ", joined(sections), ")");
  }
  JsonReader reader(doc, "", source);
  visit(reader, c);
}

json to_json(const Config& c) {
  Config copy = c;  // the visitors take fields by reference
  JsonWriter writer;
  visit(writer, copy);
  return writer.out;
}

std::vector<ConfigKey> describe_config_keys() { return list_config().keys; }

std::vector<ConfigKey> describe_config_sections() { return list_config().sections; }

void apply_model_keys(ModelConfig& m, const json& doc, const std::string& source) {
  if (!doc.is_object()) fail(source, ": expected a JSON object, got ", type_name(doc));
  json present = json::object();  // null means "not given" in config.json
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (!it.value().is_null()) present[it.key()] = it.value();
  JsonReader reader(present, "", source, /*quote_keys=*/true);
  SharedModelKeys<JsonReader> keys(reader);
  visit(keys, m);
}

json model_keys_json(const ModelConfig& m) {
  ModelConfig copy = m;
  JsonWriter writer;
  SharedModelKeys<JsonWriter> keys(writer);
  visit(keys, copy);
  return writer.out;
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
  const JsonProblem problem = try_parse_json(text, &value, &why);
  // Text that is not JSON is taken as a string; a JSON object with a repeated key is a mistake.
  if (problem == JsonProblem::syntax) value = text;
  else if (problem != JsonProblem::none) fail(source, ": ", why);
  // Build {"section": {"key": value}} (or deeper) and apply it like a file.
  json doc = value;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) doc = json{{*it, doc}};
  apply_json(c, doc, source);
}

}  // namespace kdtrain
