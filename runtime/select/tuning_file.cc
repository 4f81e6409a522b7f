#include "select/tuning_file.h"

#include <pwd.h>
#include <strings.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "jax_mscclpp/settings.h"

namespace jax_mscclpp::select {
namespace {

// A JSON value: what a tuning file holds (objects, arrays, strings, numbers, booleans, null).
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* member(const char* key) const {
    for (const auto& [k, v] : object)
      if (k == key) return &v;
    return nullptr;
  }
};

// A recursive-descent reader of one JSON document (RFC 8259); `error` says where it stopped.
class Reader {
 public:
  explicit Reader(const std::string& text) : s_(text) {}

  bool document(Json* out, std::string* error) {
    skip_space();
    if (!value(out, 0)) return fail(error);
    skip_space();
    if (at_ < s_.size()) return what_ = "text after the document", fail(error);
    return true;
  }

 private:
  bool fail(std::string* error) const {
    *error = "not JSON at byte " + std::to_string(at_) + " (" + what_ + ")";
    return false;
  }
  void skip_space() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(at_, n, word) != 0) return what_ = "an unknown word", false;
    at_ += n;
    return true;
  }
  bool value(Json* out, int depth) {
    if (depth > 64) return what_ = "nested too deep", false;
    if (at_ >= s_.size()) return what_ = "the text ends", false;
    const char c = s_[at_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') return out->kind = Json::kString, string(&out->string);
    if (c == 't') return out->kind = Json::kBool, out->boolean = true, literal("true");
    if (c == 'f') return out->kind = Json::kBool, out->boolean = false, literal("false");
    if (c == 'n') return out->kind = Json::kNull, literal("null");
    return number(out);
  }
  // The elements of an object or array up to `close`, each read by `element`, separated by commas.
  template <class Element>
  bool elements(char close, Element element) {
    ++at_;
    skip_space();
    if (at_ < s_.size() && s_[at_] == close) return ++at_, true;
    for (;;) {
      skip_space();
      if (!element()) return false;
      skip_space();
      if (at_ < s_.size() && s_[at_] == ',') {
        ++at_;
        continue;
      }
      if (at_ < s_.size() && s_[at_] == close) return ++at_, true;
      return what_ = std::string("',' or '") + close + "' expected", false;
    }
  }
  bool object(Json* out, int depth) {
    out->kind = Json::kObject;
    return elements('}', [&] {
      std::string key;
      if (at_ >= s_.size() || s_[at_] != '"') return what_ = "a key expected", false;
      if (!string(&key)) return false;
      skip_space();
      if (at_ >= s_.size() || s_[at_] != ':') return what_ = "':' expected", false;
      ++at_;
      skip_space();
      Json v;
      if (!value(&v, depth + 1)) return false;
      out->object.emplace_back(std::move(key), std::move(v));
      return true;
    });
  }
  bool array(Json* out, int depth) {
    out->kind = Json::kArray;
    return elements(']', [&] {
      Json v;
      if (!value(&v, depth + 1)) return false;
      out->array.push_back(std::move(v));
      return true;
    });
  }
  // A string; escapes are decoded, a \u escape outside ASCII kept as '?' (no name or key of the format needs one).
  bool string(std::string* out) {
    ++at_;
    while (at_ < s_.size()) {
      const char c = s_[at_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return what_ = "a control character in a string", false;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (at_ >= s_.size()) break;
      const char e = s_[at_++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          if (at_ + 4 > s_.size()) return what_ = "a short \\u escape", false;
          const long code = std::strtol(s_.substr(at_, 4).c_str(), nullptr, 16);
          out->push_back(code < 0x80 ? static_cast<char>(code) : '?');
          at_ += 4;
          break;
        }
        default: return what_ = "an unknown escape", false;
      }
    }
    return what_ = "an unterminated string", false;
  }
  bool number(Json* out) {
    const char* begin = s_.c_str() + at_;
    char* end = nullptr;
    out->kind = Json::kNumber;
    out->number = std::strtod(begin, &end);
    if (end == begin) return what_ = "a value expected", false;
    at_ += static_cast<size_t>(end - begin);
    return true;
  }

  const std::string& s_;
  size_t at_ = 0;
  std::string what_;
};

bool is_string(const Json* v) { return v != nullptr && v->kind == Json::kString; }

// os.path.join of two parts, as the JAX path joins them: no second '/' after one that ends `a`.
std::string join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

