"""launch_p2p_group (kernels/collectives/p2p_group.cu) on virtual ranks of one GPU: NCCL's point-to-point groups.

Every rank launches its own messages on its own stream, all launches issued before any rank is synchronized; a
rank with no message launches nothing. Groups: several messages to one peer of sizes 0 .. 8 MiB + 3 (more than
the slots hold, so credits cycle), both directions between a pair, rings, all-to-all-v with random sizes, a rank
left out, self messages, unaligned buffers, 64 groups back to back without a sync (the lane counters carry over
launches), CUDA-graph capture replayed 3 times with fresh data, groups past the small-launch kernel and at
kP2PMaxMessages, the launcher's refusals, and a peer that never calls (a timeout record, the kernel stops). Data is
random bytes; outputs are poisoned before each run and every byte around the received messages checked, inputs
checked unchanged.

Run on one GPU: ``python3 -m pytest -q tests/gpu/test_p2p_group.py``.
"""

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from .collective_helpers import POISON
from .gpu_helpers import INPUT, OUTPUT, VirtualRanks, child_env, random_bytes, round_up

pytestmark = pytest.mark.gpu

SEND, RECV = 0, 1
GUARD = 64  # poisoned bytes after every received message
SIZES = [0, 1, 3, 1023, (64 << 10) + 5, (8 << 20) + 3]
NRANKS = [2, 3, 4, 8]


def interleave(rng, messages):
    """A random order of one rank's messages that keeps the order within each (peer, direction): what matching
    depends on."""
    order = list(rng.permutation(len(messages)))
    shuffled = [messages[i] for i in order]
    streams = {}
    for pos, m in enumerate(shuffled):
        streams.setdefault((m[1], m[2]), []).append(pos)
    out = list(shuffled)
    for key, positions in streams.items():
        in_order = [m for m in messages if (m[1], m[2]) == key]
        for pos, m in zip(positions, in_order):
            out[pos] = m
    return out


class Plan:
    """The messages of a sequence of groups laid out in every rank's buffers, and what every receive must get.

    A group is a list of transfers (src, dst, nbytes) in order: src sends to dst, dst receives from src, the k-th
    of each pair (src, dst) matching as launch_p2p_group pairs them. Each rank's messages are shuffled, keeping
    their order per (peer, direction)."""

    def __init__(self, n, rng, unaligned=False):
        self.n, self.rng, self.unaligned = n, rng, unaligned
        self.in_end, self.out_end = [0] * n, [0] * n
        self.groups = []  # per group: per rank, the specs of HarnessRank.p2p_group
        self.sends, self.recvs = {}, {}  # (src, dst) -> [(offset, nbytes)] in matching order

    def _place(self, ends, rank, nbytes):
        off = round_up(ends[rank], 16) + (int(self.rng.integers(1, 16)) if self.unaligned else 0)
        ends[rank] = off + nbytes + GUARD
        return off

    def add_group(self, transfers):
        per_rank = [[] for _ in range(self.n)]
        for src, dst, nbytes in transfers:
            per_rank[src].append((SEND, dst, 0, nbytes))
            per_rank[dst].append((RECV, src, 1, nbytes))
        group = []
        for r in range(self.n):
            specs = []
            for kind, peer, receive, nbytes in interleave(self.rng, per_rank[r]):
                if kind == SEND:
                    off = self._place(self.in_end, r, nbytes)
                    self.sends.setdefault((r, peer), []).append((off, nbytes))
                    specs.append((INPUT, off, nbytes, peer, 0))
                else:
                    off = self._place(self.out_end, r, nbytes)
                    self.recvs.setdefault((peer, r), []).append((off, nbytes))
                    specs.append((OUTPUT, off, nbytes, peer, 1))
            group.append(specs)
        self.groups.append(group)

    def buffer_bytes(self):
        return round_up(max(self.in_end + self.out_end + [1 << 16]), 1 << 16)

    def ranks(self, **kw):
        return VirtualRanks(self.n, buffer_bytes=self.buffer_bytes(), channels_per_peer=1, **kw)

    def prepare(self, vr):
        """Fresh random inputs, poisoned outputs."""
        self.inputs = [random_bytes(self.rng, self.in_end[r]) for r in range(self.n)]
        for r in range(self.n):
            if self.in_end[r]:
                vr.upload(r, INPUT, self.inputs[r])
            vr.fill(r, OUTPUT, POISON)

    def launch(self, vr):
        for group in self.groups:
            for r in self.rng.permutation(self.n):
                if group[r]:
                    vr.ranks[r].p2p_group(group[r])

    def check(self, vr, what=""):
        expected = [np.full(self.out_end[r], POISON, dtype=np.uint8) for r in range(self.n)]
        for key, sends in self.sends.items():
            recvs = self.recvs.get(key, [])
            assert [b for _, b in sends] == [b for _, b in recvs], f"plan: unmatched sizes {key}"
            src, dst = key
            for (soff, nbytes), (roff, _) in zip(sends, recvs):
                expected[dst][roff : roff + nbytes] = self.inputs[src][soff : soff + nbytes]
        for r in range(self.n):
            got = vr.download(r, OUTPUT, self.out_end[r] + GUARD)
            assert (got[self.out_end[r] :] == POISON).all(), f"{what}: rank {r}: bytes past the last output written"
            bad = np.flatnonzero(got[: self.out_end[r]] != expected[r])
            if bad.size:
                raise AssertionError(f"{what}: rank {r}: {bad.size} bytes wrong, first at {bad[0]} "
                                     f"(got {got[bad[0]]}, expected {expected[r][bad[0]]})")
            if self.in_end[r]:
                assert (vr.download(r, INPUT, self.in_end[r]) == self.inputs[r]).all(), f"{what}: rank {r}: input changed"

    def run(self, vr, what=""):
        self.prepare(vr)
        self.launch(vr)
        vr.synchronize()
        self.check(vr, what)


