"""The NCCL-API library's call for an operation (nccl/runtime/operation.h, routing.h: route, collective_call,
point_to_point_message), through the GPU tests' harness module (the CUDA build; no GPU needed), as the library's
submit and launch make it: every operation is decoded once, and the rank's call carries NCCL's arguments as our
kernels take them -- a reduction's elements in the reduction's type and op, data that only moves as bytes, the
caller's buffers unchanged and never reached by the peers (only registered windows are), the communicator's grid
cap -- checked against NCCL's definitions and codes.def, read here apart from the library."""

import numpy as np
import pytest

from jax_mscclpp._codes import CODE_TABLES, Collective, ReduceOp

# ncclDataType_t in order, with its element bytes (nccl/include/jax_mscclpp_nccl/nccl_api.h).
NCCL_DTYPES = [("ncclInt8", 1), ("ncclUint8", 1), ("ncclInt32", 4), ("ncclUint32", 4), ("ncclInt64", 8),
               ("ncclUint64", 8), ("ncclFloat16", 2), ("ncclFloat32", 4), ("ncclFloat64", 8), ("ncclBfloat16", 2),
               ("ncclFloat8e4m3", 1), ("ncclFloat8e5m2", 1)]
SUM, PROD, MAX, MIN, AVG = range(5)  # ncclRedOp_t
KERNEL_OPS = {SUM: ReduceOp.SUM, MAX: ReduceOp.MAX, MIN: ReduceOp.MIN}
KERNEL_DTYPE = {row["nccl_type"]: row["code"] for row in CODE_TABLES["dtype"]}  # codes.def's NCCL column
U8 = KERNEL_DTYPE["ncclUint8"]
COLLECTIVE_OF = {"ncclAllReduce": Collective.ALL_REDUCE, "ncclAllGather": Collective.ALL_GATHER,
                 "ncclReduceScatter": Collective.REDUCE_SCATTER, "ncclAlltoAll": Collective.ALL_TO_ALL}
OPERATIONS = [*COLLECTIVE_OF, "ncclSend", "ncclRecv", "ncclBroadcast", "ncclBcast", "ncclReduce", "ncclGather",
              "ncclScatter"]


def rank_call(harness, rng, function, dtype, op, *, nranks=4, shares_gpu=True):
    """(arguments, the harness's answer, how many operations it decoded)."""
    args = dict(function=function, count=int(rng.integers(1, 1 << 22)), dtype=dtype, op=op,
                peer=int(rng.integers(0, nranks)), root=int(rng.integers(0, nranks)), nranks=nranks,
                rank=int(rng.integers(0, nranks)), shares_gpu=shares_gpu,
                send=int(rng.integers(1, 1 << 40)) * 256, recv=int(rng.integers(1, 1 << 40)) * 256,
                max_blocks=int(rng.integers(1, 256)))
    before = harness.nccl_operations_decoded()
    answer = harness.nccl_rank_call(**args)
    return args, answer, harness.nccl_operations_decoded() - before


@pytest.mark.parametrize("shares_gpu", [True, False])
@pytest.mark.parametrize("function", OPERATIONS)
def test_every_operation_is_decoded_once(harness, function, shares_gpu):
    rng = np.random.default_rng(2 * OPERATIONS.index(function) + shares_gpu)
    for dtype in range(len(NCCL_DTYPES) + 1):  # an unknown type too (refused or forwarded)
        for op in (SUM, PROD, MAX, MIN, AVG):
            for nranks in (1, 2, 8):
                _, answer, decoded = rank_call(harness, rng, function, dtype, op, nranks=nranks,
                                               shares_gpu=shares_gpu)
                # the route decodes; the rank's call (collective_call, point_to_point_message) reads the route
                assert decoded == 1, (function, dtype, op, nranks, answer["route"])


@pytest.mark.parametrize("shares_gpu", [True, False])
@pytest.mark.parametrize("function", list(COLLECTIVE_OF))
def test_the_collective_call_carries_the_operation_as_our_kernels_take_it(harness, function, shares_gpu):
    rng = np.random.default_rng(len(function) + 31 * shares_gpu)
    collective = COLLECTIVE_OF[function]
    seen = 0
    for dtype, (name, element) in enumerate(NCCL_DTYPES):
        for op in (SUM, PROD, MAX, MIN, AVG):
            for nranks in (2, 4, 8):
                args, call, _ = rank_call(harness, rng, function, dtype, op, nranks=nranks, shares_gpu=shares_gpu)
                if call["route"] != "collective":
                    continue
                seen += 1
                count = args["count"]
                if collective.reduces:  # elements of the reduction's type, with its op
                    expected = (count, KERNEL_DTYPE[name], int(KERNEL_OPS[op]))
                else:  # bytes
                    expected = (count * element, U8, int(ReduceOp.SUM))
                assert (call["block_count"], call["dtype"], call["op"]) == expected, (name, op)
                input_blocks = nranks if collective in (Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL) else 1
                table = harness.nccl_select_algorithm([], int(collective), count * element * input_blocks, nranks,
                                                      not shares_gpu, shares_gpu)
                assert call == dict(
                    route="collective", call="collective", block_bytes=count * element, collective=int(collective),
                    algorithm=table, **{"in": args["send"]}, out=args["recv"], block_count=expected[0],
                    dtype=expected[1], op=expected[2], max_blocks=args["max_blocks"], plan_id=0,
                    peers_reach_buffers=False)
    assert seen > 0


@pytest.mark.parametrize("function", ["ncclSend", "ncclRecv"])
def test_a_point_to_point_message_is_the_callers_buffer_in_bytes(harness, function):
    rng = np.random.default_rng(len(function))
    for dtype, (_, element) in enumerate(NCCL_DTYPES):
        args, call, _ = rank_call(harness, rng, function, dtype, SUM)
        receive = function == "ncclRecv"
        assert call == dict(route="point_to_point", call="point_to_point", block_bytes=args["count"] * element,
                            buffer=args["recv" if receive else "send"], bytes=args["count"] * element,
                            peer=args["peer"], receive=int(receive))


@pytest.mark.parametrize("function", ["ncclBroadcast", "ncclBcast", "ncclGather", "ncclScatter"])
def test_a_composed_move_carries_its_block_in_bytes(harness, function):
    rng = np.random.default_rng(len(function) + 5)
    for dtype, (_, element) in enumerate(NCCL_DTYPES):
        args, call, _ = rank_call(harness, rng, function, dtype, SUM)
        assert call == dict(route="composed", block_bytes=args["count"] * element)
