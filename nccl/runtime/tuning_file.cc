#include "tuning_file.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include <strings.h>

#include "jax_mscclpp/codes.h"
#include "jax_mscclpp/settings.h"

namespace jax_mscclpp::nccl {
namespace {

constexpr const char* kFormat = "jax_mscclpp.tuning/1";

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

int32_t collective_code(const std::string& name) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name_, input_blocks, output_blocks) \
  if (name == name_) return code;
#include "jax_mscclpp/codes.def"
  return -1;
}

// The algorithm `name` as this library runs it for `collective`: its code, -1 for "lax", -2 where it does not run
// it (a name it does not know, one that does not serve the collective, one composed on the JAX path, or one that
// needs port or switch channels, which this library's communicators do not have).
int32_t algorithm_code(const std::string& name, int32_t collective) {
  if (name == "lax") return -1;
#define JAX_MSCCLPP_ALGORITHM(enumerator, code, name_, collectives, host, needs)                                  \
  if (name == name_)                                                                                              \
    return ((collectives) >> collective & 1) != 0 && std::strcmp(#needs, "kNeedsNothing") == 0 ? int32_t(code) \
                                                                                                 : -2;
#include "jax_mscclpp/codes.def"
  return -2;
}

std::string text_of(const Json* v) { return v != nullptr && v->kind == Json::kString ? v->string : "?"; }

}  // namespace

bool parse_tuning_file(const std::string& text, TuningFile* out, std::string* error) {
  Json doc;
  if (!Reader(text).document(&doc, error)) return false;
  const Json* format = doc.member("format");
  if (doc.kind != Json::kObject || format == nullptr || format->kind != Json::kString || format->string != kFormat) {
    *error = std::string("not a ") + kFormat + " file";
    return false;
  }
  const Json* rules = doc.member("rules");
  if (rules == nullptr) return true;
  if (rules->kind != Json::kArray) return *error = "\"rules\" is not a list", false;
  for (const Json& rule : rules->array) {
    const Json* platform = rule.member("platform");
    const Json* collective = rule.member("collective");
    const Json* algorithm = rule.member("algorithm");
    const Json* max_bytes = rule.member("max_bytes");
    if (rule.kind != Json::kObject || collective == nullptr || collective->kind != Json::kString ||
        platform == nullptr || platform->kind != Json::kString || algorithm == nullptr ||
        algorithm->kind != Json::kString)
      return *error = "a rule without its collective, platform and algorithm", false;
    if (platform->string != "gpu") continue;
    TunedRule r{collective_code(collective->string), -1, -2};
    if (r.collective < 0) return *error = "an unknown collective \"" + collective->string + "\"", false;
    if (max_bytes != nullptr && max_bytes->kind == Json::kNumber) {
      if (max_bytes->number < 0 || max_bytes->number != static_cast<double>(static_cast<int64_t>(max_bytes->number)))
        return *error = "a max_bytes that is not a byte count", false;
      r.max_bytes = static_cast<int64_t>(max_bytes->number);
    } else if (max_bytes != nullptr && max_bytes->kind != Json::kNull) {
      return *error = "a max_bytes that is not a byte count", false;
    }
    r.algorithm = algorithm_code(algorithm->string, r.collective);
    if (r.algorithm == -2) {
      out->skipped.push_back(collective->string + " -> " + text_of(algorithm));
      continue;
    }
    out->rules.push_back(r);
  }
  return true;
}

std::string topology_name(const std::string& device_kind, int devices, int processes) {
  std::string kind;
  bool dash = false;
  for (const char ch : device_kind) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      if (dash && !kind.empty()) kind += '-';
      kind += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      dash = false;
    } else {
      dash = true;
    }
  }
  std::string name = "gpu-" + (kind.empty() ? std::string("device") : kind) + "-" + std::to_string(devices) + "dev";
  if (processes > 1) name += "-" + std::to_string(processes) + "proc";
  return name;
}

std::string tuning_file_path(const std::string& topology) {
  if (const char* named = setting_value(Setting::kTuningFile)) {
    for (const char* off : {"off", "none", "0", "false"})
      if (strcasecmp(named, off) == 0) return "";
    return named;
  }
  std::string cache;
  if (const char* dir = setting_value(Setting::kCacheDir)) {
    cache = dir;
  } else {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (xdg != nullptr && xdg[0] != '\0') cache = std::string(xdg) + "/jax_mscclpp";
    else if (home != nullptr && home[0] != '\0') cache = std::string(home) + "/.cache/jax_mscclpp";
    else return "";
  }
  return cache + "/tuning/" + topology + ".json";
}

const std::vector<TunedRule>& tuned_rules(const std::string& topology) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<TunedRule>> loaded;  // path -> rules (entries never move)
  static const std::vector<TunedRule> none;
  const std::string path = tuning_file_path(topology);
  if (path.empty()) return none;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = loaded.find(path);
  if (found != loaded.end()) return found->second;
  std::vector<TunedRule>& rules = loaded[path];
  const bool named = setting_value(Setting::kTuningFile) != nullptr;
  std::ifstream file(path);
  if (!file) {
    if (named)
      std::fprintf(stderr, "jax_mscclpp: ignoring JAX_MSCCLPP_TUNING_FILE=\"%s\": the file cannot be read; using "
                   "the built-in table\n", path.c_str());
    return rules;
  }
  std::stringstream text;
  text << file.rdbuf();
  TuningFile parsed;
  std::string error;
  if (!parse_tuning_file(text.str(), &parsed, &error)) {
    std::fprintf(stderr, "jax_mscclpp: ignoring the selection file %s: %s; using the built-in table\n", path.c_str(),
                 error.c_str());
    return rules;
  }
  for (const std::string& s : parsed.skipped)
    std::fprintf(stderr, "jax_mscclpp: %s: ignoring rule %s: this library does not run it on GPUs\n", path.c_str(),
                 s.c_str());
  rules = std::move(parsed.rules);
  return rules;
}

}  // namespace jax_mscclpp::nccl
