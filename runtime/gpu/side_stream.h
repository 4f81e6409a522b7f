// Collectives started on a side stream and joined later (docs/architecture.md, "Overlap").
//
// A started call forks from XLA's compute stream onto this device's side stream (one per device, created on first
// use, the highest priority the device offers, so that its thread blocks are scheduled ahead of waiting compute
// blocks), runs there, and records the call's done event; its done makes the compute stream wait on that event.
// Contract: a call id is started and joined alternately on a device (the lowering gives every start/done pair its
// own id, and XLA runs one device's program in order), so one event per (device, call id) suffices: a later start
// re-records it only after the earlier done has queued its wait. Starts of one device run in the order they are
// issued, which is the program's order on every device alike. Neither half can be recorded into a command buffer
// (the fork would leave a captured stream unjoined): both are registered without the command-buffer trait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jax_mscclpp::cuda {

// The side stream of `device`, made to wait for the work queued so far on `compute`.
cudaError_t fork_to_side_stream(int device, cudaStream_t compute, cudaStream_t* side);
// Records the done event of call `call_id` on `device` after the work queued so far on `side`.
cudaError_t record_done(int device, int64_t call_id, cudaStream_t side);
// Makes `compute` wait for the done event of call `call_id` on `device` (cudaErrorInvalidResourceHandle if that call
// was never started on this device).
cudaError_t join_done(int device, int64_t call_id, cudaStream_t compute);

}  // namespace jax_mscclpp::cuda
