"""launch_ragged_all_to_all (kernels/collectives/ragged_all_to_all.cu) on virtual ranks of one GPU, against a numpy
model of lax.ragged_all_to_all.

Every rank makes every call on its own stream (HarnessRank.ragged_all_to_all: the operand in its input buffer, the
output in its output buffer, the four tables written to the device by the harness), all launches issued before any
rank is synchronized, in a random rank order. Layouts are random: sizes with zeros, ranges in a random order with
gaps in the operand and the output, ranges that start at row 0 or end at the last row, empty ranges anywhere from
row 0 to the end, buffers at any byte alignment. Inputs are random bytes, never zero; outputs are pre-filled with
random bytes, which must survive wherever no rank writes, and the bytes after every output are checked; inputs are
checked unchanged. Cases: 2, 3, 4, 8 and 16 ranks, rows of 1, 2, 3, 6, 16 and 4096 bytes, int32 and int64 tables, a
rank sending nothing, everything to one rank, no rows at all, per-peer messages over several lanes with more chunks
than slots (credits cycle), many calls queued back to back and interleaved with point-to-point groups on the same
ranks (the lane counters carry over), CUDA-graph capture replayed with fresh data and with tables rewritten on the
device between replays, one rank (the local copy), the launcher's refusals, and in subprocesses the failures only
the device sees (rows past a peer's output, a negative offset, sizes that differ from recv_sizes: the record, the
poisoned output, every rank's kernel ending), a trap, a peer that never calls, and a sender that calls after its
receiver gave up. Every case runs with both exchanges: "direct" (each sender writes into the receivers' outputs, as
between ranks of one process) and "ring" (through the point-to-point slot rings, as between processes).

Run on one GPU: ``python3 -m pytest -q tests/gpu/test_ragged_all_to_all.py``.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, child_env, round_up

pytestmark = pytest.mark.gpu

ROW_BYTES = [1, 2, 3, 6, 16, 4096]
NRANKS = [2, 3, 4, 8]
BUFFER = 8 << 20  # input and output bytes of every cached rank
GUARD = 64  # bytes after every output (and operand) region that nothing may write
PAIR_BYTES = 100_000  # most bytes of one (sender, receiver) pair in the random layouts


EXCHANGES = ["direct", "ring"]  # the rows straight into the peers' outputs, or through the point-to-point rings


@pytest.fixture(scope="module", params=EXCHANGES)
def ranks(cuda, request):
    """get(n): a set of n virtual ranks reused by the module's tests (one set alive at a time): the counters of
    earlier tests' calls carry over into the next. Every test runs with each exchange: "direct" (ranks of one
    process, the default there) and "ring" (as between processes)."""
    made = {}
    direct = request.param == "direct"

    def get(n):
        if n not in made:
            for other in list(made):
                made.pop(other).close()
            made[n] = VirtualRanks(n, buffer_bytes=BUFFER, channels_per_peer=1, timeout_s=60, direct_exchange=direct)
        return made[n]

    yield get
    for vr in made.values():
        vr.close()


# -- the model --------------------------------------------------------------------------------------------------------


def ragged_all_to_all_model(operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes):
    """lax.ragged_all_to_all over ranks, in numpy: rows input_offsets[s][j] + [0, send_sizes[s][j]) of rank s's operand
    land in rank j's output from row output_offsets[s][j] (the sender's table says where); rank j's recv_sizes[j][s]
    equals send_sizes[s][j]. operands and outputs: per rank, arrays of rows (rows, row_bytes); the outputs are the
    ranks' outputs before the call, copied: rows no rank writes keep their values."""
    n = len(operands)
    result = [np.array(o, copy=True) for o in outputs]
    for s in range(n):
        for j in range(n):
            k = send_sizes[s][j]
            assert recv_sizes[j][s] == k, f"model: rank {j} expects {recv_sizes[j][s]} rows from {s}, not {k}"
            if k:
                a, b = input_offsets[s][j], output_offsets[s][j]
                assert 0 <= a and a + k <= len(operands[s]) and 0 <= b and b + k <= len(result[j]), "model: bounds"
                result[j][b : b + k] = operands[s][a : a + k]
    return result


