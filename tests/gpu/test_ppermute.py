"""launch_permute (kernels/collectives/permute.cu) on virtual ranks: full, partial, empty and self permutations,
N = 2..8 (and 16) ranks on one GPU, both protocols (LL packets, streaming HB) and the size-chosen one, against
numpy, bit for bit. Outputs are poisoned before every call and the bytes around them checked; ranks that receive
nothing must hold zeros. Also: pipelining through a small scratch, 256 calls in flight with changing permutations
(epochs and scratch halves), CUDA-graph replay, a world of one, and the launch counts.

Run on one GPU: ``python3 -m pytest -q tests/gpu/test_ppermute.py``.
"""

import numpy as np
import pytest

from jax_mscclpp import selection
from jax_mscclpp._types import Collective

from .collective_helpers import BUFFER, POISON, Ranks, random_array, ranks_by_size
from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, numpy_dtype

pytestmark = pytest.mark.gpu

ALGORITHMS = ["p2p", "p2p_ll", "p2p_hb"]
NRANKS = [2, 3, 4, 5, 8]
COUNTS = [1, 3, 1023, 4096 * 8 + 5]
DTYPES = ["float32", "bfloat16", "int8", "uint16", "float64"]


def permutations(n, rng):
    """Named permutations of n ranks: (source, destination) pairs."""
    perms = {
        "shift": [(i, (i + 1) % n) for i in range(n)],
        "reverse": [(i, n - 1 - i) for i in range(n)],
        "partial": [(i, i + 1) for i in range(n - 1)],
        "one_pair": [(n - 1, 0)],
        "identity": [(i, i) for i in range(n)],
        "empty": [],
    }
    shuffled = rng.permutation(n)
    perms["random"] = [(i, int(shuffled[i])) for i in range(n) if i % 3 != 1]
    return perms


def destination_words(perm):
    """(destinations_lo, destinations_hi): byte r the destination of rank r, 0xff none (harness.h, kPermute)."""
    table = [0xFF] * 16
    for src, dst in perm:
        table[src] = dst
    lo = sum(d << (8 * i) for i, d in enumerate(table[:8]))
    hi = sum(d << (8 * i) for i, d in enumerate(table[8:]))
    return lo, hi


def expected(perm, data, n):
    out = [np.zeros_like(data[0]) for _ in range(n)]
    for src, dst in perm:
        out[dst] = data[src]
    return out


@pytest.fixture(scope="module")
def ranks(cuda):
    yield from ranks_by_size(cuda)


def download(vr, nbytes, dtype, dst_off=0, guard=64):
    outs = []
    for r in range(vr.nranks):
        raw = vr.download(r, OUTPUT, min(dst_off + nbytes + guard, vr.buffer_bytes))
        assert (raw[:dst_off] == POISON).all(), f"rank {r}: bytes before the output were written"
        assert (raw[dst_off + nbytes :] == POISON).all(), f"rank {r}: bytes past the output were written"
        outs.append(raw[dst_off : dst_off + nbytes].copy().view(numpy_dtype(dtype)))
    return outs


def check(outs, want, what):
    for r, (got, exp) in enumerate(zip(outs, want)):
        if got.view(np.uint8).tobytes() != np.ascontiguousarray(exp).view(np.uint8).tobytes():
            diff = np.flatnonzero(got.view(np.uint8) != np.ascontiguousarray(exp).view(np.uint8))
            raise AssertionError(f"{what}: rank {r}: {diff.size} bytes differ, first at byte {diff[0]}")


def run_case(rk, rng, algorithm, perm, dtype, count, src_off=0, dst_off=0):
    vr, n = rk.vr, rk.vr.nranks
    data = [random_array(rng, dtype, count) for _ in range(n)]
    for r in range(n):
        vr.upload(r, INPUT, data[r], offset=src_off)
        vr.fill(r, OUTPUT, POISON)
    lo, hi = destination_words(perm)
    vr.run("permute", algorithm=algorithm, dtype=dtype, count=count, src_off=src_off, dst_off=dst_off,
           destinations_lo=lo, destinations_hi=hi)
    rk.epoch += rk.launches("permute", algorithm, count, dtype)
    outs = download(vr, count * numpy_dtype(dtype).itemsize, dtype, dst_off)
    check(outs, expected(perm, data, n), f"{algorithm} n={n} {dtype} count={count} perm={perm}")


MATRIX = [(n, a) for n in NRANKS for a in ALGORITHMS]


@pytest.mark.parametrize("nranks,algorithm", MATRIX, ids=[f"{n}-{a}" for n, a in MATRIX])
def test_permutation_matrix(ranks, rng, nranks, algorithm):
    rk = ranks(nranks)
    for name, perm in permutations(nranks, rng).items():
        for dtype in DTYPES:
            for count in COUNTS:
                run_case(rk, rng, algorithm, perm, dtype, count)
    # Pointers that are element-aligned only (XLA's are 16-byte aligned; the kernels take any).
    run_case(rk, rng, algorithm, permutations(nranks, rng)["shift"], "float32", 1023, src_off=4, dst_off=12)
    run_case(rk, rng, algorithm, permutations(nranks, rng)["partial"], "bfloat16", 4099, src_off=2, dst_off=6)
    rk.check_epochs()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_sixteen_ranks(cuda, rng, algorithm):
    rk = Ranks(cuda, 16, scratch=4 << 20, buffer=1 << 20, cpp=4)  # 4 HB blocks a rank: 16 ranks' stay resident
    try:
        for perm in permutations(16, rng).values():
            run_case(rk, rng, algorithm, perm, "float32", 5000)
        rk.check_epochs()
    finally:
        rk.vr.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("nranks", [2, 5, 8])
