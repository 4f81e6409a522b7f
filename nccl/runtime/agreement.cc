#include "agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "byte_frame.h"

namespace jax_mscclpp::nccl {

std::string encode_agreement(const Agreement& fields) {
  FrameWriter out;
  out.u32(static_cast<uint32_t>(fields.size()));
  for (const AgreementField& f : fields) out.text(f.name).text(f.value);
  return out.bytes();
}

bool decode_agreement(const std::string& bytes, Agreement* fields) {
  FrameReader in(bytes);
  uint32_t n = 0;
  if (!in.u32(&n) || n > 4096) return false;
  fields->assign(n, {});
  for (AgreementField& f : *fields)
    if (!in.text(&f.name) || !in.text(&f.value)) return false;
  return in.at_end();
}

namespace {

const AgreementField* find(const Agreement& fields, const std::string& name) {
  for (const AgreementField& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

std::string has(int rank, const std::string& name, const AgreementField* field) {
  return "rank " + std::to_string(rank) + (field != nullptr ? " has " + name + "=" + field->value : " has no " + name);
}

}  // namespace

std::string agreement_difference(const std::vector<Agreement>& ranks) {
  if (ranks.empty()) return "";
  // Every name any rank has, rank 0's first, so that a field only some ranks send is compared too.
  std::vector<std::string> names;
  for (const Agreement& fields : ranks)
    for (const AgreementField& f : fields)
      if (std::find(names.begin(), names.end(), f.name) == names.end()) names.push_back(f.name);
  for (const std::string& name : names) {
    const AgreementField* first = find(ranks[0], name);
    for (size_t r = 1; r < ranks.size(); ++r) {
      const AgreementField* other = find(ranks[r], name);
      const bool same = (first == nullptr) == (other == nullptr) && (first == nullptr || first->value == other->value);
      if (same) continue;
      return has(static_cast<int>(r), name, other) + ", " + has(0, name, first) +
             ": every rank of a communicator must run with the same " + name +
             " (it decides what each call does on every rank)";
    }
  }
  return "";
}

std::string digest_hex(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

}  // namespace jax_mscclpp::nccl