def place(rng, lengths, capacity=None):
    """Offsets of ranges of `lengths` rows that do not overlap, in a random order with random gaps (the first may
    start at row 0, the last end at the last row); ranges of no rows anywhere in [0, capacity], its ends included.
    Returns (offsets, capacity). capacity None: the ranges' end plus a random tail (sometimes none)."""
    lengths = [int(k) for k in lengths]
    total = sum(lengths)
    order = [int(i) for i in rng.permutation(len(lengths)) if lengths[i] > 0]
    if capacity is None:
        gaps = [int(rng.choice([0, 0, 1, 2, 7])) for _ in range(len(order) + 1)]
        capacity = total + sum(gaps)
    else:
        free = capacity - total
        assert free >= 0, "place: the ranges exceed the capacity"
        cuts = sorted(int(c) for c in rng.integers(0, free + 1, size=len(order)))
        bounds = [0, *cuts, free]
        gaps = [bounds[i + 1] - bounds[i] for i in range(len(order) + 1)]
    offsets = [0] * len(lengths)
    at = 0
    for i, gap in zip(order, gaps):
        at += gap
        offsets[i] = at
        at += lengths[i]
    for i, k in enumerate(lengths):
        if k == 0:
            offsets[i] = int(rng.choice([0, capacity, int(rng.integers(0, capacity + 1))]))
    return offsets, capacity


class Call:
    """One ragged_all_to_all of every rank: sizes[s][j] rows of row_bytes from rank s to rank j, each rank's operand
    and output rows, where the rows lie in them, and so the four tables of every rank."""

    def __init__(self, rng, sizes, row_bytes, index_bytes=4, operand_rows=None, output_rows=None):
        n = len(sizes)
        self.n, self.row_bytes, self.index_bytes = n, int(row_bytes), int(index_bytes)
        self.sizes = [[int(k) for k in row] for row in sizes]
        self.input_offsets, self.operand_rows = [], []
        for s in range(n):
            offs, rows = place(rng, self.sizes[s], None if operand_rows is None else operand_rows[s])
            self.input_offsets.append(offs)
            self.operand_rows.append(rows)
        self.output_offsets = [[0] * n for _ in range(n)]  # [s][j]: where s's rows land in j's output
        self.output_rows = []
        for j in range(n):
            cap = None if output_rows is None else output_rows[j]
            offs, rows = place(rng, [self.sizes[s][j] for s in range(n)], cap)
            for s in range(n):
                self.output_offsets[s][j] = offs[s]
            self.output_rows.append(rows)

    @classmethod
    def explicit(cls, sizes, input_offsets, operand_rows, output_offsets, output_rows, row_bytes, index_bytes=4):
        """A call of the layout given (output_offsets[s][j]: where s's rows land in j's output)."""
        call = cls.__new__(cls)
        call.n, call.row_bytes, call.index_bytes = len(sizes), row_bytes, index_bytes
        call.sizes, call.input_offsets, call.operand_rows = sizes, input_offsets, operand_rows
        call.output_offsets, call.output_rows = output_offsets, output_rows
        return call

    def tables(self, r):
        """Rank r's (input_offsets, send_sizes, output_offsets, recv_sizes)."""
        return (list(self.input_offsets[r]), list(self.sizes[r]), list(self.output_offsets[r]),
                [self.sizes[s][r] for s in range(self.n)])

    def relayout(self, rng):
        """A call of fewer rows (each pair at most its rows here) in the same operand and output rows."""
        sizes = [[int(rng.integers(0, k + 1)) for k in row] for row in self.sizes]
        return Call(rng, sizes, self.row_bytes, self.index_bytes, self.operand_rows, self.output_rows)


