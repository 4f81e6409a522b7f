// The tuning file (format "jax_mscclpp.tuning/1", written by python -m jax_mscclpp.tools.tune): the one reader of its
// text, and where a process finds it, for both frontends (the JAX path's jax_mscclpp/tuning_file.py and the
// NCCL-API library's nccl/runtime/selection.h). Each frontend keeps its own policy for a file it cannot use (an
// error or a warning on the JAX path, a line on stderr in the library) and for when it reads it again.
//
// Where a process finds it: the file JAX_MSCCLPP_TUNING_FILE names (its value stripped of surrounding
// whitespace), "off" (also "none", "0", "false", in any case) for none; else (unset or empty) the default file of
// the topology, <cache>/tuning/<topology>.json, cache being JAX_MSCCLPP_CACHE_DIR, else
// $XDG_CACHE_HOME/jax_mscclpp, else <home>/.cache/jax_mscclpp (home: $HOME, else the password database's).
//
// Format: a JSON object whose "format" is "jax_mscclpp.tuning/1" and whose "rules" (absent: none) is an ordered
// list of objects with strings "collective" (a codes.def name, in any case), "platform" and "algorithm", and
// "max_bytes" (per-rank input bytes, inclusive: an integer of at least 0, or null or absent for no bound); other
// members are for people (min_bytes, margin, runner_up). First match wins; sizes past the last rule's bound fall
// through to the built-in table (rules.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "select/rules.h"

namespace jax_mscclpp::select {

inline constexpr const char* kTuningFormat = "jax_mscclpp.tuning/1";

// Every rule of a tuning file's text, in file order, as written (every platform; world 0); false with `error` set
// for text that is not JSON or not of the format.
bool parse_tuning_file(std::string_view text, std::vector<Rule>* rules, std::string* error);

// `rules` split, in order, into those a frontend runs (`runs`; a "lax" rule always) and the others.
void split_runnable(const std::vector<Rule>& rules, const std::function<bool(const Rule&)>& runs,
                    std::vector<Rule>* kept, std::vector<Rule>* skipped);

// "<platform>-<device kind>-<n>dev" ("-<p>proc" after it with several processes): the kind lower-cased, each run
// of characters other than ASCII letters and digits one dash, none at either end ("device" where nothing is left).
std::string topology_name(std::string_view platform, std::string_view device_kind, int devices, int processes);

// JAX_MSCCLPP_TUNING_FILE: nullopt where it is unset or empty (the topology's default file), "" where it says off,
// else the path it names.
std::optional<std::string> named_tuning_file();
// The cache directory; "" where there is none (no home).
std::string cache_dir();
// The default file of `topology` (which need not exist); "" where there is no cache directory.
std::string default_tuning_file(const std::string& topology);
// The file a process reads for `topology`: the named one, else the default one; "" for none.
std::string tuning_file_path(const std::string& topology);

// The whole file at `path`; false where it cannot be opened.
bool read_text_file(const std::string& path, std::string* text);

}  // namespace jax_mscclpp::select
