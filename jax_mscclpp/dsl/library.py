"""The library of collective algorithms: each a function of the world size that returns a Program.

Every program lowers for any world size >= 2 and doubles as a golden test (tests/dsl/golden). Peers only
write into each other's scratch: XLA owns input and output buffers. Thread blocks default to 0; lower with
``instances=k`` to spread a program over k times the thread blocks and chunks.
"""

from __future__ import annotations

from .channels import MemoryChannel, PortChannel, SwitchChannel, all_pairs
from .program import Program


def allreduce_1pa_ll(n: int) -> Program:
    """One-phase all-pairs all-reduce over LL packets: every rank sends its whole input to every peer and
    reduces the n-1 copies it receives. Lowest latency, n-1 times the traffic of 2PA: small messages."""
    prog = Program("all_reduce", n, name="allreduce_1pa_ll", chunks=1, scratch_chunks=2 * n, protocol="LL")
    pipes = all_pairs(prog, MemoryChannel)
    # scratch[p]: packets from rank p; scratch[n + p]: their unpacked copy, which lowering fuses away.
    for r, rank in enumerate(prog.ranks):
        for p in prog.peers(r):
            pipes[r, p].put_packets(prog.rank(p).scratch[r], rank.input[0])
        for p in prog.peers(r):
            pipes[p, r].read_packets(rank.scratch[n + p], rank.scratch[p])
        rank.reduce(rank.output[0], [rank.input[0]] + [rank.scratch[n + p] for p in prog.peers(r)])
    return prog


def allreduce_2pa_ll(n: int) -> Program:
    """Two-phase all-pairs all-reduce over LL packets: rank r reduces chunk r of every rank (reduce-scatter)
    and sends the result to every peer (all-gather), each step a single packet hop."""
    prog = Program("all_reduce", n, name="allreduce_2pa_ll", chunks=n, scratch_chunks=3 * n, protocol="LL")
    pipes = all_pairs(prog, MemoryChannel)
    # scratch[p]: chunk r from rank p; scratch[n + p]: reduced chunk p; scratch[2n + p]: unpacked scratch[p].
    for r, rank in enumerate(prog.ranks):
        for p in prog.peers(r):
            pipes[r, p].put_packets(prog.rank(p).scratch[r], rank.input[p])
        for p in prog.peers(r):
            pipes[p, r].read_packets(rank.scratch[2 * n + p], rank.scratch[p])
        rank.reduce(rank.output[r], [rank.input[r]] + [rank.scratch[2 * n + p] for p in prog.peers(r)])
        for p in prog.peers(r):
            pipes[r, p].put_packets(prog.rank(p).scratch[n + r], rank.output[r])
        for p in prog.peers(r):
            pipes[p, r].read_packets(rank.output[p], rank.scratch[n + p])
    return prog


def allreduce_2pa_hb(n: int) -> Program:
    """Two-phase all-pairs all-reduce over HB memory channels: the 2PA-LL schedule with plain puts and one
    signal/wait per transfer, for larger messages."""
    prog = Program("all_reduce", n, name="allreduce_2pa_hb", chunks=n, scratch_chunks=2 * n)
    pipes = all_pairs(prog, MemoryChannel)
    # scratch[p]: chunk r from rank p; scratch[n + p]: reduced chunk p.
    for r, rank in enumerate(prog.ranks):
        _put_to_peers(prog, pipes, r, lambda p: rank.input[p])
        for p in prog.peers(r):
            pipes[p, r].wait()
        rank.reduce(rank.output[r], [rank.input[r]] + [rank.scratch[p] for p in prog.peers(r)])
        for p in prog.peers(r):
            pipes[r, p].put(prog.rank(p).scratch[n + r], rank.output[r])
        for p in prog.peers(r):
            pipes[r, p].signal()
        for p in prog.peers(r):
            pipes[p, r].wait()
        for p in prog.peers(r):
            rank.copy(rank.output[p], rank.scratch[n + p])
    return prog