def random_size(rng, big=True):
    choices = [0, 1, 3, 17, 1023, 4096, (64 << 10) + 5, 200_003] + ([(1 << 20) + 7] if big else [])
    return int(rng.choice(choices))


# -- patterns ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nranks", NRANKS)
def test_every_size_to_one_peer_and_back(cuda, rng, nranks):
    """Each rank sends every size to the next rank and every size, in reverse order, to the previous one (with two
    ranks: both directions of one pair, twice): several messages to one peer, 8 MiB + 3 bytes streaming through
    slots many times smaller."""
    plan = Plan(nranks, rng)
    transfers = []
    for r in range(nranks):
        transfers += [(r, (r + 1) % nranks, b) for b in SIZES]
        transfers += [(r, (r - 1) % nranks, b) for b in reversed(SIZES)]
    plan.add_group(transfers)
    with plan.ranks() as vr:
        plan.run(vr, f"sizes n={nranks}")


@pytest.mark.parametrize("nranks", NRANKS)
def test_ring(cuda, rng, nranks):
    plan = Plan(nranks, rng)
    plan.add_group([(r, (r + 1) % nranks, random_size(rng)) for r in range(nranks)])
    plan.add_group([(r, (r + 1) % nranks, (8 << 20) + 3) for r in range(nranks)])
    with plan.ranks() as vr:
        plan.run(vr, f"ring n={nranks}")


@pytest.mark.parametrize("nranks", NRANKS)
def test_all_to_all_v(cuda, rng, nranks):
    """Every rank to every rank, itself included, random sizes; the transfers in random order."""
    plan = Plan(nranks, rng)
    for _ in range(2):
        transfers = [(a, b, random_size(rng)) for a in range(nranks) for b in range(nranks)]
        plan.add_group([transfers[i] for i in rng.permutation(len(transfers))])
    with plan.ranks() as vr:
        plan.run(vr, f"all-to-all-v n={nranks}")


@pytest.mark.parametrize("nranks", [3, 4, 8])
def test_a_rank_without_messages_holds_nobody_up(cuda, rng, nranks):
    """The last rank never launches; the others run a ring and pairwise exchanges among themselves and complete."""
    plan = Plan(nranks, rng)
    m = nranks - 1
    plan.add_group([(r, (r + 1) % m, random_size(rng)) for r in range(m)] + [(0, m - 1, (1 << 20) + 1)])
    with plan.ranks() as vr:
        plan.run(vr, f"rank {m} absent")
        assert all(not g[m] for g in plan.groups)


@pytest.mark.parametrize("nranks", [2, 4])
def test_self_messages(cuda, rng, nranks):
    """A rank sending to itself: alone (no kernel), beside messages to peers, several in one launch, sizes 0 .. 8 MiB."""
    plan = Plan(nranks, rng)
    plan.add_group([(r, r, b) for r in range(nranks) for b in SIZES])
    plan.add_group([(r, r, random_size(rng)) for r in range(nranks)] +
                   [(r, (r + 1) % nranks, random_size(rng)) for r in range(nranks)])
    with plan.ranks() as vr:
        plan.run(vr, f"self n={nranks}")


