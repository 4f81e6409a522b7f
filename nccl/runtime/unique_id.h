// Our ncclUniqueId: the address of a communicator's bootstrap root (bootstrap.h) in NCCL's 128 bytes, which XLA
// passes from the process that made it to every rank through its key-value store.
//
// Layout: bytes 0-7 kOurUniqueIdMagic ("JMSCUQID" in memory order), 8-11 the layout's version, 12-15 the root's
// IPv4 address, 16-17 its port (both network order), 18-23 zero, 24-31 the root's nonce; the rest zero. An id
// without the magic is the real library's and goes to it unchanged.
#pragma once

#include <optional>

#include "bootstrap.h"
#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

ncclUniqueId encode_unique_id(const BootstrapAddress& root);
// The root's address when `id` is ours, nothing when it is the real library's.
std::optional<BootstrapAddress> decode_unique_id(const ncclUniqueId& id);

}  // namespace jax_mscclpp::nccl
