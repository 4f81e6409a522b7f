// The collective setup of a communicator made from one of our ids (our_runtime.h, init_our_communicator): every
// rank meets the others at the id's bootstrap root and
//   1. sends its identity (rank_identity.h: host, process, GPU, whether our runtime can run it, whether NVIDIA's
//      library opened here, and the agreement fields, agreement.h): one round, the same frames on every rank;
//   2. decides from them, alike on every rank (choose_backend): a disagreement fails every rank with
//      ncclInvalidUsage naming the rank and the setting; ranks on several hosts, or a rank our runtime cannot
//      run, make the communicator NVIDIA's: rank 0 makes the real id, it travels over our bootstrap and every rank
//      inits the real communicator (a failure there is an error naming NVIDIA's library; a non-blocking config's
//      ncclInProgress is waited out through the real ncclCommGetAsyncError, within the timeout); otherwise ours
//      (RuntimeCommunicator), and where no two ranks share a GPU and every rank opened NVIDIA's library, the real
//      one beside it, made the same way, for what ours leaves to it.
// It runs on the thread that inits (blocking), on a thread of its own (a non-blocking config), or on one of the
// threads of the outermost ncclGroupEnd (inits inside a group); on any of them with the device the caller had
// current at its init call.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "agreement.h"
#include "bootstrap.h"
#include "jax_mscclpp_nccl/nccl_api.h"

namespace jax_mscclpp::nccl {

class RuntimeCommunicator;

struct SetupRequest {
  BootstrapAddress root{};
  int rank = 0;
  int nranks = 0;
  int device = -1;           // the caller's current device at its init call; -1 when there was none
  std::string device_error;  // why there was none
  bool has_config = false;
  ncclConfig_t config{};     // a copy of the caller's (NCCL copies it at the call too)
};

// What a setup made: our runtime's communicator, the real one, or both; or the failure (code and text).
struct SetupResult {
  ncclResult_t code = ncclSuccess;
  std::string error;
  RuntimeCommunicator* runtime = nullptr;
  ncclComm_t real = nullptr;
  std::string backend;  // which runtime the communicator is, and why
};

// How another thread ends a setup in progress (an abort of a communicator still initialising): the bootstrap
// client the setup currently waits in is interrupted (bootstrap.h), so its round fails at once.
class SetupInterrupt {
 public:
  void attach(BootstrapClient* client);
  void detach();
  void interrupt();
  bool interrupted() const { return interrupted_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;
  BootstrapClient* client_ = nullptr;
  std::atomic<bool> interrupted_{false};
};

// Never throws; the caller's device is made current first.
SetupResult set_up_communicator(const SetupRequest& request, SetupInterrupt* interrupt);

// This process's agreement fields (agreement.h): what decides a call, as its settings give it.
Agreement local_agreement();

}  // namespace jax_mscclpp::nccl
