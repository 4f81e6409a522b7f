// Buffers of ranks in other processes of the host, reached in place (docs/architecture.md, "In place between
// processes"): the allocations that hold a rank's buffers, mapped once by its peers, and a word per call by which
// the ranks agree whether that call runs in place.
//
// Every rank keeps an outbox: a POSIX shared-memory segment its peers in other processes of the host map when they
// connect (its name travels in the rank's endpoint, RankContext::endpoint). It holds
//   - exports: the allocation of each of the rank's buffers (the range cuPointerGetAttributes gives, with the
//     allocation's buffer id), how it travels and a generation; each peer in another process maps it once and
//     writes back the generation it mapped and the allocation's address in its process. Two transports:
//       CUDA IPC   cudaMalloc's memory (and cuMemAlloc's): the entry holds its IPC handle, which a peer opens
//                  (once per allocation and process, shared by every communicator there: CUDA IPC opens an
//                  allocation once per process);
//       a file     cuMem's (XLA's allocator, ncclMemAlloc), where RankOptions::map_cumem asks for it
//       descriptor (JAX_MSCCLPP_MAP_CUMEM, on unless 0) and the allocation allows POSIX file descriptors: the
//                  rank exports the physical allocation behind the buffer's mapping
//                  (cuMemExportToShareableHandle) and sends the descriptor to each peer's datagram socket
//                  (SCM_RIGHTS; its abstract name is the outbox's), which imports it and maps it into an address
//                  range of its own;
//   - the call words: for each call that may run in place (the same calls on every rank: a function of the call
//     and the communicator's shape), its sequence number and whether every peer reaches this rank's buffers, in
//     two words by the sequence's parity (a rank writes the word of call s + 2 only after it read every peer's word
//     of call s + 1, which a peer writes only after it read every word of call s).
// A call runs in place only where every rank's word says reachable, so every rank decides alike; otherwise every
// rank copies through scratch, correctly: a buffer outside an allocation either transport exports (cudaMallocAsync's
// pools; cuMem's without the file descriptors), across two allocations, beyond kExportSlots allocations, or that a
// peer could not map.
//
// An allocation replaced at the same address (a new buffer id) is exported again under a new generation, and the
// peers close the old mapping when they see it: the old allocation was freed, which its owner does only after the
// device's work on it (cudaFree waits for the device; an allocator of cuMem memory, XLA's, frees after the streams
// that used it), so no kernel of its owner still posts it, and the peers' accesses ended before the owner's kernel
// did.
//
// Every wait (a peer's mapping, a peer's call word) serves this rank's own imports meanwhile, so two ranks that
// wait for each other both go on; a wait is bounded by the rank's timeout and then throws, naming the peer.
// One thread at a time per exchange (the rank's call entry).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collective.h"

namespace jax_mscclpp::cuda {

class AllocationExchange {
 public:
  // Allocations a rank exports at once; a buffer in one more copies through scratch.
  static constexpr int kExportSlots = 256;
  // The outbox name's bytes in an endpoint (NUL-padded).
  static constexpr size_t kNameBytes = 48;

  // Creates this rank's outbox (and with `map_cumem` its socket for file descriptors). Throws std::runtime_error
  // where shared memory is not available.
  AllocationExchange(int rank, int nranks, int device, bool map_cumem);
  ~AllocationExchange();
  AllocationExchange(const AllocationExchange&) = delete;
  AllocationExchange& operator=(const AllocationExchange&) = delete;

  const std::string& name() const { return name_; }
  // Records `peer`, a rank of this host in `process` (this_process_identity() there), and maps its outbox where that
  // is another process.
  // Throws std::runtime_error.
  void add_peer(int peer, const std::string& name, int64_t process);
  // Every rank is of its own process and every peer's outbox is open (one peer at least): calls may agree. A
  // function of every rank's endpoint, so the same on every rank. (Where a process drives several ranks, the ranks
  // of one process would wait for each other on the host, one thread perhaps serving several; such communicators
  // copy through scratch between processes.)
  bool covers_every_peer() const;

  // Every rank's view of this rank's `in` (`in_bytes`) and `out` (`out_bytes`) for one call that may run in place:
  // views.in[q] / views.out[q] are the addresses rank q's kernel uses (this process's own for q == rank). Needs
  // covers_every_peer(). Returns false where some rank's buffers are not reachable by every peer
  // (the call then copies through scratch on every rank). Throws std::runtime_error when a peer does not answer
  // within `timeout_s`, naming it.
  bool agree(const void* in, uint64_t in_bytes, const void* out, uint64_t out_bytes, double timeout_s,
             InPlaceBuffers& views);

 private:
  struct Outbox;
  struct Export {           // this rank's, by slot
    uint64_t base = 0;
    uint64_t bytes = 0;
    uint64_t buffer_id = 0;
    uint64_t generation = 0;  // 0: slot free
  };
  struct Import;            // a peer's allocation mapped here, by (peer, slot)
  struct Allocation {       // where a buffer lies
    uint64_t base = 0, bytes = 0, buffer_id = 0;
    bool legacy_ipc = false;  // CUDA IPC exports it; else a cuMem mapping (base: the mapping's)
  };
  struct Descriptor {       // a file descriptor sent to this rank, not yet imported
    int peer, slot;
    uint64_t generation;
    int fd;
  };

  // The slot of the exported allocation holding [ptr, ptr + bytes), exporting it first where new; -1 where it
  // cannot be exported.
  int export_slot(const void* ptr, uint64_t bytes);
  // Writes the export of `a` into `slot` under a new generation; false where neither transport exports it.
  bool publish(int slot, const Allocation& a);
  // Sends the file descriptors still owed to peers (a full socket queue answers "later").
  void send_descriptors();
  // Receives the file descriptors sent to this rank.
  void receive_descriptors();
  // Opens the peers' exports this rank has not mapped yet, and confirms each.
  void serve();
  // Whether every peer in another process answered the export in `slot` (failed: one could not map it; missing:
  // the first that has not answered).
  bool mapped_by_every_peer(int slot, bool& failed, int& missing) const;
  uint64_t view_of(int slot, const void* ptr, int reader) const;

  int rank_, nranks_, device_;
  std::string name_;
  int socket_ = -1;                  // the datagram socket file descriptors reach this rank by (map_cumem)
  std::vector<Descriptor> to_send_;  // peer: the receiver; fd: this rank's, closed once sent to every receiver
  std::vector<Descriptor> received_;
  Outbox* mine_ = nullptr;
  std::vector<Outbox*> peers_;  // null for this rank and where not (yet) added
  std::vector<std::string> peer_names_;
  std::vector<int64_t> processes_;  // by rank: this_process_identity() in its process
  std::vector<uint64_t> peer_versions_;
  std::vector<Export> exports_;
  std::map<uint64_t, int> slot_of_base_;
  uint64_t next_generation_ = 1;
  uint64_t calls_ = 0;
  std::vector<std::vector<std::shared_ptr<Import>>> imports_;  // [peer][slot]
};

}  // namespace jax_mscclpp::cuda
