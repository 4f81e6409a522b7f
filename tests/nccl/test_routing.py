"""The NCCL-API library's routes (nccl/runtime/routing.h) and group launches, through the GPU tests' harness module
(the CUDA build; no GPU needed): on a communicator NVIDIA's NCCL does not serve (ranks sharing a GPU) every NCCL
operation is ours -- a collective kernel where one runs the (dtype, reduction), point-to-point messages for sends
and receives, a composition for the rest -- and nothing is forwarded; where NVIDIA's NCCL serves the communicator,
what no kernel of ours runs is forwarded; bad arguments are refused with NCCL's codes; a group runs its collectives
in order, then each communicator's sends and receives as one launch in call order."""

import pytest

# ncclDataType_t, ncclRedOp_t, ncclResult_t (nccl/include/jax_mscclpp_nccl/nccl_api.h).
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16, FP8E4M3, FP8E5M2 = range(12)
DTYPES = range(12)
SUM, PROD, MAX, MIN, AVG = range(5)
FIRST_MADE_OP = 5  # ncclNumOps: the first reduction ncclRedOpCreatePreMulSum makes
INVALID_ARGUMENT, INVALID_USAGE = 4, 5
# kernels/collectives/fold.h
FOLD_ELEMENT = {INT8: 0, UINT8: 1, INT32: 2, UINT32: 3, INT64: 4, UINT64: 5, FLOAT16: 6, FLOAT32: 7, FLOAT64: 8,
                BFLOAT16: 9, FP8E4M3: 10, FP8E5M2: 11}
FOLD_SUM, FOLD_PROD, FOLD_MAX, FOLD_MIN, FOLD_AVG, FOLD_PREMULSUM = range(6)
FOLD_OF = {SUM: FOLD_SUM, PROD: FOLD_PROD, MAX: FOLD_MAX, MIN: FOLD_MIN, AVG: FOLD_AVG}


def route(harness, function, *, count=1024, dtype=FLOAT32, op=SUM, peer=-1, root=-1, nranks=4, shared=True,
          premulsums=()):
    """(kind, algorithm, fold element, fold op, refusal, reason); shared: ranks share a GPU (no NVIDIA's NCCL)."""
    return harness.nccl_route(function, count, dtype, op, peer, root, nranks, not shared, shared, list(premulsums))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [SUM, PROD, MAX, MIN, AVG])
@pytest.mark.parametrize("function", ["ncclAllReduce", "ncclReduceScatter", "ncclReduce"])
def test_every_reduction_is_ours_on_a_shared_gpu(harness, function, dtype, op):
    kind, algorithm, element, fold_op, _, reason = route(harness, function, dtype=dtype, op=op, root=1)
    native = op in (SUM, MAX, MIN) and dtype not in (FP8E4M3, FP8E5M2) and function != "ncclReduce"
    if native:
        assert (kind, reason) == ("collective", "")
        assert algorithm >= 0
    else:
        assert kind == "composed", reason
        assert (element, fold_op) == (FOLD_ELEMENT[dtype], FOLD_OF[op])


@pytest.mark.parametrize("function", ["ncclBroadcast", "ncclBcast", "ncclGather", "ncclScatter"])
@pytest.mark.parametrize("root", [0, 3])
def test_rooted_moves_are_composed_on_a_shared_gpu(harness, function, root):
    kind, _, element, _, _, _ = route(harness, function, dtype=INT8, root=root)
    assert (kind, element) == ("composed", -1)


@pytest.mark.parametrize("function", ["ncclBroadcast", "ncclReduce", "ncclGather", "ncclScatter"])
@pytest.mark.parametrize("root", [-1, 4])
def test_a_root_outside_the_communicator_is_refused(harness, function, root):
    kind, _, _, _, refusal, reason = route(harness, function, root=root)
    assert (kind, refusal) == ("refuse", INVALID_ARGUMENT)
    assert f"root {root} of 4 ranks" in reason


@pytest.mark.parametrize("function", ["ncclSend", "ncclRecv"])
def test_point_to_point_is_ours_at_any_size_on_a_shared_gpu(harness, function):
    for count in (0, 1, 4096, 1 << 20, 1 << 30):
        for peer in range(4):  # the rank itself included
            assert route(harness, function, count=count, dtype=UINT8, peer=peer)[0] == "point_to_point"


@pytest.mark.parametrize("peer", [-1, 4, 100])
def test_a_peer_outside_the_communicator_is_refused(harness, peer):
    kind, _, _, _, refusal, reason = route(harness, "ncclSend", peer=peer)
    assert (kind, refusal) == ("refuse", INVALID_ARGUMENT)
    assert f"peer {peer} of 4 ranks" in reason


