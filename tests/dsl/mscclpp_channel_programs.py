"""Collective algorithms written in the channel API of MSCCL++'s DSL, only the imports changed to
``jax_mscclpp.dsl.mscclpp``: what the MSCCL++ front-end tests lower, verify, simulate and run.

Each function takes the world size and the instance count and returns the written program. A rank's channel
toward a peer is ``MemoryChannel(peer, rank)`` (or ``PortChannel``); peers write each other's scratch
``Buffer``s.
"""

from jax_mscclpp.dsl.mscclpp.channel import *  # noqa: F403
from jax_mscclpp.dsl.mscclpp.collectives import *  # noqa: F403
from jax_mscclpp.dsl.mscclpp.program import *  # noqa: F403
from jax_mscclpp.dsl.mscclpp.rank import *  # noqa: F403


def peers(n, r):
    return [p for p in range(n) if p != r]


def channels(n, kind=MemoryChannel):
    """kind(peer, rank) for every rank and peer, keyed (rank, peer)."""
    return {(r, p): kind(p, r) for r in range(n) for p in peers(n, r)}


def allreduce_allpairs_simple(n, instances=1):
    """One phase: every rank puts its whole input into every peer's scratch from one thread block per peer and
    signals; thread block 0 waits for all and reduces."""
    with CollectiveProgram("ar_allpairs_simple", AllReduce(n, 1, False), n, instances=instances) as prog:
        scratch = [Buffer(r, n * n) for r in range(n)]
        ch = channels(n)
        for r in range(n):
            inp = Rank(r).get_input_buffer()
            for j, p in enumerate(peers(n, r)):
                ch[r, p].put(scratch[p][r * n:(r + 1) * n], inp[0:n], tb=j + 1)
                ch[r, p].signal(tb=j + 1)
        for r in range(n):
            rank = Rank(r)
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
            rank.reduce(rank.get_input_buffer()[0:n], [scratch[r][p * n:(p + 1) * n] for p in peers(n, r)], tb=0,
                        dst_chunk=rank.get_output_buffer()[0:n])
    return prog


def allreduce_allpairs_ll(n, instances=1, inplace=False):
    """Two phases over LL packets: rank r reduces chunk r of every rank (packets read in the reduction), then
    sends the result to every peer as packets, which each unpacks."""
    with CollectiveProgram("ar_allpairs_ll", AllReduce(n, 1, inplace), n, instances=instances, protocol="LL") as prog:
        scratch = [Buffer(r, 2 * n) for r in range(n)]
        ch = channels(n)
        for r in range(n):
            inp = Rank(r).get_input_buffer()
            for p in peers(n, r):
                ch[r, p].put_packets(scratch[p][r:r + 1], inp[p:p + 1], tb=0)
        for r in range(n):
            rank = Rank(r)
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            result = inp[r:r + 1] if inplace else out[r:r + 1]
            rank.reduce(inp[r:r + 1], [scratch[r][p:p + 1] for p in peers(n, r)], tb=0, dst_chunk=result,
                        packet=True)
            for p in peers(n, r):
                ch[r, p].put_packets(scratch[p][n + r:n + r + 1], result, tb=0)
        for r in range(n):
            rank = Rank(r)
            target = rank.get_input_buffer() if inplace else rank.get_output_buffer()
            for p in peers(n, r):
                rank.unpack_packets(target[p:p + 1], scratch[r][n + p:n + p + 1], tb=0)
    return prog


def allreduce_two_phase_port(n, instances=1):
    """Reduce-scatter then all-gather over port channels: phase one puts from one thread block per peer,
    phase two from thread block 0, each thread block flushing what it put."""
    with CollectiveProgram("ar_two_phase_port", AllReduce(n, 1, False), n, instances=instances) as prog:
        scratch = [Buffer(r, 2 * n) for r in range(n)]
        ch = channels(n, PortChannel)
        for r in range(n):
            inp = Rank(r).get_input_buffer()
            for j, p in enumerate(peers(n, r)):
                ch[r, p].put_with_signal_and_flush(scratch[p][r:r + 1], inp[p:p + 1], tb=j + 1)
        for r in range(n):
            rank = Rank(r)
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
            rank.reduce(inp[r:r + 1], [scratch[r][p:p + 1] for p in peers(n, r)], tb=0, dst_chunk=out[r:r + 1])
            for p in peers(n, r):
                ch[r, p].put_with_signal(scratch[p][n + r:n + r + 1], out[r:r + 1], tb=0)
            for p in peers(n, r):
                ch[r, p].flush(tb=0)
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
                rank.copy(out[p:p + 1], scratch[r][n + p:n + p + 1], tb=0)
    return prog


def allgather_allpairs(n, instances=1, inplace=False):
    """Every rank puts its two input chunks into every peer's scratch; the peers copy them into place, two
    thread blocks sharing each copy. In place, a rank's own block is its input already."""
    with CollectiveProgram("ag_allpairs", AllGather(n, 2, inplace), n, instances=instances) as prog:
        scratch = [Buffer(r, 2 * n) for r in range(n)]
        ch = channels(n)
        for r in range(n):
            rank = Rank(r)
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            for p in peers(n, r):
                ch[r, p].put(scratch[p][2 * r:2 * r + 2], inp[0:2], tb=0)
                ch[r, p].signal(tb=0)
            if not inplace:
                rank.copy(out[2 * r:2 * r + 2], inp[0:2], tb_group=ThreadBlockGroup([1, 2]))
        for r in range(n):
            rank = Rank(r)
            out = rank.get_output_buffer()
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
                rank.copy(out[2 * p:2 * p + 2], scratch[r][2 * p:2 * p + 2], tb=0)
    return prog


