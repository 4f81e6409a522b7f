// The OPERATION rows of api_functions.def, and their p<name> aliases: each is offered to our runtime first
// (our_runtime.h: one of our communicators, an operation, dtype, reduction and size it has an algorithm for) and
// forwarded to the real NCCL otherwise.
#include "forwarding.h"
#include "our_runtime.h"

using namespace jax_mscclpp::nccl;

#define JAX_MSCCLPP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                   cudaStream_t stream) {
  ncclResult_t result;
  if (submit(comm, {ApiFunction::ncclAllReduce, sendbuff, recvbuff, count, datatype, op, -1, stream}, &result)) {
    return result;
  }
  return forward_to_real<decltype(&ncclAllReduce)>(ApiFunction::ncclAllReduce, sendbuff, recvbuff, count, datatype,
                                                   op, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                       cudaStream_t stream) {
  ncclResult_t result;
  if (submit(comm, {ApiFunction::ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, stream},
             &result)) {
    return result;
  }
  return forward_to_real<decltype(&ncclReduceScatter)>(ApiFunction::ncclReduceScatter, sendbuff, recvbuff,
                                                       recvcount, datatype, op, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                                   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t result;
  if (submit(comm, {ApiFunction::ncclAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, stream},
             &result)) {
    return result;
  }
  return forward_to_real<decltype(&ncclAllGather)>(ApiFunction::ncclAllGather, sendbuff, recvbuff, sendcount,
                                                   datatype, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t result;
  if (submit(comm, {ApiFunction::ncclAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, -1, stream}, &result)) {
    return result;
  }
  return forward_to_real<decltype(&ncclAlltoAll)>(ApiFunction::ncclAlltoAll, sendbuff, recvbuff, count, datatype,
                                                  comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                              ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t result;
  if (submit(comm, {ApiFunction::ncclSend, sendbuff, nullptr, count, datatype, ncclSum, peer, stream}, &result)) {
    return result;
  }
  return forward_to_real<decltype(&ncclSend)>(ApiFunction::ncclSend, sendbuff, count, datatype, peer, comm, stream);
}

JAX_MSCCLPP_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                              ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t result;
  if (submit(comm, {ApiFunction::ncclRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, stream}, &result)) {
    return result;
  }
  return forward_to_real<decltype(&ncclRecv)>(ApiFunction::ncclRecv, recvbuff, count, datatype, peer, comm, stream);
}

#define JAX_MSCCLPP_NCCL_ALIAS_FORWARD(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_CUSTOM(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_ALIAS_OPERATION(return_type, name, parameters) \
  JAX_MSCCLPP_NCCL_ALIAS(return_type, name, parameters)
#define JAX_MSCCLPP_NCCL_FUNCTION(kind, return_type, name, parameters, arguments) \
  JAX_MSCCLPP_NCCL_ALIAS_##kind(return_type, name, parameters)
#include "jax_mscclpp_nccl/api_functions.def"
#undef JAX_MSCCLPP_NCCL_FUNCTION