def allreduce_2pr(n: int) -> Program:
    """Two-phase ring all-reduce on PortChannel DMA: ring reduce-scatter, then ring all-gather. Each ring
    chunk travels as two halves, so the GPU reduces one half while the DMA engine moves the other."""
    prog = Program("all_reduce", n, name="allreduce_2pr", chunks=2 * n, scratch_chunks=4 * n)
    ring = [PortChannel(prog, r, (r + 1) % n) for r in range(n)]

    def halves(k):  # the two chunks of ring chunk k
        return 2 * (k % n), 2 * (k % n) + 1

    for r, rank in enumerate(prog.ranks):
        nxt, send, recv = prog.rank((r + 1) % n), ring[r], ring[r - 1]
        # Reduce-scatter: step s forwards the partial sum of ring chunk r-1-s into the next rank's scratch[h].
        for h in halves(r - 1):
            send.put(nxt.scratch[h], rank.input[h])
            send.signal()
        for s in range(1, n):
            for h in halves(r - 1 - s):
                recv.wait()
                rank.reduce(rank.output[h], [rank.input[h], rank.scratch[h]])
                if s < n - 1:
                    send.put(nxt.scratch[h], rank.output[h])
                    send.signal()
        send.flush()  # the all-gather overwrites outputs that were DMA sources
        # All-gather: forward each reduced ring chunk through scratch[2n + h].
        for h in halves(r):
            send.put(nxt.scratch[2 * n + h], rank.output[h])
            send.signal()
        for s in range(1, n):
            for h in halves(r - s):
                recv.wait()
                if s < n - 1:
                    send.put(nxt.scratch[2 * n + h], rank.scratch[2 * n + h])
                    send.signal()
                rank.copy(rank.output[h], rank.scratch[2 * n + h])
        send.flush()
    return prog


def allreduce_2pa_nvls(n: int) -> Program:
    """Two-phase all-pairs all-reduce through the switch: rank r reduces chunk r of all ranks' scratch in the
    switch and multicasts the sum back. Memory channel signals separate the phases."""
    prog = Program("all_reduce", n, name="allreduce_2pa_nvls", chunks=n, scratch_chunks=n)
    switch = SwitchChannel(prog, range(n))
    pipes = all_pairs(prog, MemoryChannel)

    def barrier_all(r):
        for p in prog.peers(r):
            pipes[r, p].signal()
        for p in prog.peers(r):
            pipes[p, r].wait()

    for r, rank in enumerate(prog.ranks):
        rank.copy(rank.scratch[0:n], rank.input[0:n])
        barrier_all(r)  # every rank's scratch holds its input
        switch.reduce(rank.output[r], rank.scratch[r])
        switch.broadcast(rank.scratch[r], rank.output[r])
        barrier_all(r)  # every reduced chunk is in every rank's scratch
        for p in prog.peers(r):
            rank.copy(rank.output[p], rank.scratch[p])
    return prog


def _put_to_peers(prog: Program, pipes, r: int, piece) -> None:
    """Rank r puts ``piece(p)`` into scratch[r] of every peer p and signals p."""
    for p in prog.peers(r):
        pipes[r, p].put(prog.rank(p).scratch[r], piece(p))
        pipes[r, p].signal()


def _exchange_allpairs(collective: str, n: int, name: str, piece) -> Program:
    """All pairs through scratch: ``piece(rank, p)``, what a rank sends to rank p, lands in output block r of rank p
    for every sender r (a rank's piece for itself is copied locally)."""
    prog = Program(collective, n, name=name, chunks=1, scratch_chunks=n)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        _put_to_peers(prog, pipes, r, lambda p: piece(rank, p))
        rank.copy(rank.output.block(r)[0], piece(rank, r))
        for p in prog.peers(r):
            pipes[p, r].wait()
            rank.copy(rank.output.block(p)[0], rank.scratch[p])
    return prog


def allgather_allpairs(n: int) -> Program:
    """All-gather, all pairs: every rank puts its input into every peer's scratch and signals; each rank
    copies what it receives into the matching output block."""
    return _exchange_allpairs("all_gather", n, "allgather_allpairs", lambda rank, p: rank.input[0])


def reducescatter_allpairs(n: int) -> Program:
    """Reduce-scatter, all pairs: every rank puts input block p into rank p's scratch; rank r reduces block r
    of all ranks."""
    prog = Program("reduce_scatter", n, name="reducescatter_allpairs", chunks=1, scratch_chunks=n)
    pipes = all_pairs(prog, MemoryChannel)
    for r, rank in enumerate(prog.ranks):
        _put_to_peers(prog, pipes, r, lambda p: rank.input.block(p)[0])
        for p in prog.peers(r):
            pipes[p, r].wait()
        rank.reduce(rank.output[0], [rank.input.block(r)[0]] + [rank.scratch[p] for p in prog.peers(r)])
    return prog


def alltoall_allpairs(n: int) -> Program:
    """All-to-all, all pairs: input block p of every rank goes to rank p's scratch, then to its output block."""
    return _exchange_allpairs("all_to_all", n, "alltoall_allpairs", lambda rank, p: rank.input.block(p)[0])


# Name -> program function, for selection and golden tests.
PROGRAMS = {fn.__name__: fn for fn in (
    allreduce_1pa_ll, allreduce_2pa_ll, allreduce_2pa_hb, allreduce_2pr, allreduce_2pa_nvls,
    allgather_allpairs, reducescatter_allpairs, alltoall_allpairs)}