def random_sizes(rng, n, row_bytes, pair_bytes=PAIR_BYTES, zeros=0.25):
    """sizes[s][j]: zeros, single rows, a few rows and up to pair_bytes of rows."""
    most = max(1, pair_bytes // row_bytes)
    sizes = [[0] * n for _ in range(n)]
    for s in range(n):
        for j in range(n):
            u = rng.random()
            if u < zeros:
                continue
            if u < zeros + 0.1:
                sizes[s][j] = 1
            elif u < zeros + 0.3:
                sizes[s][j] = int(rng.integers(1, min(most, 5) + 1))
            else:
                sizes[s][j] = int(rng.integers(1, most + 1))
    return sizes


def random_bytes(rng, n):
    """Random bytes, none zero."""
    return rng.integers(1, 256, size=n, dtype=np.uint8)


class Plan:
    """A sequence of calls (ragged_all_to_all of every rank, or a point-to-point group) laid out one after another in
    every rank's buffers, at any byte alignment, and what every output byte must be after them."""

    def __init__(self, n, rng):
        self.n, self.rng = n, rng
        self.in_end, self.out_end = [0] * n, [0] * n
        self.steps = []

    def _place(self, ends, r, nbytes):
        off = round_up(ends[r], 16) + int(self.rng.integers(0, 16))
        ends[r] = off + nbytes + GUARD
        return off

    def add_ragged(self, call):
        assert call.n == self.n
        operand_at = [self._place(self.in_end, r, call.operand_rows[r] * call.row_bytes) for r in range(self.n)]
        output_at = [self._place(self.out_end, r, call.output_rows[r] * call.row_bytes) for r in range(self.n)]
        self.steps.append(["ragged", call, operand_at, output_at])
        return len(self.steps) - 1

    def add_p2p(self, transfers):
        """transfers: (src, dst, nbytes) in order; the k-th of a pair matches the k-th, as launch_p2p_group pairs."""
        messages = [[] for _ in range(self.n)]
        pairs = []
        for src, dst, nbytes in transfers:
            soff = self._place(self.in_end, src, nbytes)
            roff = self._place(self.out_end, dst, nbytes)
            messages[src].append((INPUT, soff, nbytes, dst, 0))
            messages[dst].append((OUTPUT, roff, nbytes, src, 1))
            pairs.append((src, soff, dst, roff, nbytes))
        self.steps.append(["p2p", messages, pairs])

    def spec(self, step, r):
        """Rank r's arguments of HarnessRank.ragged_all_to_all for a ragged step."""
        _, call, operand_at, output_at = step
        return (operand_at[r], call.operand_rows[r], output_at[r], call.output_rows[r], call.row_bytes,
                *call.tables(r), call.index_bytes)

    def buffers_fit(self):
        assert max(self.in_end + self.out_end) <= BUFFER, "plan larger than the ranks' buffers"

    def prepare(self, vr):
        """Fresh random inputs, outputs pre-filled with random bytes."""
        self.buffers_fit()
        self.inputs = [random_bytes(self.rng, self.in_end[r]) for r in range(self.n)]
        self.prefill = [random_bytes(self.rng, self.out_end[r]) for r in range(self.n)]
        for r in range(self.n):
            if self.in_end[r]:
                vr.upload(r, INPUT, self.inputs[r])
            if self.out_end[r]:
                vr.upload(r, OUTPUT, self.prefill[r])

    def launch(self, vr):
        for step in self.steps:
            for r in (int(x) for x in self.rng.permutation(self.n)):
                if step[0] == "ragged":
                    vr.ranks[r].ragged_all_to_all(*self.spec(step, r))
                elif step[1][r]:
                    vr.ranks[r].p2p_group(step[1][r])

    def expected(self):
        exp = [p.copy() for p in self.prefill]
        for step in self.steps:
            if step[0] == "p2p":
                for src, soff, dst, roff, nbytes in step[2]:
                    exp[dst][roff : roff + nbytes] = self.inputs[src][soff : soff + nbytes]
                continue
            _, call, operand_at, output_at = step
            rb = call.row_bytes
            operands = [self.inputs[r][operand_at[r] : operand_at[r] + call.operand_rows[r] * rb].reshape(-1, rb)
                        for r in range(self.n)]
            outputs = [exp[r][output_at[r] : output_at[r] + call.output_rows[r] * rb].reshape(-1, rb)
                       for r in range(self.n)]
            tables = [call.tables(r) for r in range(self.n)]
            result = ragged_all_to_all_model(operands, outputs, *([t[i] for t in tables] for i in range(4)))
            for r in range(self.n):
                exp[r][output_at[r] : output_at[r] + call.output_rows[r] * rb] = result[r].reshape(-1)
        return exp

    def check(self, vr, what=""):
        expected = self.expected()
        for r in range(self.n):
            got = vr.download(r, OUTPUT, self.out_end[r])
            bad = np.flatnonzero(got != expected[r])
            if bad.size:
                raise AssertionError(f"{what}: rank {r}: {bad.size} output bytes wrong, first at {bad[0]} "
                                     f"(got {got[bad[0]]}, expected {expected[r][bad[0]]}){self.where(r, bad[0])}")
            if self.in_end[r]:
                got_in = vr.download(r, INPUT, self.in_end[r])
                assert (got_in == self.inputs[r]).all(), f"{what}: rank {r}: input changed"

    def where(self, r, byte):
        """Which step's output region of rank r holds `byte`, for the message."""
        for i, step in enumerate(self.steps):
            if step[0] == "ragged":
                _, call, _, output_at = step
                lo = output_at[r]
                hi = lo + call.output_rows[r] * call.row_bytes
                if lo <= byte < hi + GUARD:
                    row = (byte - lo) // call.row_bytes
                    return (f" in ragged step {i} (row_bytes {call.row_bytes}, int{8 * call.index_bytes}), "
                            f"{'row ' + str(row) if byte < hi else 'after its output'}")
        return ""

    def run(self, vr, what=""):
        self.prepare(vr)
        self.launch(vr)
        vr.synchronize()
        self.check(vr, what)


def run_calls(vr, rng, calls, what):
    plan = Plan(vr.nranks, rng)
    for call in calls:
        plan.add_ragged(call)
    plan.run(vr, what)
    return plan


# -- layouts ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row_bytes", ROW_BYTES)
@pytest.mark.parametrize("nranks", NRANKS)
def test_random_layouts(ranks, rng, nranks, row_bytes):
    """Two calls queued back to back (int32 tables, then int64), random sizes and layouts."""
    calls = [Call(rng, random_sizes(rng, nranks, row_bytes), row_bytes, index_bytes=w) for w in (4, 8)]
    run_calls(ranks(nranks), rng, calls, f"n={nranks} row_bytes={row_bytes}")


@pytest.mark.parametrize("row_bytes", [3, 16, 4096])
def test_sixteen_ranks(ranks, rng, row_bytes):
    n = 16
    calls = [Call(rng, random_sizes(rng, n, row_bytes, pair_bytes=40_000), row_bytes, index_bytes=w) for w in (8, 4)]
    run_calls(ranks(n), rng, calls, f"n=16 row_bytes={row_bytes}")


@pytest.mark.parametrize("nranks", NRANKS)
def test_a_rank_sending_nothing(ranks, rng, nranks):
    """The last rank sends no row (its operand may have none either) and the first receives none; both still take
    part in every call."""
    calls = []
    for row_bytes, w in ((6, 4), (1, 8), (4096, 4)):
        sizes = random_sizes(rng, nranks, row_bytes, zeros=0.0)
        sizes[nranks - 1] = [0] * nranks
        for s in range(nranks):
            sizes[s][0] = 0
        calls.append(Call(rng, sizes, row_bytes, index_bytes=w))
    run_calls(ranks(nranks), rng, calls, f"silent rank n={nranks}")


@pytest.mark.parametrize("nranks", NRANKS)
def test_everything_to_one_rank(ranks, rng, nranks):
    """Every rank's rows go to one rank (itself included); the others receive nothing."""
    calls = []
    for row_bytes, w in ((16, 8), (3, 4)):
        target = int(rng.integers(0, nranks))
        sizes = [[0] * nranks for _ in range(nranks)]
        for s in range(nranks):
            sizes[s][target] = int(rng.integers(1, 200_000 // row_bytes))
        calls.append(Call(rng, sizes, row_bytes, index_bytes=w))
    run_calls(ranks(nranks), rng, calls, f"to one rank n={nranks}")


@pytest.mark.parametrize("nranks", [2, 3, 8])
def test_no_rows_at_all(ranks, rng, nranks):
    """Every size zero (only the headers move), twice in a row: every output byte keeps its value."""
    calls = [Call(rng, [[0] * nranks for _ in range(nranks)], row_bytes, index_bytes=w)
             for row_bytes, w in ((1, 4), (4096, 8))]
    run_calls(ranks(nranks), rng, calls, f"no rows n={nranks}")


def test_ranges_at_the_ends(ranks, rng):
    """Ranges that start at row 0 and end at the last row of the operand and the output, empty ranges at row 0 and at
    the end (offset = rows), and a rank with no operand and no output rows at all."""
    at_the_ends = Call.explicit(
        sizes=[[2, 0, 3], [0, 4, 1], [5, 0, 0]],
        input_offsets=[[3, 5, 0], [5, 1, 0], [0, 0, 5]], operand_rows=[5, 5, 5],
        output_offsets=[[5, 6, 1], [7, 2, 0], [0, 0, 4]], output_rows=[7, 6, 4], row_bytes=3)
    empty_rank = Call.explicit(
        sizes=[[1, 1, 0], [1, 1, 0], [0, 0, 0]],
        input_offsets=[[0, 1, 2], [1, 0, 2], [0, 0, 0]], operand_rows=[2, 2, 0],
        output_offsets=[[1, 0, 0], [0, 1, 0], [2, 2, 0]], output_rows=[2, 2, 0], row_bytes=4096, index_bytes=8)
    run_calls(ranks(3), rng, [at_the_ends, empty_rank, at_the_ends], "at the ends")


def large_bytes(cuda, nranks, scratch_bytes):
    """A per-peer message of more bytes than the slots of all its lanes hold, three times over: several lanes, and
    each lane more chunks than slots (the credits cycle)."""
    lay = cuda.p2p_layout(nranks, -1, scratch_bytes)
    return 3 * lay["slots"] * lay["chunk"] * lay["lanes"], lay


@pytest.mark.parametrize("row_bytes", [6, 4096])
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_large_messages_cycle_credits(ranks, cuda, rng, nranks, row_bytes):
    vr = ranks(nranks)
    target, lay = large_bytes(cuda, nranks, vr.scratch_bytes)
    rows = -(-target // row_bytes)
    parts = cuda.p2p_lane_parts(rows * row_bytes)
    assert len(parts) >= 2 and max(hi - lo for lo, hi in parts) > lay["slots"] * lay["chunk"], (parts, lay)
    sizes = [[rows + int(rng.integers(0, 5)) for _ in range(nranks)] for _ in range(nranks)]
    sizes[0][nranks - 1] = 0  # one pair with none beside them
    run_calls(vr, rng, [Call(rng, sizes, row_bytes, index_bytes=8)], f"large n={nranks} row_bytes={row_bytes}")


# -- sequences --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_many_calls_in_a_row(ranks, rng, nranks):
    """32 calls of changing row sizes, widths and patterns queued on every rank before any sync: each lane's counters
    carry over the calls, and a rank may run calls ahead of its peers."""
    calls = []
    for i in range(32):
        row_bytes = ROW_BYTES[i % len(ROW_BYTES)]
        sizes = random_sizes(rng, nranks, row_bytes, pair_bytes=12_000, zeros=0.4 if i % 3 else 0.0)
        calls.append(Call(rng, sizes, row_bytes, index_bytes=4 if i % 2 else 8))
    run_calls(ranks(nranks), rng, calls, f"32 calls n={nranks}")


def random_transfers(rng, n, kind):
    big = int(rng.choice([0, 1, 17, 4099, 65_541, 300_007]))
    if kind == 0:
        return [(r, (r + 1) % n, int(rng.choice([1, 333, big]))) for r in range(n)]
    if kind == 1:
        a, b = (int(x) for x in rng.choice(n, 2, replace=False))
        return [(a, b, big), (b, a, int(rng.integers(0, 5000))), (a, b, 7)]
    return [(a, b, int(rng.integers(0, 20_000))) for a in range(n) for b in range(n) if rng.random() < 0.6]


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_interleaved_with_p2p_groups(ranks, rng, nranks):
    """Ragged calls and point-to-point groups (rings, a pair both ways, all-to-all-v, messages past the slots) on the
    same ranks and lanes, 24 calls queued before any sync, then again after it."""
    vr = ranks(nranks)
    plan = Plan(nranks, rng)
    for i in range(24):
        if i % 2 == 0:
            row_bytes = int(rng.choice(ROW_BYTES))
            plan.add_ragged(Call(rng, random_sizes(rng, nranks, row_bytes, pair_bytes=30_000), row_bytes,
                                 index_bytes=int(rng.choice([4, 8]))))
        else:
            plan.add_p2p(random_transfers(rng, nranks, (i // 2) % 3))
    plan.run(vr, f"interleaved n={nranks}")
    plan.run(vr, f"interleaved again n={nranks}")


def test_graph_capture_and_replays(ranks, rng):
    """Each rank captures three calls into a CUDA graph (tables written before the capture); three replays with fresh
    inputs and outputs; then the tables are rewritten on the device (new sizes and offsets, the same buffers) and two
    more replays move what the new tables say: the graph reads every size on the device. Then the calls run eagerly,
    on the counters the replays advanced."""
    n = 4
    vr = ranks(n)
    plan = Plan(n, rng)
    for row_bytes, w in ((3, 4), (16, 8), (4096, 4)):
        plan.add_ragged(Call(rng, random_sizes(rng, n, row_bytes, zeros=0.15), row_bytes, index_bytes=w))
    for r in range(n):
        vr.ranks[r].capture_ragged_all_to_all([plan.spec(step, r) for step in plan.steps])
    for replay in range(5):
        if replay == 3:
            for step in plan.steps:
                step[1] = step[1].relayout(rng)
            for r in range(n):
                vr.ranks[r].set_captured_ragged_tables([step[1].tables(r) for step in plan.steps])
        plan.prepare(vr)
        for r in rng.permutation(n):
            vr.ranks[int(r)].replay(1)
        vr.synchronize()
        plan.check(vr, f"replay {replay}")
    plan.run(vr, "eager after the replays")


def test_one_rank(cuda, rng):
    """A world of one rank: the local copy (no point-to-point resources needed), calls in a row, then captured."""
    with VirtualRanks(1, buffer_bytes=4 << 20, channels_per_peer=1, p2p_bytes=0) as vr:
        plan = Plan(1, rng)
        for row_bytes, w in ((1, 4), (3, 8), (4096, 4), (6, 8)):
            plan.add_ragged(Call(rng, [[int(rng.integers(0, 300_000 // row_bytes))]], row_bytes, index_bytes=w))
        plan.add_ragged(Call(rng, [[0]], 16, index_bytes=4))
        plan.run(vr, "one rank")
        vr.ranks[0].capture_ragged_all_to_all([plan.spec(step, 0) for step in plan.steps])
        for replay in range(2):
            plan.prepare(vr)
            vr.ranks[0].replay(1)
            vr.synchronize()
            plan.check(vr, f"one rank replay {replay}")


# -- refusals ---------------------------------------------------------------------------------------------------------


def test_refusals(ranks, rng):
    """What the launcher and the harness refuse enqueues no call: a full call afterwards is right."""
    n = 3
    vr = ranks(n)
    rk = vr.ranks[0]
    ok = ([0, 1, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1])
    with pytest.raises(ValueError, match="refused"):
        rk.ragged_all_to_all(0, 3, 0, 3, 4, *ok, index_bytes=2)
    with pytest.raises(ValueError, match="refused"):
        rk.ragged_all_to_all(0, 3, 0, 3, 0, *ok)  # row_bytes 0
    with pytest.raises(ValueError, match="entries"):
        rk.ragged_all_to_all(0, 3, 0, 3, 4, [0, 1], *ok[1:])
    with pytest.raises(ValueError, match="int32"):
        rk.ragged_all_to_all(0, 3, 0, 3, 4, [0, 1, 1 << 40], *ok[1:], index_bytes=4)
    with pytest.raises(IndexError):
        rk.ragged_all_to_all(BUFFER - 8, 3, 0, 3, 4, *ok)  # the operand past the input buffer
    with pytest.raises(IndexError):
        rk.ragged_all_to_all(0, 3, 0, BUFFER, 4, *ok)  # the output past the output buffer
    vr.ranks[1].capture_p2p_groups([[(INPUT, 0, 0, 2, 0)]])  # a zero-byte message: nothing moves
    with pytest.raises(RuntimeError, match="no ragged_all_to_all calls captured"):
        vr.ranks[1].set_captured_ragged_tables([ok])
    vr.ranks[1].replay(1)
    vr.synchronize()
    run_calls(vr, rng, [Call(rng, random_sizes(rng, n, 6), 6)], "after the refusals")
    with VirtualRanks(2, buffer_bytes=1 << 16, channels_per_peer=1, p2p_bytes=0) as bare:
        with pytest.raises(ValueError, match="no p2p resources"):
            bare.ranks[0].ragged_all_to_all(0, 2, 0, 2, 4, [0, 1], [1, 1], [0, 1], [1, 1])


# -- failures only the device sees (subprocesses: a failing kernel must not take this process's context) ---------------

FAILURE_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks, VirtualRanksError
    from tests.harness import synchronize_or_exit
    case, mode, exchange = sys.argv[1], sys.argv[2], sys.argv[3]
    ROW, GUARD, FILL = 6, 64, 0x5A
    n = 3 if case in ("sizes", "lanes") else 2
    sizes = [[4, 5, 6], [7, 8, 9], [1, 2, 3]][:n]
    sizes = [row[:n] for row in sizes]  # sizes[s][j]: rows from s to j
    if case == "lanes":
        sizes[0][1] = (3 << 20) // ROW  # several lanes from rank 0 to rank 1
    # A compact layout: rank s's rows for j after its rows for 0..j-1; in rank j's output, s's rows after 0..s-1's.
    in_off = [[sum(sizes[s][:j]) for j in range(n)] for s in range(n)]
    out_off = [[sum(sizes[q][j] for q in range(s)) for j in range(n)] for s in range(n)]  # [s][j]
    operand_rows = [sum(sizes[s]) for s in range(n)]
    output_rows = [sum(sizes[s][j] for s in range(n)) for j in range(n)]
    recv = [[sizes[s][j] for s in range(n)] for j in range(n)]
    index_bytes = 4
    if case == "overrun":  # rank 0's rows would end one row past rank 1's output
        out_off[0][1] = output_rows[1] - sizes[0][1] + 1
        index_bytes = 8
    elif case == "negative_output":
        out_off[0][1] = -1
    elif case == "negative_input":
        in_off[1][0] = -1
    elif case == "sizes":  # rank 1 expects two rows more than rank 0 sends
        recv[1][0] = sizes[0][1] + 2
    elif case == "lanes":  # rank 1 expects one row of rank 0's many
        recv[1][0] = 1
    vr = VirtualRanks(n, timeout_s=10.0, stop_on_failure=mode == "stop", channels_per_peer=1, buffer_bytes=8 << 20,
                      direct_exchange=exchange == "direct")
    rng = np.random.default_rng(11)
    for r in range(n):
        vr.upload(r, INPUT, rng.integers(1, 256, size=operand_rows[r] * ROW, dtype=np.uint8))
        vr.fill(r, OUTPUT, FILL)
    t0 = time.monotonic()
    for r in range(n):
        vr.ranks[r].ragged_all_to_all(0, operand_rows[r], 0, output_rows[r], ROW, in_off[r], sizes[r], out_off[r],
                                      recv[r], index_bytes)
    synchronize_or_exit(lambda: vr.synchronize(), VirtualRanksError)
    print("ELAPSED", time.monotonic() - t0)
    for r in range(n):
        print(f"RECORD {r}:", vr.ranks[r].error_message())
        out = vr.download(r, OUTPUT, output_rows[r] * ROW + GUARD)
        body, guard = out[: output_rows[r] * ROW], out[output_rows[r] * ROW :]
        print(f"POISONED {r}:", bool((body == 0xFF).all()))
        print(f"GUARD {r}:", bool((guard == FILL).all()))
    sys.stdout.flush()
    """
)


def run_failure(case, exchange, mode="stop"):
    proc = subprocess.run([sys.executable, "-c", FAILURE_SCRIPT, case, mode, exchange], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def record(out, r):
    return out.split(f"RECORD {r}:", 1)[1].split("\n", 1)[0]


def check_stopped(out, failing):
    """The kernels ended (no CUDA error) well before the 10 s timeout, the failing rank's output is poisoned, and no
    rank wrote past its output."""
    assert "ERROR:" not in out and "ELAPSED" in out, out
    assert float(out.split("ELAPSED", 1)[1].split()[0]) < 5, out
    assert f"POISONED {failing}: True" in out, out
    assert "GUARD 0: True" in out and "GUARD 1: True" in out and "GUARD 2: False" not in out, out


@pytest.mark.parametrize("exchange", EXCHANGES)
@pytest.mark.parametrize("case,first_row", [("overrun", "9"), ("negative_output", "-1")])
def test_rows_past_a_peers_output(cuda, case, first_row, exchange):
    """Rank 0's output_offsets put its 5 rows for rank 1 from row 9 of rank 1's 13 (one past the end) or from row -1:
    rank 1, which reads the header (direct: rank 0 writes nothing there and reports its rows), moves nothing out of
    bounds, completes the protocol and records kRaggedBounds naming peer 0; its output is poisoned."""
    out = run_failure(case, exchange)
    check_stopped(out, failing=1)
    rec = record(out, 1)
    assert f"ragged_all_to_all on rank 1: the 5 rows from row {first_row} exchanged with peer 0" in rec, out
    assert "not inside the operand" in rec and "outputs are not valid" in rec, out


@pytest.mark.parametrize("exchange", EXCHANGES)
def test_negative_input_offset(cuda, exchange):
    """Rank 1's input_offsets[0] is -1: rank 1 sends none of its 7 rows (the header says so) and records kRaggedBounds
    naming peer 0; rank 0, told the rows are out of bounds, records its own naming peer 1. (Where one rank's failure
    reached the other while it still waited, that one's record says it stopped because of the first.)"""
    out = run_failure("negative_input", exchange)
    check_stopped(out, failing=1)
    mine = "ragged_all_to_all on rank 1: the 7 rows from row -1 exchanged with peer 0"
    theirs = "ragged_all_to_all on rank 0: the 7 rows from row -9223372036854775808 exchanged with peer 1"
    rec0, rec1 = record(out, 0), record(out, 1)
    assert mine in rec1 or "because rank 0 failed" in rec1, out
    assert theirs in rec0 or "because rank 1 failed" in rec0, out
    assert mine in rec1 or theirs in rec0, out


@pytest.mark.parametrize("exchange", EXCHANGES)
@pytest.mark.parametrize("case,sent,expected", [("sizes", 5, 7), ("lanes", (3 << 20) // 6, 1)])
def test_sizes_that_differ_from_recv_sizes(cuda, case, sent, expected, exchange):
    """Rank 1's recv_sizes[0] differs from the rows rank 0 sends (by two rows; or one row of a message over several
    lanes): rank 1 fails the communicator as soon as it reads the header (direct: rank 0's report, once its lanes
    wrote the rows, all inside rank 1's output), with kRaggedSizes naming peer 0, and every rank's waits give up
    instead of timing out."""
    out = run_failure(case, exchange)
    check_stopped(out, failing=1)
    rec = record(out, 1)
    assert f"ragged_all_to_all on rank 1: peer 0 sent {sent} rows but recv_sizes[0] is {expected}" in rec, out


@pytest.mark.parametrize("exchange", EXCHANGES)
def test_a_failure_traps_by_default(cuda, exchange):
    """Without stop on failure the failing kernel traps: synchronizing fails with rank 1's record."""
    out = run_failure("overrun", exchange, "trap")
    assert "ERROR:" in out, out
    assert "ragged_all_to_all on rank 1: the 5 rows from row 9 exchanged with peer 0" in out, out


# -- a peer that never calls ------------------------------------------------------------------------------------------

TIMEOUT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from tests.harness import native_module
    from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks
    sends, direct = sys.argv[1] == "send", sys.argv[2] == "direct"
    cuda = native_module()
    vr = VirtualRanks(2, timeout_s=1.0, stop_on_failure=True, channels_per_peer=1, buffer_bytes=8 << 20,
                      direct_exchange=direct)
    lay = cuda.p2p_layout(2, -1, vr.scratch_bytes)
    rows = 2 * lay["lanes"] * lay["slots"] * lay["chunk"] if sends else 0  # bytes: every lane needs credits back
    assert rows <= 8 << 20
    t0 = time.monotonic()
    # rank 1 never calls
    vr.ranks[0].ragged_all_to_all(0, rows, 0, 0, 1, [0, 0], [0, rows], [0, 0], [0, 0], 4)
    vr.synchronize([0])  # the kernel stopped: no CUDA error
    print("ELAPSED", time.monotonic() - t0)
    print("STOPPED:", vr.ranks[0].error_message())
    sys.stdout.flush()
    """
)


@pytest.mark.parametrize("exchange", EXCHANGES)
@pytest.mark.parametrize("case", ["receive", "send"])
def test_a_peer_that_never_calls_times_out(cuda, case, exchange):
    """Rank 0 calls (sending no row, or more than the slots hold) and rank 1 never does: after the 1 s timeout rank
    0's kernel records rank, peer and what it waited for (ring: its first receive waits for peer 1's header chunk;
    direct: its sends wait for peer 1's post, its receive for peer 1's lanes) and, in stop mode, ends."""
    proc = subprocess.run([sys.executable, "-c", TIMEOUT_SCRIPT, case, exchange], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "STOPPED:" in out and "rank 0 timed out" in out and "on peer 1" in out, out
    if exchange == "direct":
        assert "ragged all-to-all send" in out or "ragged all-to-all receive" in out, out
    elif case == "receive":
        assert "point-to-point receive" in out and "waited for 1" in out, out
    else:
        assert "point-to-point receive" in out or "point-to-point send" in out, out
    elapsed = float(out.split("ELAPSED", 1)[1].split()[0])
    assert 0.9 < elapsed < 30, elapsed


LATE_SENDER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks
    ROWS = 3 << 20  # rows of one byte: several lanes, several pieces each
    vr = VirtualRanks(2, timeout_s=1.0, stop_on_failure=True, channels_per_peer=1, buffer_bytes=8 << 20)
    rng = np.random.default_rng(5)
    vr.upload(0, INPUT, rng.integers(1, 256, size=ROWS, dtype=np.uint8))
    vr.fill(1, OUTPUT, 0x5A)
    # Rank 1 expects ROWS rows from rank 0, which has not called: rank 1 times out and closes its output.
    vr.ranks[1].ragged_all_to_all(0, 0, 0, ROWS, 1, [0, 0], [0, 0], [0, 0], [ROWS, 0], 4)
    vr.synchronize([1])
    print("RECORD 1:", vr.ranks[1].error_message())
    before = vr.download(1, OUTPUT, ROWS + 64)
    # Rank 0 calls late, its rows for rank 1's output: the launch is closed, so it writes none and stops.
    t0 = time.monotonic()
    vr.ranks[0].ragged_all_to_all(0, ROWS, 0, 0, 1, [0, 0], [0, ROWS], [0, 0], [0, 0], 4)
    vr.synchronize([0])
    print("ELAPSED", time.monotonic() - t0)
    print("RECORD 0:", vr.ranks[0].error_message())
    print("UNCHANGED:", bool((vr.download(1, OUTPUT, ROWS + 64) == before).all()))
    sys.stdout.flush()
    """
)


def test_a_late_sender_writes_nothing_into_a_closed_output(cuda):
    """Direct exchange: rank 1 gives up on rank 0's rows (a 1 s timeout) and ends its kernel; rank 0 calls afterwards
    and finds the launch closed: it writes none of its 3 MiB into rank 1's output (byte for byte as rank 1 left it),
    and stops at once, its record naming rank 1 (not a timeout of its own)."""
    proc = subprocess.run([sys.executable, "-c", LATE_SENDER_SCRIPT], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rank 1 timed out" in record(out, 1) and "on peer 0" in record(out, 1), out
    assert "UNCHANGED: True" in out, out
    assert "because rank 1 failed" in record(out, 0) and "timed out" not in record(out, 0), out
    assert float(out.split("ELAPSED", 1)[1].split()[0]) < 0.9, out