@pytest.mark.parametrize("nranks", NRANKS)
def test_unaligned_buffers(cuda, rng, nranks):
    """Every buffer 1..15 bytes off a 16-byte boundary (unequal offsets on the two ends)."""
    plan = Plan(nranks, rng, unaligned=True)
    transfers = [(a, b, random_size(rng)) for a in range(nranks) for b in range(nranks)]
    transfers += [(0, nranks - 1, (8 << 20) + 3), (nranks - 1, 0, (64 << 10) + 5)]
    plan.add_group(transfers)
    with plan.ranks() as vr:
        plan.run(vr, f"unaligned n={nranks}")


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_many_groups_back_to_back(cuda, rng, nranks):
    """64 groups of changing patterns queued on every rank before any sync: each lane's counters carry over
    launches, and a rank may run launches ahead of its peers (sends complete into free slots)."""
    plan = Plan(nranks, rng)
    for g in range(64):
        kind = g % 4
        if kind == 0:
            transfers = [(r, (r + 1) % nranks, random_size(rng, big=False)) for r in range(nranks)]
        elif kind == 1:
            a, b = (int(x) for x in rng.choice(nranks, 2, replace=False))
            transfers = [(a, b, random_size(rng)), (b, a, random_size(rng)), (a, b, random_size(rng, big=False))]
        elif kind == 2:
            transfers = [(a, b, random_size(rng, big=False)) for a in range(nranks) for b in range(nranks)
                         if rng.random() < 0.6]
        else:
            transfers = [(0, 0, random_size(rng, big=False)), (nranks - 1, 0, random_size(rng, big=False))]
        plan.add_group(transfers)
    with plan.ranks() as vr:
        plan.run(vr, f"64 groups n={nranks}")


def test_graph_capture_and_replays(cuda, rng):
    """Each rank captures its launches of three groups into a CUDA graph (self copies included); three replays,
    each with fresh inputs and poisoned outputs, all right: nothing per call lives on the host."""
    n = 4
    plan = Plan(n, rng)
    plan.add_group([(r, (r + 1) % n, random_size(rng)) for r in range(n)] + [(1, 1, 4099)])
    plan.add_group([(0, 2, (8 << 20) + 3), (2, 0, 77), (3, 1, 0), (1, 3, (64 << 10) + 5)])
    plan.add_group([(a, b, random_size(rng, big=False)) for a in range(n) for b in range(n)])
    with plan.ranks() as vr:
        for r in range(n):
            groups = [g[r] for g in plan.groups if g[r]]
            if groups:
                vr.ranks[r].capture_p2p_groups(groups)
        for replay in range(3):
            plan.prepare(vr)
            for r in rng.permutation(n):
                vr.ranks[r].replay(1)
            vr.synchronize()
            plan.check(vr, f"replay {replay}")
        plan.run(vr, "eager after the replays")  # the counters the replays advanced, used by a direct launch


