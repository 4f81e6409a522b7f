// The order of one rank's calls across streams. NCCL runs a communicator's operations in the order they were
// issued, whatever streams they are issued on, and its clients rely on it (XLA issues one program's collectives on
// several streams); this rank's protocols need it too: the epochs and the double-buffered scratch assume that a
// call's kernels end before the next call's start (docs/architecture.md, "Calls in issue order"). So a call on a
// stream other than the previous call's first waits, on the device, for the previous call's work: an event
// recorded after every call, waited on by the next call's stream where it differs. The host never blocks.
//
// Eager calls and captured ones keep their latest call apart, each with an event of its own, and a call records
// only the event of its kind (one record per call):
//   - Eager calls (issued on a stream that is not capturing) are chained across every stream: each waits for the
//     eager call before it, also where captured calls were issued in between. So the latest eager call's event
//     completes only after every eager call issued before it, on any stream: eager_work() is the end of all the
//     rank's issued eager work (ncclCommDestroy waits for it: nccl/runtime/runtime_communicator.h).
//   - Under stream capture the wait is made only between calls of one capture (the event recorded inside it is a
//     node of that graph, so every replay keeps the order). A captured call and an eager one are not ordered by
//     this: a graph's kernels run when it is launched, not when it was captured. An event last recorded inside a
//     capture can be neither queried nor waited on from outside it, hence the two events.
//
// One host thread at a time (GpuRank::run holds a lock around it).
#pragma once

#include <cuda_runtime.h>

namespace jax_mscclpp::cuda {

class IssueOrder {
 public:
  // The events live on `device` (events and streams must share a device).
  explicit IssueOrder(int device);
  ~IssueOrder();
  IssueOrder(const IssueOrder&) = delete;
  IssueOrder& operator=(const IssueOrder&) = delete;

  // Before a call on `stream`: makes `stream` wait for the previous call of its kind where that ran on another
  // stream (eager: the previous eager call; captured: the previous call of the same capture).
  cudaError_t before(cudaStream_t stream);
  // After the call's launches on `stream`: records where the next call of its kind on another stream must wait.
  cudaError_t after(cudaStream_t stream);
  // Whether every eager call issued so far has ended on the device (the latest one's event, which completes after
  // all of them): cudaSuccess (also where none was issued), cudaErrorNotReady while some still runs, else the
  // error the event query answered. Captured calls are not counted: they run when their graph is launched.
  cudaError_t eager_work() const;

 private:
  // The latest call of one kind.
  struct Latest {
    cudaEvent_t event = nullptr;  // recorded after it
    bool recorded = false;
    cudaStream_t stream = nullptr;
    unsigned long long capture = 0;  // the capture it was recorded in (captured calls only)
  };
  Latest eager_, captured_;
};

}  // namespace jax_mscclpp::cuda