@pytest.mark.parametrize("shared", [True, False])
def test_every_call_of_a_one_rank_communicator_is_ours(harness, shared):
    # a split's communicator of one rank: copies, never NVIDIA's (none is made beside it); every builtin reduction
    # of one block is the block, so only a PreMulSum folds (it multiplies the block)
    for function in ["ncclAllGather", "ncclAlltoAll", "ncclBroadcast", "ncclBcast", "ncclGather", "ncclScatter"]:
        kind, _, element, _, _, reason = route(harness, function, dtype=BFLOAT16, root=0, nranks=1, shared=shared)
        assert (kind, element) == ("composed", -1), reason
    for function in ["ncclAllReduce", "ncclReduceScatter", "ncclReduce"]:
        for dtype in (FP8E5M2, FLOAT32):
            for op in (SUM, PROD, MAX, MIN, AVG):
                kind, _, element, _, _, reason = route(harness, function, dtype=dtype, op=op, root=0, nranks=1,
                                                       shared=shared)
                assert (kind, element) == ("composed", -1), reason
            kind, _, element, fold_op, _, reason = route(harness, function, dtype=dtype, op=FIRST_MADE_OP, root=0,
                                                         nranks=1, shared=shared, premulsums=[(dtype, 2)])
            assert (kind, element, fold_op) == ("composed", FOLD_ELEMENT[dtype], FOLD_PREMULSUM), reason
        kind, _, _, _, refusal, reason = route(harness, function, op=FIRST_MADE_OP + 3, root=0, nranks=1,
                                               shared=shared)
        assert (kind, refusal) == ("refuse", INVALID_ARGUMENT), reason
    for count in (1, 1 << 24):
        assert route(harness, "ncclSend", count=count, dtype=UINT8, peer=0, nranks=1, shared=shared)[0] == \
            "point_to_point"
    kind, _, _, _, refusal, reason = route(harness, "ncclRecv", peer=1, nranks=1, shared=shared)
    assert (kind, refusal) == ("refuse", INVALID_ARGUMENT) and "peer 1 of 1 ranks" in reason


def test_nvidia_keeps_what_no_kernel_of_ours_runs_where_it_serves_the_communicator(harness):
    for function, op, dtype in [("ncclAllReduce", PROD, FLOAT32), ("ncclAllReduce", SUM, FP8E4M3),
                                ("ncclReduce", SUM, FLOAT32), ("ncclReduceScatter", AVG, BFLOAT16)]:
        assert route(harness, function, op=op, dtype=dtype, root=0, shared=False)[0] == "forward"
    for function in ["ncclBroadcast", "ncclGather", "ncclScatter"]:
        assert route(harness, function, root=0, shared=False)[0] == "forward"
    # Sizes the table gives to NVIDIA's NCCL (selection.def: point-to-point beyond the LL sizes is not ours).
    assert route(harness, "ncclSend", count=1 << 24, dtype=UINT8, peer=1, shared=False)[0] == "forward"
    assert route(harness, "ncclSend", count=64, dtype=UINT8, peer=1, shared=False)[0] == "point_to_point"


def test_a_premulsum_folds_with_its_factor_and_its_dtype(harness):
    made = [(FLOAT32, 0x40000000), (INT32, 3)]
    kind, _, element, fold_op, _, _ = route(harness, "ncclAllReduce", op=FIRST_MADE_OP, premulsums=made)
    assert (kind, element, fold_op) == ("composed", FOLD_ELEMENT[FLOAT32], FOLD_PREMULSUM)
    kind, _, _, fold_op, _, _ = route(harness, "ncclReduceScatter", op=FIRST_MADE_OP + 1, dtype=INT32,
                                      premulsums=made)
    assert (kind, fold_op) == ("composed", FOLD_PREMULSUM)
    kind, _, _, _, refusal, reason = route(harness, "ncclAllReduce", op=FIRST_MADE_OP + 1, dtype=FLOAT32,
                                           premulsums=made)
    assert (kind, refusal) == ("refuse", INVALID_ARGUMENT)
    assert "was made for data type 2, not 7" in reason
    kind, _, _, _, refusal, reason = route(harness, "ncclAllReduce", op=FIRST_MADE_OP + 2, premulsums=made)
    assert (kind, refusal) == ("refuse", INVALID_ARGUMENT)
    assert "not one of this communicator's" in reason


def test_an_unknown_dtype_is_refused_on_ours_and_forwarded_where_nvidia_serves(harness):
    assert route(harness, "ncclAllGather", dtype=12)[0:1] + route(harness, "ncclAllGather", dtype=12)[4:5] == (
        "refuse", INVALID_ARGUMENT)
    assert route(harness, "ncclAllGather", dtype=12, shared=False)[0] == "forward"


def test_a_group_runs_collectives_in_order_then_each_communicators_point_to_point_as_one_launch(harness):
    # (communicator, point-to-point) per queued call
    queue = [(0, True), (1, False), (0, False), (1, True), (0, True), (2, True), (1, True), (0, False)]
    assert harness.nccl_plan_group(queue) == [
        (False, [1]), (False, [2]), (False, [7]),  # the collectives, in call order
        (True, [0, 4]), (True, [3, 6]), (True, [5]),  # per communicator, by first point-to-point call
    ]
    assert harness.nccl_plan_group([]) == []
    many = [(0, True)] * 300
    assert harness.nccl_plan_group(many) == [(True, list(range(300)))]
