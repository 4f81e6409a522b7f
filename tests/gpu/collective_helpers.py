"""Helpers of the collective-kernel tests and benchmark: layouts, inputs and numpy references.

Nothing here imports jax_mscclpp at module level, so the tests collect without a build.
"""

import numpy as np

from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, is_float, numpy_dtype

POISON = 0xEE
# The virtual ranks of the collective and permutation tests: scratch and buffer per rank, channels per peer (HB
# grids have at most this many blocks: 8 ranks x 8 blocks stay resident).
SCRATCH = 16 << 20
BUFFER = 4 << 20
CPP = 8


class Ranks:
    """A set of virtual ranks and the epoch all of them must have reached."""

    def __init__(self, cuda, nranks, scratch=SCRATCH, buffer=BUFFER, cpp=CPP, port_channels=False, **stream):
        """``stream``: VirtualRanks' stream_blocks / stream_slots / stream_chunk."""
        self.cuda = cuda
        self.vr = VirtualRanks(nranks, buffer_bytes=buffer, scratch_bytes=scratch, channels_per_peer=cpp,
                               port_channels=port_channels, **stream)
        self.epoch = 0

    def launches(self, collective, algorithm, count, dtype):
        from tests.harness.virtual_ranks import ALGORITHM_CODES, COLLECTIVE_CODES, DTYPE_CODES

        return self.cuda.collective_launch_count(COLLECTIVE_CODES[collective], ALGORITHM_CODES[algorithm], count,
                                                 DTYPE_CODES[dtype], self.vr.nranks, self.vr.scratch_bytes)

    def check_epochs(self):
        got = [self.vr.epoch(r) for r in range(self.vr.nranks)]
        assert got == [self.epoch] * self.vr.nranks, f"epochs {got}, expected {self.epoch}"


def ranks_by_size(cuda, **options):
    """For a module fixture: yields get(n), the set of n ranks (made with ``options``) reused by the module's tests,
    one set alive at a time (which keeps the GPU's memory use small); closes the last at the end."""
    made = {}

    def get(n):
        if n not in made:
            for other in list(made):
                made.pop(other).vr.close()
            made[n] = Ranks(cuda, n, **options)
        return made[n]

    yield get
    for rk in made.values():
        rk.vr.close()

ALL_REDUCE_ALGORITHMS = ["1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "2pr", "2pa_nvls"]
ALL_PAIRS_ALGORITHMS = ["allpairs", "allpairs_ll", "allpairs_hb"]
# The kernel in place over the buffers the ranks post (virtual ranks of one process reach each other's buffers).
IN_PLACE_COMBOS = [(c, "in_place") for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")]
COMBOS = [("all_reduce", a) for a in ALL_REDUCE_ALGORITHMS] + [
    (c, a) for c in ("all_gather", "reduce_scatter", "all_to_all") for a in ALL_PAIRS_ALGORITHMS
] + IN_PLACE_COMBOS
REDUCING = ("all_reduce", "reduce_scatter")


def in_blocks(collective, n):
    return n if collective in ("reduce_scatter", "all_to_all") else 1


def out_blocks(collective, n):
    return n if collective in ("all_gather", "all_to_all") else 1


def random_array(rng, dtype, count):
    """Random data, never all zeros: normal floats, integers over the type's whole range."""
    dt = numpy_dtype(dtype)
    if is_float(dt):
        return rng.standard_normal(count).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=count, dtype=dt, endpoint=True)


def fold(arrays, dtype, op):
    """Left fold in rank order as the kernels compute it: f16/bf16 widened to f32 and rounded once, integer sums
    wrapping, max/min exact."""
    dt = numpy_dtype(dtype)
    if op == "sum":
        if is_float(dt):
            wide = np.float64 if dt == np.float64 else np.float32
            acc = arrays[0].astype(wide)
            for a in arrays[1:]:
                acc = acc + a.astype(wide)
            return acc.astype(dt)
        acc = arrays[0].copy()
        for a in arrays[1:]:
            acc = np.add(acc, a, dtype=dt)
        return acc
    fn = np.maximum if op == "max" else np.minimum
    acc = arrays[0]
    for a in arrays[1:]:
        acc = fn(acc, a)
    return acc.astype(dt)


def expected_outputs(collective, data, count, dtype, op):
    """Each rank's expected output for per-rank inputs `data`."""
    n = len(data)
    blocks = [[d[q * count : (q + 1) * count] for q in range(in_blocks(collective, n))] for d in data]
    if collective == "all_reduce":
        return [fold(data, dtype, op)] * n
    if collective == "all_gather":
        return [np.concatenate(data)] * n
    if collective == "reduce_scatter":
        return [fold([blocks[q][r] for q in range(n)], dtype, op) for r in range(n)]
    return [np.concatenate([blocks[q][r] for q in range(n)]) for r in range(n)]


def ring_bound(collective, data, count, dtype):
    """(float64 sum, error bound) for a sum folded in any order with a rounding per step (the ring)."""
    dt = numpy_dtype(dtype)
    if dt.name == "bfloat16":
        import ml_dtypes

        eps = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
    else:
        eps = float(np.finfo(dt).eps)
    stack = np.stack([d.astype(np.float64) for d in data])
    n = len(data)
    return stack.sum(0), (n + 1) * eps * np.abs(stack).sum(0) + 1e-30


def upload_inputs(vr, data, src_off=0):
    for r, d in enumerate(data):
        vr.upload(r, INPUT, d, offset=src_off)


def download_outputs(vr, nbytes, dtype, dst_off=0, guard=64):
    """Each rank's output; checks that the bytes around it still hold the poison."""
    outs = []
    dt = numpy_dtype(dtype)
    for r in range(vr.nranks):
        avail = min(dst_off + nbytes + guard, vr.buffer_bytes)
        raw = vr.download(r, OUTPUT, avail)
        assert (raw[:dst_off] == POISON).all(), f"rank {r}: bytes before the output were written"
        assert (raw[dst_off + nbytes :] == POISON).all(), f"rank {r}: bytes past the output were written"
        outs.append(raw[dst_off : dst_off + nbytes].copy().view(dt))
    return outs


def check_outputs(collective, algorithm, data, outs, count, dtype, op, what=""):
    """Compares every rank's output with numpy; all_reduce / all_gather outputs must agree bit for bit."""
    n = len(data)
    want = expected_outputs(collective, data, count, dtype, op)
    if collective in ("all_reduce", "all_gather"):
        for r in range(1, n):
            assert outs[r].tobytes() == outs[0].tobytes(), f"{what}: ranks 0 and {r} disagree"
    ring_sum = algorithm == "2pr" and op == "sum" and is_float(numpy_dtype(dtype))
    for r in range(n):
        if ring_sum:
            ref, bound = ring_bound(collective, data, count, dtype)
            err = np.abs(outs[r].astype(np.float64) - ref)
            bad = np.flatnonzero(~(err <= bound))
            assert bad.size == 0, f"{what}: rank {r}: {bad.size} elements off, first at {bad[0]}: {outs[r][bad[0]]} vs {ref[bad[0]]}"
        else:
            got, exp = outs[r].view(np.uint8), np.ascontiguousarray(want[r]).view(np.uint8)
            if got.tobytes() != exp.tobytes():
                g, w = outs[r], want[r]
                diff = np.flatnonzero((g != w) & ~((g != g) & (w != w)))
                first = int(diff[0]) if diff.size else -1
                raise AssertionError(
                    f"{what}: rank {r}: {diff.size} of {g.size} elements differ; first at {first}: "
                    f"{g[first] if first >= 0 else None} vs {w[first] if first >= 0 else None}"
                )
