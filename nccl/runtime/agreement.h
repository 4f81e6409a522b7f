// What every rank of a communicator must agree on, because it decides what a call does (the algorithm, the
// kernels' geometry, whether a failing kernel traps): a list of named fields, each exchanged at setup in the
// identity frame (rank_identity.h) and compared separately, so that a difference fails every rank's setup alike with
// a text naming the rank, the setting and both values, rather than surfacing later as a hang or a call mismatch.
//
// Names are what a user changes: the environment variable (settings.def) where there is one, else a phrase
// ("selection table", "library version", "tuning file rules"). Values are text, compared byte for byte.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace jax_mscclpp::nccl {

struct AgreementField {
  std::string name;
  std::string value;
};
using Agreement = std::vector<AgreementField>;

// Bytes of a field list, and back; decode is false for bytes that are not one.
std::string encode_agreement(const Agreement& fields);
bool decode_agreement(const std::string& bytes, Agreement* fields);

// "" when every rank has the same fields with the same values; else, for the first field (in rank 0's order) where
// some rank differs, the first such rank's: "rank R has NAME=V, rank 0 has NAME=V0" ("has no NAME" for a field a
// rank lacks), then what to do. `ranks[r]` is rank r's list.
std::string agreement_difference(const std::vector<Agreement>& ranks);

// What a setup throws when the ranks disagree (ncclInvalidUsage): agreement_difference's text.
struct Disagreement : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A 64-bit FNV-1a digest of `bytes`, as 16 hex digits: how long values (rule tables) are compared.
std::string digest_hex(const std::string& bytes);

}  // namespace jax_mscclpp::nccl
