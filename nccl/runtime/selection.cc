#include "selection.h"

#include <cstdio>
#include <map>
#include <mutex>

#include "jax_mscclpp/settings.h"
#include "select/tuning_file.h"

namespace jax_mscclpp::nccl {

std::vector<select::Rule> library_rules(const std::vector<select::Rule>& rules, std::vector<std::string>* skipped) {
  std::vector<select::Rule> gpu, kept, others;
  for (const select::Rule& rule : rules)
    if (rule.platform == "gpu") gpu.push_back(rule);
  // The library's communicators: memory channels only (select::Channels{}).
  auto runs = [](const select::Rule& r) {
    return r.code >= 0 && select::serves(r.code, r.collective) && select::missing_need(r.code, {}) == nullptr;
  };
  select::split_runnable(gpu, runs, &kept, &others);
  for (const select::Rule& r : others)
    skipped->push_back(select::collective_name(r.collective) + (" -> " + r.algorithm));
  return kept;
}

int32_t select_algorithm(const std::vector<select::Rule>& tuned, int32_t collective, uint64_t nbytes, int world,
                         bool nccl_can_run, bool shares_gpu) {
  return select::choose(tuned, collective, "gpu", nbytes, world, nccl_can_run, shares_gpu).code;
}

const std::vector<select::Rule>& tuned_rules(const std::string& topology) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<select::Rule>> loaded;  // path -> rules (entries never move)
  static const std::vector<select::Rule> none;
  const std::string path = select::tuning_file_path(topology);
  if (path.empty()) return none;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = loaded.find(path);
  if (found != loaded.end()) return found->second;
  std::vector<select::Rule>& rules = loaded[path];
  std::string text;
  if (!select::read_text_file(path, &text)) {
    if (select::named_tuning_file())
      std::fprintf(stderr, "jax_mscclpp: ignoring %s=\"%s\": the file cannot be read; using the built-in table\n",
                   setting_name(Setting::kTuningFile), path.c_str());
    return rules;
  }
  std::vector<select::Rule> parsed;
  std::string error;
  if (!select::parse_tuning_file(text, &parsed, &error)) {
    std::fprintf(stderr, "jax_mscclpp: ignoring the selection file %s: %s; using the built-in table\n", path.c_str(),
                 error.c_str());
    return rules;
  }
  std::vector<std::string> skipped;
  rules = library_rules(parsed, &skipped);
  for (const std::string& s : skipped)
    std::fprintf(stderr, "jax_mscclpp: %s: ignoring rule %s: this library does not run it on GPUs\n", path.c_str(),
                 s.c_str());
  return rules;
}

}  // namespace jax_mscclpp::nccl
