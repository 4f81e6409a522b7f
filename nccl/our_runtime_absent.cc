// our_runtime.h where the CUDA parts are not built: no runtime, so no id, communicator or operation is ours and
// every call goes to the real NCCL.
#include "last_error.h"
#include "our_runtime.h"

namespace jax_mscclpp::nccl {
namespace {

ncclResult_t not_built(const char* function) {
  return fail(ncclInternalError, std::string(function) + ": jax_mscclpp was built without its CUDA runtime");
}

}  // namespace

bool our_runtime_enabled() { return false; }
ncclResult_t make_our_unique_id(ncclUniqueId*) { return not_built("ncclGetUniqueId"); }
bool is_our_unique_id(const ncclUniqueId&) { return false; }
ncclResult_t init_our_communicator(ncclComm_t*, int, const ncclUniqueId&, int, ncclConfig_t*) {
  return not_built("ncclCommInitRank");
}
ncclResult_t split_our_communicator(OurCommunicator*, int, int, ncclComm_t*, ncclConfig_t*) {
  return not_built("ncclCommSplit");
}
bool submit(ncclComm_t, const Operation&, ncclResult_t*) { return false; }
ncclResult_t end_group() { return ncclSuccess; }
void discard_group() {}
ncclResult_t create_premulsum(OurCommunicator*, ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t) {
  return not_built("ncclRedOpCreatePreMulSum");
}
ncclResult_t destroy_reduction(OurCommunicator*, ncclRedOp_t) { return not_built("ncclRedOpDestroy"); }
void release_runtime(OurCommunicator*, bool) {}
ncclResult_t run_group_setups() { return ncclSuccess; }
void discard_group_setups() {}
std::vector<Operation> queued_group() { return {}; }
float estimate_group_microseconds(const std::vector<Operation>&) { return 0.0f; }
ncclResult_t shrink_our_communicator(OurCommunicator*, const int*, int, ncclComm_t*, ncclConfig_t*, int) {
  return not_built("ncclCommShrink");
}
bool release_pending_setup(OurCommunicator*) { return false; }
std::string runtime_failure(const OurCommunicator*) { return ""; }
ncclResult_t allocate_buffer(void**, size_t) { return not_built("ncclMemAlloc"); }
bool owns_buffer(void*) { return false; }
ncclResult_t register_window(OurCommunicator*, void*, size_t, int, void**) { return not_built("ncclCommWindowRegister"); }
ncclResult_t run_group_windows() { return ncclSuccess; }
ncclResult_t run_group_children() { return ncclSuccess; }
void discard_group_children() {}
void discard_group_windows() {}
void deregister_window(OurCommunicator*, void*) {}
void register_buffer(OurCommunicator*, const void*, size_t) {}
std::string in_place_between_processes(const OurCommunicator*, uint64_t* in_place, uint64_t* through_scratch) {
  *in_place = *through_scratch = 0;
  return "the library was built without CUDA";
}
void deregister_buffer(OurCommunicator*, const void*, size_t) {}
ncclResult_t free_buffer(void*) { return not_built("ncclMemFree"); }
int runtime_rank(const OurCommunicator*) { return 0; }
int runtime_nranks(const OurCommunicator*) { return 0; }
bool runtime_failed(const OurCommunicator*) { return false; }
void report_late_wait(const OurCommunicator*) {}
int runtime_device(const OurCommunicator*) { return 0; }
std::string call_counts() { return ""; }

}  // namespace jax_mscclpp::nccl
