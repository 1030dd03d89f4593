#include "core/json_parse.h"

#include <iterator>
#include <map>
#include <vector>

#include "core/error.h"

namespace kdtrain {

using nlohmann::json;

namespace {

// An input iterator over the text that publishes how far the parser has read,
// so the SAX handler can tell where a key ends (nlohmann's SAX events carry no
// position). The lexer reads one character at a time, so when key() fires the
// cursor sits just past the key's closing quote.
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** cursor) : p_(p), cursor_(cursor) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    ++p_;
    if (cursor_) *cursor_ = p_;
    return *this;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char** cursor_;
};

size_t line_of(std::string_view text, size_t offset) {
  size_t line = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

// Builds the document like nlohmann's own DOM parser, remembering where each
// key of each open object ended so a repeated key can be reported with both lines.
class StrictBuilder {
 public:
  StrictBuilder(std::string_view text, const char** cursor) : text_(text), cursor_(cursor) {}

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
  bool string(json::string_t& v) { return value(json(std::move(v))); }
  bool binary(json::binary_t& v) { return value(json(json::binary_t(std::move(v)))); }

  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    Frame& f = frames_.back();
    const size_t end = static_cast<size_t>(*cursor_ - text_.data());
    auto [it, inserted] = f.key_ends.emplace(k, end);
    if (!inserted) {
      problem_ = JsonProblem::duplicate_key;
      error_ = "duplicate key '" + path_with(k) + "' at line " + std::to_string(line_of(text_, end)) +
               " (first at line " + std::to_string(line_of(text_, it->second)) +
               "); a repeated key would silently replace the earlier value";
      return false;
    }
    f.key = k;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> from "parse error".
    std::string what = e.what();
    const size_t at = what.find("parse error");
    problem_ = JsonProblem::syntax;
    error_ = "invalid JSON: " + (at == std::string::npos ? what : what.substr(at));
    return false;
  }

  json take() { return std::move(root_); }
  const std::string& error() const { return error_; }
  JsonProblem problem() const { return problem_ == JsonProblem::none ? JsonProblem::syntax : problem_; }

 private:
  struct Frame {
    json* container;
    std::string component;  // how the parent names this container, e.g. "train" or "[3]"
    std::string key;        // the current key (objects)
    std::map<std::string, size_t> key_ends;
  };

  // The key path "a.b[2].c" of `last` inside the innermost open object.
  std::string path_with(const std::string& last) const {
    std::string path;
    for (size_t i = 1; i < frames_.size(); ++i) {
      const std::string& c = frames_[i].component;
      path += (c.empty() || c[0] == '[' || path.empty()) ? c : "." + c;
    }
    return path.empty() ? last : path + "." + last;
  }

  // Places v in the innermost container (or as the root); returns where it went.
  json* place(json&& v, std::string* component) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.container->is_array()) {
      if (component) *component = "[" + std::to_string(f.container->size()) + "]";
      f.container->push_back(std::move(v));
      return &f.container->back();
    }
    if (component) *component = f.key;
    json& slot = (*f.container)[f.key];
    slot = std::move(v);
    return &slot;
  }

  bool value(json&& v) {
    place(std::move(v), nullptr);
    return true;
  }

  bool open(json&& container) {
    if (frames_.size() >= kMaxJsonDepth) {
      problem_ = JsonProblem::too_deep;
      error_ = "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels at line " +
               std::to_string(line_of(text_, static_cast<size_t>(*cursor_ - text_.data())));
      return false;
    }
    std::string component;
    json* where = place(std::move(container), &component);
    frames_.push_back(Frame{where, std::move(component), {}, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  std::string_view text_;
  const char** cursor_;
  json root_;
  std::vector<Frame> frames_;
  std::string error_;
  JsonProblem problem_ = JsonProblem::none;
};

}  // namespace

JsonProblem try_parse_json(std::string_view text, json* out, std::string* error) {
  // nlohmann's lexer reads a NUL byte as the end of the input, so "{...}\0{...}"
  // would parse as its first document; JSON text holds no raw NUL anywhere
  // (inside strings it is escaped as \u0000), so one is refused where it stands.
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    *error = "invalid JSON: a NUL byte at line " + std::to_string(line_of(text, nul)) + " (byte " +
             std::to_string(nul) + "); JSON text never holds one, and anything after it would be ignored";
    return JsonProblem::syntax;
  }
  const char* cursor = text.data();
  StrictBuilder builder(text, &cursor);
  const TrackingIterator first(text.data(), &cursor), last(text.data() + text.size(), nullptr);
  if (json::sax_parse(first, last, &builder)) {
    *out = builder.take();
    return JsonProblem::none;
  }
  *error = builder.error().empty() ? "invalid JSON" : builder.error();
  return builder.problem();
}

json parse_json(std::string_view text, const std::string& source) {
  json doc;
  std::string error;
  if (try_parse_json(text, &doc, &error) != JsonProblem::none) fail(source, ": ", error);
  return doc;
}

}  // namespace kdtrain