def test_many_messages_in_one_launch(cuda, rng):
    """More messages than the small-launch kernel takes, up to kP2PMaxMessages per rank and launch."""
    most = cuda.P2P_MAX_MESSAGES
    plan = Plan(2, rng)
    plan.add_group([(0, 1, int(rng.integers(0, 300))) for _ in range(100)] +
                   [(1, 0, int(rng.integers(0, 300))) for _ in range(200)])
    plan.add_group([(0, 1, int(rng.integers(0, 64))) for _ in range(most // 2)] +
                   [(1, 0, int(rng.integers(0, 64))) for _ in range(most // 2)])
    with plan.ranks() as vr:
        assert all(len(plan.groups[1][r]) == most for r in range(2))
        plan.run(vr, "many messages")


# -- refusals ---------------------------------------------------------------------------------------------------------


def test_refusals(cuda):
    with VirtualRanks(3, buffer_bytes=1 << 16, channels_per_peer=1) as vr:
        rk = vr.ranks[0]
        refused = {
            "peer out of range": [(INPUT, 0, 16, 3, 0)],
            "negative peer": [(INPUT, 0, 16, -1, 1)],
            "receive flag": [(INPUT, 0, 16, 1, 2)],
            "null buffer": [(-1, 0, 16, 1, 0)],
            "unmatched self send": [(INPUT, 0, 16, 0, 0)],
            "unmatched self receive": [(OUTPUT, 0, 16, 0, 1), (OUTPUT, 32, 16, 0, 1), (INPUT, 0, 16, 0, 0)],
            "self sizes differ": [(INPUT, 0, 16, 0, 0), (OUTPUT, 0, 17, 0, 1)],
            "too many": [(INPUT, 0, 0, 1, 0)] * (cuda.P2P_MAX_MESSAGES + 1),
        }
        for what, messages in refused.items():
            with pytest.raises(ValueError, match="refused"):
                rk.p2p_group(messages)
        rk.p2p_group([])  # nothing
        rk.p2p_group([(INPUT, 0, 0, 1, 0), (-1, 0, 0, 2, 1)])  # zero bytes: nothing moves, nobody waits
        vr.synchronize()
    with VirtualRanks(2, buffer_bytes=1 << 16, channels_per_peer=1, p2p_bytes=0) as vr:
        with pytest.raises(ValueError, match="no p2p resources"):
            vr.ranks[0].p2p_group([(INPUT, 0, 100, 1, 0)])
        vr.fill(0, OUTPUT, POISON)
        vr.upload(0, INPUT, np.arange(100, dtype=np.uint8))
        vr.ranks[0].p2p_group([(INPUT, 0, 100, 0, 0), (OUTPUT, 5, 100, 0, 1)])  # self copies need no resources
        vr.synchronize()
        got = vr.download(0, OUTPUT, 200)
        assert (got[5:105] == np.arange(100, dtype=np.uint8)).all() and (got[:5] == POISON).all()
        assert (got[105:] == POISON).all()


def test_layout(cuda_build):
    """The layout formula (p2p_layout.h) and the lane split: parts contiguous, 16-byte boundaries, cover the message."""
    for n in [2, 3, 8, 16]:
        for budget in [1 << 16, 1 << 20, 16 << 20, 64 << 20]:
            lay = cuda_build.p2p_layout(n, budget)
            rings = (n - 1) * lay["lanes"] * lay["slots"]
            assert lay["slots"] >= 2 and lay["chunk"] % 16 == 0 and lay["chunk"] > 0
            assert lay["chunk"] == min(128 << 10, budget // rings // 16 * 16)
            assert lay["region_bytes"] == rings * lay["chunk"] <= budget
    assert cuda_build.p2p_layout(2, -1, 64 << 20)["budget"] == 16 << 20
    assert cuda_build.p2p_layout(2, -1, 1 << 20)["budget"] == 256 << 10
    assert cuda_build.p2p_layout(2, 0)["chunk"] == 0 and cuda_build.p2p_layout(1, 1 << 20)["chunk"] == 0
    for b in SIZES + [(1 << 20) + 7, 8 << 20, (64 << 10) * 3 - 1]:
        parts = cuda_build.p2p_lane_parts(b)
        assert len(parts) == min(8, -(-b // (64 << 10)))
        assert [lo for lo, _ in parts] == [0] + [hi for _, hi in parts[:-1]] if parts else b == 0
        assert (parts[-1][1] if parts else 0) == b
        assert all(lo % 16 == 0 and hi > lo for lo, hi in parts)


# -- a peer that never calls ------------------------------------------------------------------------------------------

TIMEOUT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from tests.harness import native_module
    from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks
    receive = sys.argv[1] == "receive"
    cuda = native_module()
    vr = VirtualRanks(2, timeout_s=1.0, stop_on_failure=True, channels_per_peer=1, buffer_bytes=4 << 20)
    lay = cuda.p2p_layout(2, -1, vr.scratch_bytes)
    nbytes = 2 * lay["lanes"] * lay["slots"] * lay["chunk"]  # every lane needs credits back
    assert nbytes <= 4 << 20
    t0 = time.monotonic()
    vr.ranks[0].p2p_group([(OUTPUT if receive else INPUT, 0, nbytes, 1, int(receive))])  # rank 1 never calls
    vr.synchronize([0])  # the kernel stopped: no CUDA error
    print("ELAPSED", time.monotonic() - t0)
    print("STOPPED:", vr.ranks[0].error_message())
    sys.stdout.flush()
    """
)


@pytest.mark.parametrize("case,what", [("send", "point-to-point send"), ("receive", "point-to-point receive")])
def test_a_peer_that_never_calls_times_out(cuda, case, what):
    """Rank 0 sends more than the slots hold (or receives) and rank 1 never calls: after the 1 s timeout rank 0's
    kernel records rank, peer and op and, in stop mode, ends."""
    proc = subprocess.run([sys.executable, "-c", TIMEOUT_SCRIPT, case], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "STOPPED:" in out and "rank 0 timed out" in out and "on peer 1" in out and what in out, out
    assert "waited for 1" in out, out  # the first credit (chunk S) / the first chunk
    elapsed = float(out.split("ELAPSED", 1)[1].split()[0])
    assert 0.9 < elapsed < 30, elapsed