// The home directory: $HOME (even empty: the root), else the password database's entry; nullopt for neither.
std::optional<std::string> home_directory() {
  if (const char* home = std::getenv("HOME")) return std::string(home);
  struct passwd entry;
  struct passwd* found = nullptr;
  std::string buffer(16384, '\0');
  if (getpwuid_r(getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr)
    return std::string(found->pw_dir);
  return std::nullopt;
}

}  // namespace

bool parse_tuning_file(std::string_view text, std::vector<Rule>* rules, std::string* error) {
  const std::string owned(text);
  Json doc;
  if (!Reader(owned).document(&doc, error)) return false;
  const Json* format = doc.member("format");
  if (doc.kind != Json::kObject || !is_string(format) || format->string != kTuningFormat) {
    *error = std::string("not a ") + kTuningFormat + " file";
    return false;
  }
  const Json* list = doc.member("rules");
  if (list == nullptr) return true;
  if (list->kind != Json::kArray) return *error = "\"rules\" is not a list", false;
  std::vector<Rule> out;
  for (const Json& rule : list->array) {
    const Json* collective = rule.member("collective");
    const Json* platform = rule.member("platform");
    const Json* algorithm = rule.member("algorithm");
    const Json* max_bytes = rule.member("max_bytes");
    if (rule.kind != Json::kObject || !is_string(collective) || !is_string(platform) || !is_string(algorithm))
      return *error = "a rule without its collective, platform and algorithm", false;
    const int32_t code = collective_code(collective->string);
    if (code < 0) return *error = "an unknown collective \"" + collective->string + "\"", false;
    int64_t bound = -1;
    if (max_bytes != nullptr && max_bytes->kind == Json::kNumber) {
      const double v = max_bytes->number;
      if (!(v >= 0 && v < 9223372036854775808.0) || v != static_cast<double>(static_cast<int64_t>(v)))
        return *error = "a max_bytes that is not a byte count", false;
      bound = static_cast<int64_t>(v);
    } else if (max_bytes != nullptr && max_bytes->kind != Json::kNull) {
      return *error = "a max_bytes that is not a byte count", false;
    }
    out.push_back(make_rule(code, platform->string, bound, algorithm->string, 0));
  }
  rules->insert(rules->end(), std::make_move_iterator(out.begin()), std::make_move_iterator(out.end()));
  return true;
}

void split_runnable(const std::vector<Rule>& rules, const std::function<bool(const Rule&)>& runs,
                    std::vector<Rule>* kept, std::vector<Rule>* skipped) {
  for (const Rule& rule : rules) (rule.code == kLax || runs(rule) ? kept : skipped)->push_back(rule);
}

std::string topology_name(std::string_view platform, std::string_view device_kind, int devices, int processes) {
  std::string kind;
  bool dash = false;
  for (const char ch : device_kind) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x80 && std::isalnum(c)) {
      if (dash && !kind.empty()) kind += '-';
      kind += static_cast<char>(std::tolower(c));
      dash = false;
    } else {
      dash = true;
    }
  }
  std::string name = std::string(platform) + "-" + (kind.empty() ? std::string("device") : kind) + "-" +
                     std::to_string(devices) + "dev";
  if (processes > 1) name += "-" + std::to_string(processes) + "proc";
  return name;
}

std::optional<std::string> named_tuning_file() {
  const char* raw = std::getenv(setting_name(Setting::kTuningFile));
  if (raw == nullptr) return std::nullopt;
  std::string_view value(raw);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.remove_prefix(1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  const std::string named(value);
  for (const char* off : {"off", "none", "0", "false"})
    if (strcasecmp(named.c_str(), off) == 0) return std::string();
  return named;
}

std::string cache_dir() {
  if (const char* dir = setting_value(Setting::kCacheDir)) return dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] != '\0') return join(xdg, "jax_mscclpp");
  std::optional<std::string> home = home_directory();
  if (!home) return "";
  while (!home->empty() && home->back() == '/') home->pop_back();
  return *home + "/.cache/jax_mscclpp";
}

std::string default_tuning_file(const std::string& topology) {
  const std::string cache = cache_dir();
  return cache.empty() ? std::string() : join(join(cache, "tuning"), topology + ".json");
}

std::string tuning_file_path(const std::string& topology) {
  if (const std::optional<std::string> named = named_tuning_file()) return *named;
  return default_tuning_file(topology);
}

bool read_text_file(const std::string& path, std::string* text) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::stringstream contents;
  contents << file.rdbuf();
  *text = contents.str();
  return true;
}

}  // namespace jax_mscclpp::select
