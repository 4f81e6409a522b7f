#include "communicator_setup.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "check.h"
#include "jax_mscclpp/settings.h"
#include "last_error.h"
#include "our_runtime.h"
#include "rank_context.h"
#include "rank_identity.h"
#include "rank_setup.h"
#include "real_nccl.h"
#include "runtime_communicator.h"
#include "runtime_settings.h"
#include "select/rules.h"

#ifndef JAX_MSCCLPP_NCCL_LIBRARY_VERSION
#define JAX_MSCCLPP_NCCL_LIBRARY_VERSION "unversioned"
#endif

namespace jax_mscclpp::nccl {

void SetupInterrupt::attach(BootstrapClient* client) {
  std::lock_guard<std::mutex> lock(mutex_);
  client_ = client;
  if (interrupted()) client_->interrupt();
}

void SetupInterrupt::detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  client_ = nullptr;
}

void SetupInterrupt::interrupt() {
  std::lock_guard<std::mutex> lock(mutex_);
  interrupted_.store(true, std::memory_order_release);
  if (client_ != nullptr) client_->interrupt();
}

Agreement local_agreement() {
  const StreamTuning stream = cuda::stream_tuning_setting();
  auto named = [](Setting s, const std::string& value) { return AgreementField{setting_name(s), value}; };
  return {
      {"library version", std::string(JAX_MSCCLPP_NCCL_LIBRARY_VERSION) + " (NCCL API " +
                              std::to_string(JAX_MSCCLPP_NCCL_HEADER_VERSION_CODE) + ")"},
      named(Setting::kNcclRuntime, our_runtime_enabled() ? "1" : "0"),
      named(Setting::kTrapOnFailure, cuda::stop_on_failure_setting() ? "0" : "1"),
      {"selection table (selection.def)", select::builtin_rules_digest()},
      named(Setting::kScratchBytes, std::to_string(cuda::gpu_scratch_bytes_setting())),
      named(Setting::kStreamBlocks, std::to_string(cuda::stream_blocks_setting())),
      named(Setting::kStreamBlockBytes, std::to_string(stream.block_bytes)),
      named(Setting::kStreamChunk, std::to_string(stream.max_chunk)),
      named(Setting::kStreamSlots, std::to_string(stream.slots)),
      {"channels per peer", std::to_string(cuda::kGpuChannelsPerPeer)},
  };
}

namespace {

RankIdentity local_identity(const SetupRequest& request) {
  RankIdentity mine;
  cudaError_t error = cudaErrorNoDevice;
  static_cast<GpuIdentity&>(mine) = cuda::local_gpu_identity(request.device, &error);
  mine.agreement = local_agreement();
  if (!our_runtime_enabled()) {
    mine.runtime_refusal = std::string(setting_name(Setting::kNcclRuntime)) + "=0";
  } else if (mine.gpu_uuid.empty()) {
    mine.runtime_refusal = "no GPU for jax_mscclpp's runtime (CUDA: " +
                           (request.device < 0 ? request.device_error : std::string(cudaGetErrorString(error))) + ")";
  }
  if (open_real_library() != ncclSuccess) {
    const std::string text = last_error(), prefix = "jax_mscclpp libnccl.so.2: ";
    mine.real_refusal = text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text;
  }
  clear_last_error();
  return mine;
}

const char* result_name(ncclResult_t code) {
  auto text = real_if_present<decltype(&ncclGetErrorString)>(ApiFunction::ncclGetErrorString);
  return text != nullptr ? text(code) : result_description(code);
}

// The real communicator of every rank of `bootstrap`, made from rank 0's real id, which travels over it. Collective:
// every rank calls it after the same decision. ncclSuccess with *out set, else the code with `why`.
ncclResult_t init_real(BootstrapClient& bootstrap, const SetupRequest& request, ncclComm_t* out, std::string* why) {
  auto get_id = real<decltype(&ncclGetUniqueId)>(ApiFunction::ncclGetUniqueId);
  std::string mine = "0";
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    const ncclResult_t made = get_id != nullptr ? get_id(&id) : ncclSystemError;
    if (made == ncclSuccess) {
      mine = "1" + std::string(id.internal, sizeof(id.internal));
    } else {
      auto last = real_if_present<decltype(&ncclGetLastError)>(ApiFunction::ncclGetLastError);
      mine = std::string("0") + result_name(made) + (last != nullptr ? std::string(": ") + last(nullptr) : "");
    }
  }
  const auto frames = bootstrap.all_gather(mine, "ncclCommInitRank (NVIDIA's NCCL id)");
  const std::string& root = frames[0];
  if (root.size() != 1 + sizeof(id.internal) || root[0] != '1') {
    *why = "rank 0 could not make NVIDIA's NCCL id: " + root.substr(1);
    return ncclSystemError;
  }
  std::memcpy(id.internal, root.data() + 1, sizeof(id.internal));
  ncclConfig_t config = request.config;
  ncclResult_t result;
  const char* called;
  if (request.has_config) {
    called = "ncclCommInitRankConfig";
    auto init = real<decltype(&ncclCommInitRankConfig)>(ApiFunction::ncclCommInitRankConfig);
    result = init != nullptr ? init(out, bootstrap.nranks(), id, bootstrap.rank(), &config) : ncclSystemError;
  } else {
    called = "ncclCommInitRank";
    auto init = real<decltype(&ncclCommInitRank)>(ApiFunction::ncclCommInitRank);
    result = init != nullptr ? init(out, bootstrap.nranks(), id, bootstrap.rank()) : ncclSystemError;
  }
  // A non-blocking config: NVIDIA's init goes on in the background; its async error says when it is done.
  if (result == ncclInProgress) {
    auto async_error = real<decltype(&ncclCommGetAsyncError)>(ApiFunction::ncclCommGetAsyncError);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
    while (async_error != nullptr && async_error(*out, &result) == ncclSuccess && result == ncclInProgress &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (result == ncclInProgress) result = ncclTimeout;
  }
  if (result != ncclSuccess) {
    auto last = real_if_present<decltype(&ncclGetLastError)>(ApiFunction::ncclGetLastError);
    const std::string text = last != nullptr ? last(*out) : "";
    *why = std::string("NVIDIA's NCCL (") + real_library_path() + ") " + called + " failed on rank " +
           std::to_string(bootstrap.rank()) + ": " + result_name(result) + (text.empty() ? "" : ": " + text);
    *out = nullptr;
  }
  return result;
}

SetupResult failed(ncclResult_t code, const std::string& text) {
  SetupResult r;
  r.code = code;
  r.error = "ncclCommInitRank: " + text;
  return r;
}

// A failure of this rank's own before its runtime's communicator holds the bootstrap (which then reports its own
// steps' failures, runtime_communicator.h), told to every other rank.
SetupResult failed_here(BootstrapClient* bootstrap, ncclResult_t code, const std::string& text) {
  if (bootstrap != nullptr) bootstrap->report_failure(text);
  return failed(code, text);
}

}  // namespace

