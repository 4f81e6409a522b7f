// The OPERATION rows of api_functions.def, and their p<name> aliases: each operation is offered to our runtime
// first (our_runtime.h: one of our communicators, and an operation it runs with a kernel, point-to-point messages
// or a composition) and forwarded to the real NCCL otherwise; the reductions those operations take are made by
// our runtime on a communicator of ours that the real NCCL does not serve, else by the real NCCL.
#include "forwarding.h"
#include "guarded.h"
#include "our_runtime.h"

using namespace jax_mscclpp::nccl;

#define JAX_MSCCLPP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// `operation` on our runtime when it runs it, else the real library's function of the same name with `arguments`.
template <typename Function, typename... Arguments>
ncclResult_t offered(const Operation& operation, ncclComm_t comm, Arguments... arguments) {
  return guarded(api_function_name(operation.function), [&] {
    ncclResult_t result;
    if (submit(comm, operation, &result)) return result;
    return forward_to_real<Function>(operation.function, arguments...);
  });
}

// A communicator of ours with a runtime that the real library does not serve: our runtime makes its reductions.
OurCommunicator* runtime_alone(ncclComm_t comm) {
  OurCommunicator* ours = our_communicator(comm);
  return ours != nullptr && ours->runtime != nullptr && ours->real == nullptr ? ours : nullptr;
}

}  // namespace

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                   cudaStream_t stream) {
  return offered<decltype(&ncclAllReduce)>(
      {ApiFunction::ncclAllReduce, sendbuff, recvbuff, count, datatype, op, -1, -1, stream}, comm, sendbuff, recvbuff,
      count, datatype, op, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                       cudaStream_t stream) {
  return offered<decltype(&ncclReduceScatter)>(
      {ApiFunction::ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, -1, stream}, comm, sendbuff,
      recvbuff, recvcount, datatype, op, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                                   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return offered<decltype(&ncclAllGather)>(
      {ApiFunction::ncclAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, -1, stream}, comm, sendbuff,
      recvbuff, sendcount, datatype, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return offered<decltype(&ncclAlltoAll)>(
      {ApiFunction::ncclAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, -1, -1, stream}, comm, sendbuff,
      recvbuff, count, datatype, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                                cudaStream_t stream) {
  return offered<decltype(&ncclReduce)>(
      {ApiFunction::ncclReduce, sendbuff, recvbuff, count, datatype, op, -1, root, stream}, comm, sendbuff, recvbuff,
      count, datatype, op, root, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                                   cudaStream_t stream) {
  return offered<decltype(&ncclBroadcast)>(
      {ApiFunction::ncclBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, -1, root, stream}, comm, sendbuff,
      recvbuff, count, datatype, root, comm, stream);
}

// The in-place broadcast of NCCL's first API.
JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                               ncclComm_t comm, cudaStream_t stream) {
  return offered<decltype(&ncclBcast)>({ApiFunction::ncclBcast, buff, buff, count, datatype, ncclSum, -1, root, stream},
                                       comm, buff, count, datatype, root, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                                cudaStream_t stream) {
  return offered<decltype(&ncclGather)>(
      {ApiFunction::ncclGather, sendbuff, recvbuff, count, datatype, ncclSum, -1, root, stream}, comm, sendbuff,
      recvbuff, count, datatype, root, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                                 cudaStream_t stream) {
  return offered<decltype(&ncclScatter)>(
      {ApiFunction::ncclScatter, sendbuff, recvbuff, count, datatype, ncclSum, -1, root, stream}, comm, sendbuff,
      recvbuff, count, datatype, root, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                              ncclComm_t comm, cudaStream_t stream) {
  return offered<decltype(&ncclSend)>(
      {ApiFunction::ncclSend, sendbuff, nullptr, count, datatype, ncclSum, peer, -1, stream}, comm, sendbuff, count,
      datatype, peer, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                              ncclComm_t comm, cudaStream_t stream) {
  return offered<decltype(&ncclRecv)>(
      {ApiFunction::ncclRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, -1, stream}, comm, recvbuff, count,
      datatype, peer, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                              ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded("ncclRedOpCreatePreMulSum", [&] {
    if (OurCommunicator* ours = runtime_alone(comm)) return create_premulsum(ours, op, scalar, datatype, residence);
    return forward_to_real<decltype(&ncclRedOpCreatePreMulSum)>(ApiFunction::ncclRedOpCreatePreMulSum, op, scalar,
                                                                datatype, residence, comm);
  });
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded("ncclRedOpDestroy", [&] {
    if (OurCommunicator* ours = runtime_alone(comm)) return destroy_reduction(ours, op);
    return forward_to_real<decltype(&ncclRedOpDestroy)>(ApiFunction::ncclRedOpDestroy, op, comm);
  });
}

#define JAX_MSCCLPP_NCCL_ALIAS_FORWARD(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_CUSTOM(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_DEVICE_API(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_OPERATION(return_type, name, parameters) \
  JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  JAX_MSCCLPP_NCCL_ALIAS_##kind(return_type, name, parameters)
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
