#include "windows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "check.h"
#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {
namespace {

// A rank's frame of the first round: its range's size and its winFlags, then, where it asked for a symmetric window,
// its memory handle (one that only its own process maps where CUDA IPC does not export the memory: cuMem's), or
// none where the range is no device memory.
struct FrameHead {
  uint64_t size;
  uint64_t flags;
};

std::string handle_frame(void* buffer, size_t bytes, int flags, int device) {
  const FrameHead head{bytes, static_cast<uint64_t>(static_cast<uint32_t>(flags))};
  std::string frame(reinterpret_cast<const char*>(&head), sizeof(head));
  if ((flags & NCCL_WIN_COLL_SYMMETRIC) == 0) return frame;
  try {
    frame += cuda::MemoryHandle::make(buffer, bytes, device, /*local_only=*/true).serialize();
  } catch (const std::exception&) {
    (void)cudaGetLastError();
  }
  return frame;
}

FrameHead frame_head(const std::string& frame) {
  FrameHead head{0, 0};
  if (frame.size() >= sizeof(head)) std::memcpy(&head, frame.data(), sizeof(head));
  return head;
}

}  // namespace

Window* Windows::add(BootstrapClient& bootstrap, int device, void* buffer, size_t bytes, int flags) {
  auto window = std::make_unique<Window>();
  window->buffer = static_cast<char*>(buffer);
  window->bytes = bytes;
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  const std::vector<std::string> frames = bootstrap.all_gather(handle_frame(buffer, bytes, flags, device),
                                                               "ncclCommWindowRegister (the ranks' ranges)");
  window->reach = bytes;
  window->symmetric = true;
  for (const std::string& frame : frames) {
    const FrameHead head = frame_head(frame);
    window->reach = std::min<size_t>(window->reach, head.size);
    window->symmetric = window->symmetric && (head.flags & NCCL_WIN_COLL_SYMMETRIC) != 0;
  }
  if (!window->symmetric) {  // every rank reads the same frames: none maps, none runs the second round
    windows_.push_back(std::move(window));
    return windows_.back().get();
  }
  window->mappings.resize(nranks);
  window->ranges.assign(nranks, nullptr);
  bool mapped = buffer != nullptr && bytes > 0;
  for (int q = 0; q < nranks && mapped; ++q) {
    if (q == rank) {
      window->ranges[q] = window->buffer;
      continue;
    }
    try {
      window->mappings[q] =
          cuda::MappedMemory(cuda::MemoryHandle::deserialize(frames[q].substr(sizeof(FrameHead))), device);
      window->ranges[q] = window->mappings[q].get();
    } catch (const std::exception&) {
      (void)cudaGetLastError();
      mapped = false;
    }
  }
  const std::vector<std::string> answers =
      bootstrap.all_gather(mapped ? "1" : "0", "ncclCommWindowRegister (whether every rank mapped the window)");
  window->mapped = std::all_of(answers.begin(), answers.end(), [](const std::string& a) { return a == "1"; });
  if (!window->mapped) {
    window->mappings.clear();
    window->ranges.clear();
  }
  windows_.push_back(std::move(window));
  return windows_.back().get();
}

void Windows::remove(Window* window) {
  const auto found = std::find_if(windows_.begin(), windows_.end(),
                                  [window](const std::unique_ptr<Window>& w) { return w.get() == window; });
  if (found == windows_.end()) return;
  if (window->mapped) JAX_MSCCLPP_CUDA_IGNORE(cudaDeviceSynchronize());  // a kernel may still use the mappings
  windows_.erase(found);
}

const Window* Windows::holding(const void* p, size_t bytes) const {
  const char* at = static_cast<const char*>(p);
  for (const std::unique_ptr<Window>& w : windows_) {
    if (!w->mapped || at < w->buffer) continue;  // mapped: symmetric, the peers' offsets are this rank's
    const size_t offset = static_cast<size_t>(at - w->buffer);
    if (offset <= w->reach && bytes <= w->reach - offset) return w.get();
  }
  return nullptr;
}

void Windows::add_buffer(const void* buffer, size_t bytes) {
  buffers_.emplace_back(static_cast<const char*>(buffer), bytes);
}

void Windows::remove_buffer(const void* buffer, size_t bytes) {
  const auto found = std::find(buffers_.begin(), buffers_.end(),
                               std::pair<const char*, size_t>(static_cast<const char*>(buffer), bytes));
  if (found != buffers_.end()) buffers_.erase(found);
}

bool Windows::recorded(const void* p, size_t bytes) const {
  const char* at = static_cast<const char*>(p);
  const auto inside = [&](const char* start, size_t size) {
    return at >= start && static_cast<size_t>(at - start) <= size && bytes <= size - static_cast<size_t>(at - start);
  };
  for (const auto& [start, size] : buffers_)
    if (inside(start, size)) return true;
  for (const std::unique_ptr<Window>& w : windows_)
    if (inside(w->buffer, w->bytes)) return true;
  return false;
}

bool Windows::registered(const void* in, size_t in_bytes, const void* out, size_t out_bytes) const {
  return recorded(in, in_bytes) && recorded(out, out_bytes);
}

bool Windows::in_place(const void* in, size_t in_bytes, const void* out, size_t out_bytes, int nranks,
                       InPlaceBuffers* buffers) const {
  if (nranks < 2 || nranks > kDirectPeers) return false;
  const Window* from = holding(in, in_bytes);
  const Window* to = holding(out, out_bytes);
  if (from == nullptr || to == nullptr) return false;
  const size_t in_offset = static_cast<const char*>(in) - from->buffer;
  const size_t out_offset = static_cast<const char*>(out) - to->buffer;
  *buffers = InPlaceBuffers{};
  for (int q = 0; q < nranks; ++q) {
    buffers->in[q] = from->ranges[q] + in_offset;
    buffers->out[q] = to->ranges[q] + out_offset;
  }
  return true;
}

}  // namespace jax_mscclpp::nccl