def test_pipelined_through_small_scratch(cuda, rng, nranks, algorithm):
    """Blocks many times the scratch: LL pieces (many launches) or HB chunks streamed through slots (one)."""
    count = 4096 * 8 + 5
    rk = Ranks(cuda, nranks, scratch=64 << 10, buffer=BUFFER)
    try:
        launches = rk.launches("permute", algorithm, count, "float32")
        runs_as = algorithm
        if algorithm == "p2p":  # by selection.def's protocol rows for ranks sharing a GPU
            runs_as = selection.protocol_of("p2p", "gpu", count * 4, collective=Collective.PERMUTE, world=nranks,
                                            shares_gpu=True)
        if runs_as == "p2p_ll":
            assert launches >= 3, launches
        else:
            assert launches == 1, launches
        for perm in permutations(nranks, rng).values():
            run_case(rk, rng, algorithm, perm, "float32", count)
        run_case(rk, rng, algorithm, permutations(nranks, rng)["reverse"], "int8", 77)
        rk.check_epochs()
    finally:
        rk.vr.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("nranks", [3, 8])
def test_many_calls_in_flight(ranks, rng, nranks, algorithm):
    """256 calls with different data and permutations queued on every rank's stream before any is awaited: ranks
    drift apart by whole launches (a rank that only sends may run ahead), so a scratch half or a flag reused too
    early would show as stale data."""
    calls, count, dtype = 256, 301, "float32"
    rk = ranks(nranks)
    vr, n = rk.vr, nranks
    nbytes = count * numpy_dtype(dtype).itemsize
    assert calls * nbytes <= BUFFER
    names = sorted(permutations(n, rng))
    perms = [permutations(n, rng)[names[k % len(names)]] for k in range(calls)]
    data = [[random_array(rng, dtype, count) for _ in range(n)] for _ in range(calls)]
    for r in range(n):
        vr.upload(r, INPUT, np.concatenate([data[k][r] for k in range(calls)]))
        vr.fill(r, OUTPUT, POISON)
    for k in range(calls):
        lo, hi = destination_words(perms[k])
        for r in (range(n) if k % 2 == 0 else reversed(range(n))):
            vr.launch("permute", ranks=[r], algorithm=algorithm, dtype=dtype, count=count, src_off=k * nbytes,
                      dst_off=k * nbytes, destinations_lo=lo, destinations_hi=hi)
    vr.synchronize()
    rk.epoch += calls * rk.launches("permute", algorithm, count, dtype)
    rk.check_epochs()
    raw = [vr.download(r, OUTPUT, calls * nbytes) for r in range(n)]
    for k in range(calls):
        outs = [raw[r][k * nbytes : (k + 1) * nbytes].copy().view(numpy_dtype(dtype)) for r in range(n)]
        check(outs, expected(perms[k], data[k], n), f"call {k} perm {perms[k]}")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_graph_replay(cuda, rng, algorithm):
    """One call captured into a CUDA graph per rank and replayed: the epoch advances in device memory only."""
    n, count, dtype, replays = 4, 6000, "float32", 70
    rk = Ranks(cuda, n, scratch=64 << 10, buffer=BUFFER)
    try:
        vr = rk.vr
        perm = permutations(n, rng)["partial"]
        data = [random_array(rng, dtype, count) for _ in range(n)]
        for r in range(n):
            vr.upload(r, INPUT, data[r])
            vr.fill(r, OUTPUT, POISON)
        lo, hi = destination_words(perm)
        vr.replay_graph("permute", replays, algorithm=algorithm, dtype=dtype, count=count, destinations_lo=lo,
                        destinations_hi=hi)
        rk.epoch = replays * rk.launches("permute", algorithm, count, dtype)
        rk.check_epochs()
        check(download(vr, count * 4, dtype), expected(perm, data, n), "graph replay")
    finally:
        rk.vr.close()


def test_world_of_one(cuda, rng):
    rk = Ranks(cuda, 1, scratch=1 << 20, buffer=1 << 20)
    try:
        for algorithm in ALGORITHMS:
            run_case(rk, rng, algorithm, [(0, 0)], "float32", 1000)
            run_case(rk, rng, algorithm, [], "float32", 1000)
        rk.check_epochs()  # no kernel ran
    finally:
        rk.vr.close()


def test_supported_table_and_launch_counts(cuda_build):
    from tests.harness.virtual_ranks import ALGORITHM_CODES as A, COLLECTIVE_CODES as C, DTYPE_CODES as D

    sup = cuda_build.collective_supported
    for a in ALGORITHMS:
        assert all(sup(C["permute"], A[a], code, 0) for code in D.values())
        assert not sup(C["all_gather"], A[a], D["float32"], 0)
    assert not sup(C["permute"], A["allpairs"], D["float32"], 0)
    count = cuda_build.collective_launch_count
    assert count(C["permute"], A["p2p_hb"], 1 << 24, D["float32"], 8, 1 << 20) == 1  # any size: one launch
    assert count(C["permute"], A["p2p_ll"], 1 << 20, D["float32"], 8, 1 << 20) > 1  # pieces of an LL half
    assert count(C["permute"], A["p2p"], 0, D["float32"], 8, 1 << 20) == 0
    assert count(C["permute"], A["p2p"], 1000, D["float32"], 1, 1 << 20) == 0


def test_launch_collective_refuses_the_permutation(cuda, rng):
    with VirtualRanks(2, buffer_bytes=1 << 16, scratch_bytes=1 << 16, channels_per_peer=2) as vr:
        with pytest.raises(ValueError):  # the permutation's peers come through launch_permute only
            vr.launch("collective", collective="permute", algorithm="p2p", dtype="float32", count=100)
