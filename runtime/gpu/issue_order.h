// The order of one rank's calls across streams. NCCL runs a communicator's operations in the order they were
// issued, whatever streams they are issued on, and its clients rely on it (XLA issues one program's collectives on
// several streams); this rank's protocols need it too: the epochs and the double-buffered scratch assume that a
// call's kernels end before the next call's start (docs/architecture.md, "Calls in issue order"). So a call on a
// stream other than the previous call's first waits, on the device, for the previous call's work: an event
// recorded after every call, waited on by the next call's stream where it differs. The host never blocks.
//
// Under stream capture the wait is made only between calls of one capture (the event recorded inside it is a node
// of that graph, so every replay keeps the order). A captured call and an eager one are not ordered by this: a
// graph's kernels run when it is launched, not when it was captured.
//
// One host thread at a time (GpuRank::run holds a lock around it).
#pragma once

#include <cuda_runtime.h>

namespace jax_mscclpp::cuda {

class IssueOrder {
 public:
  // The event lives on `device` (events and streams must share a device).
  explicit IssueOrder(int device);
  ~IssueOrder();
  IssueOrder(const IssueOrder&) = delete;
  IssueOrder& operator=(const IssueOrder&) = delete;

  // Before a call on `stream`: makes `stream` wait for the previous call where that ran on another stream of the
  // same capture (or both eager).
  cudaError_t before(cudaStream_t stream);
  // After the call's launches on `stream`: records where the next call on another stream must wait.
  cudaError_t after(cudaStream_t stream);

 private:
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
  cudaStream_t last_ = nullptr;
  unsigned long long last_capture_ = 0;  // the capture the previous call was recorded in; 0: none (eager)
};

}  // namespace jax_mscclpp::cuda