SetupResult set_up_communicator(const SetupRequest& request, SetupInterrupt* interrupt) {
  std::unique_ptr<BootstrapClient> bootstrap;
  RuntimeCommunicator* runtime = nullptr;
  try {
    if (request.device >= 0) JAX_MSCCLPP_CUDA_CHECK(cudaSetDevice(request.device));
    bootstrap = std::make_unique<BootstrapClient>(request.root, request.rank, request.nranks);
    // Detached when this scope ends, before `bootstrap` (declared outside it) frees the client.
    struct Detach {
      SetupInterrupt* interrupt;
      ~Detach() {
        if (interrupt != nullptr) interrupt->detach();
      }
    } detach_at_end{interrupt};
    if (interrupt != nullptr) interrupt->attach(bootstrap.get());
    const RankIdentity mine = local_identity(request);
    const auto frames = bootstrap->all_gather(encode_identity(mine), "ncclCommInitRank (identities)");
    std::vector<RankIdentity> identities;
    for (int q = 0; q < request.nranks; ++q) identities.push_back(decode_identity(frames[q], q));
    const Backend backend = choose_backend(identities);
    if (!backend.agreed) throw Disagreement(backend.disagreement);
    SetupResult result;
    if (!backend.ours) {
      result.backend = "NVIDIA's NCCL: " + backend.reason;
      if (!backend.real_refusal.empty())
        return failed(ncclSystemError, "NVIDIA's NCCL must run this communicator (" + backend.reason +
                                           "), but it did not open on " + backend.real_refusal);
      std::string why;
      result.code = init_real(*bootstrap, request, &result.real, &why);
      if (result.code != ncclSuccess)
        return failed(result.code, why + " (it runs this communicator: " + backend.reason + ")");
      return result;
    }
    // The endpoint round runs uninterrupted: the client moves into the runtime's communicator, which frees it.
    if (interrupt != nullptr) interrupt->detach();
    BootstrapClient& client = *bootstrap;
    runtime = new RuntimeCommunicator(std::move(bootstrap), identities, backend);
    result.runtime = runtime;
    result.backend = "jax_mscclpp's runtime: " + backend.reason;
    // NVIDIA's beside ours, where it can run on these ranks (every rank decides alike from the same frames) and
    // could serve anything: ours serves every call of a communicator of one rank (routing.h).
    if (!backend.shares_gpu && backend.real_refusal.empty() && request.nranks > 1) {
      std::string why;
      if (init_real(client, request, &result.real, &why) == ncclSuccess) {
        result.backend += ", NVIDIA's NCCL beside it";
      } else {
        result.backend += "; NVIDIA's NCCL beside it failed (" + why + ")";
      }
    }
    return result;
  } catch (const Disagreement& error) {
    delete runtime;
    return failed(ncclInvalidUsage, error.what());
  } catch (const RankFailed& error) {
    delete runtime;
    return failed(ncclRemoteError, error.what());
  } catch (const std::bad_alloc&) {
    delete runtime;
    return failed_here(bootstrap.get(), ncclSystemError, "out of host memory");
  } catch (const std::exception& error) {
    delete runtime;
    return failed_here(bootstrap.get(), ncclSystemError, error.what());
  } catch (...) {
    delete runtime;
    return failed_here(bootstrap.get(), ncclInternalError, "an unknown exception");
  }
}

}  // namespace jax_mscclpp::nccl