def reducescatter_allpairs(n, instances=1):
    """Every rank puts input block p into rank p's scratch; rank r reduces block r of all ranks."""
    with CollectiveProgram("rs_allpairs", ReduceScatter(n, 1, False), n, instances=instances) as prog:
        scratch = [Buffer(r, n) for r in range(n)]
        ch = channels(n)
        for r in range(n):
            inp = Rank(r).get_input_buffer()
            for p in peers(n, r):
                ch[r, p].put(scratch[p][r:r + 1], inp[p:p + 1], tb=0)
                ch[r, p].signal(tb=0)
        for r in range(n):
            rank = Rank(r)
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
            rank.reduce(rank.get_input_buffer()[r:r + 1], [scratch[r][p:p + 1] for p in peers(n, r)], tb=0,
                        dst_chunk=rank.get_output_buffer()[0:1])
    return prog


def alltoall_port(n, instances=1):
    """Input block p of every rank travels to rank p's scratch over a port channel, then into its output."""
    with CollectiveProgram("a2a_port", AllToAll(n, 1, False), n, instances=instances) as prog:
        scratch = [Buffer(r, n) for r in range(n)]
        ch = channels(n, PortChannel)
        for r in range(n):
            rank = Rank(r)
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            rank.copy(out[r:r + 1], inp[r:r + 1], tb=0)
            for p in peers(n, r):
                ch[r, p].put_with_signal_and_flush(scratch[p][r:r + 1], inp[p:p + 1], tb=0)
        for r in range(n):
            rank = Rank(r)
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
                rank.copy(rank.get_output_buffer()[p:p + 1], scratch[r][p:p + 1], tb=0)
    return prog


def allgather_semaphore(n, instances=1):
    """Thread block 0 puts the input into every peer's scratch, signals and waits, then releases a semaphore of
    its rank; thread block 1 copies the own block, acquires the semaphore and copies what arrived into place."""
    with CollectiveProgram("ag_semaphore", AllGather(n, 1, False), n, instances=instances) as prog:
        scratch = [Buffer(r, n) for r in range(n)]
        ch = channels(n)
        arrived = [Semaphore(r, 0) for r in range(n)]
        for r in range(n):
            rank = Rank(r)
            inp, out = rank.get_input_buffer(), rank.get_output_buffer()
            for p in peers(n, r):
                ch[r, p].put(scratch[p][r:r + 1], inp[0:1], tb=0)
                ch[r, p].signal(tb=0)
            rank.copy(out[r:r + 1], inp[0:1], tb=1)
        for r in range(n):
            rank = Rank(r)
            for p in peers(n, r):
                ch[r, p].wait(tb=0)
            arrived[r].release(tb=0)
            arrived[r].acquire(tb=1)
            for p in peers(n, r):
                rank.copy(rank.get_output_buffer()[p:p + 1], scratch[r][p:p + 1], tb=1)
    return prog


def allreduce_switch(n, instances=1):
    """Every rank copies its input into scratch; after a signal/wait barrier, rank r reduces chunk r over the
    switch and multicasts the sum back; after another barrier each rank copies the sums into place."""
    with CollectiveProgram("ar_switch", AllReduce(n, 1, False), n, instances=instances) as prog:
        scratch = [Buffer(r, n) for r in range(n)]
        switch = SwitchChannel(list(range(n)), BufferType.scratch)
        ch = channels(n)

        def barrier():
            for r in range(n):
                for p in peers(n, r):
                    ch[r, p].signal(tb=0)
            for r in range(n):
                for p in peers(n, r):
                    ch[r, p].wait(tb=0)

        for r in range(n):
            Rank(r).copy(scratch[r][0:n], Rank(r).get_input_buffer()[0:n], tb=0)
        barrier()
        for r in range(n):
            out = Rank(r).get_output_buffer()
            switch.at_rank(r).reduce(r, 1, out[r:r + 1], tb=0)
            switch.at_rank(r).broadcast(out[r:r + 1], r, 1, tb=0)
        barrier()
        for r in range(n):
            for p in peers(n, r):
                Rank(r).copy(Rank(r).get_output_buffer()[p:p + 1], scratch[r][p:p + 1], tb=0)
    return prog


# name -> (program function, its collective)
PROGRAMS = {
    "allreduce_allpairs_simple": (allreduce_allpairs_simple, "all_reduce"),
    "allreduce_allpairs_ll": (allreduce_allpairs_ll, "all_reduce"),
    "allreduce_allpairs_ll_inplace": (lambda n, k=1: allreduce_allpairs_ll(n, k, inplace=True), "all_reduce"),
    "allreduce_two_phase_port": (allreduce_two_phase_port, "all_reduce"),
    "allreduce_switch": (allreduce_switch, "all_reduce"),
    "allgather_allpairs": (allgather_allpairs, "all_gather"),
    "allgather_allpairs_inplace": (lambda n, k=1: allgather_allpairs(n, k, inplace=True), "all_gather"),
    "allgather_semaphore": (allgather_semaphore, "all_gather"),
    "reducescatter_allpairs": (reducescatter_allpairs, "reduce_scatter"),
    "alltoall_port": (alltoall_port, "all_to_all"),
}
