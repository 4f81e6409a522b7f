"""Collective algorithms written in the chunk API of MSCCL++'s DSL (``chunk(rank, Buffer.x, index, size)``),
only the imports changed to ``jax_mscclpp.dsl.mscclpp``: what the MSCCL++ front-end tests lower, verify,
simulate and run.

Each function takes the world size and the instance count and returns the written program. Channels are
implicit: a signal from ``sendtb=t`` is received by the wait on ``recvtb=t``.
"""

from jax_mscclpp.dsl.mscclpp import *  # noqa: F403
from jax_mscclpp.dsl.mscclpp.buffer import Buffer
from jax_mscclpp.dsl.mscclpp.collectives import AllGather, AllReduce, AllToAll, ReduceScatter
from jax_mscclpp.dsl.mscclpp.types import ChannelType


def peers(n, r):
    return [p for p in range(n) if p != r]


def allreduce_allpairs_simple(n, instances=1):
    """One phase: every rank puts its input into every peer's scratch and signals; each rank copies its input
    to the output and reduces what arrives into it."""
    size = n
    with MSCCLPPProgram("ar_allpairs_simple", AllReduce(n, size, False), n, instances) as prog:
        for r in range(n):
            for p in peers(n, r):
                c = chunk(r, Buffer.input, 0, size)
                c.put(p, Buffer.scratch, r * size, sendtb=p)
                c.signal(p, Buffer.scratch, r * size, sendtb=p)
        for r in range(n):
            result = chunk(r, Buffer.input, 0, size).copy(r, Buffer.output, 0, sendtb=r)
            for p in peers(n, r):
                received = chunk(r, Buffer.scratch, p * size, size)
                received.wait(p, Buffer.input, 0, recvtb=r)
            for p in peers(n, r):
                result.reduce(chunk(r, Buffer.scratch, p * size, size), recvtb=r)
    return prog


def allreduce_allpairs_ll(n, instances=1):
    """In place, two phases over LL packets: chunk p of every rank goes to rank p as packets; rank r reduces
    them into its chunk r and sends it back as packets, which each rank unpacks into place."""
    with MSCCLPPProgram("ar_allpairs_ll", AllReduce(n, n, True), n, instances, protocol="LL") as prog:
        for r in range(n):
            for p in peers(n, r):
                chunk(r, Buffer.input, p).put_packet(p, Buffer.scratch, r, sendtb=0)
        for r in range(n):
            c = chunk(r, Buffer.input, r)
            for p in peers(n, r):
                c.reduce_packet(chunk(r, Buffer.scratch, p), recvtb=0)
            for p in peers(n, r):
                c.put_packet(p, Buffer.scratch, n + r, sendtb=0)
        for r in range(n):
            for p in peers(n, r):
                chunk(r, Buffer.scratch, n + p).copy_packet(r, Buffer.input, p, sendtb=0)
    return prog


def allreduce_two_phase(n, instances=1):
    """Reduce-scatter then all-gather with put/signal/wait on one thread block."""
    with MSCCLPPProgram("ar_two_phase", AllReduce(n, n, False), n, instances) as prog:
        for r in range(n):
            for p in peers(n, r):
                chunk(r, Buffer.input, p).put(p, Buffer.scratch, r, sendtb=0)
                chunk(r, Buffer.input, p).signal(p, Buffer.scratch, r, sendtb=0)
        for r in range(n):
            result = chunk(r, Buffer.input, r).copy(r, Buffer.output, r, sendtb=0)
            for p in peers(n, r):
                chunk(r, Buffer.scratch, p).wait(p, Buffer.input, r, recvtb=0)
                result.reduce(chunk(r, Buffer.scratch, p), recvtb=0)
            for p in peers(n, r):
                result.put(p, Buffer.scratch, n + r, sendtb=0)
                result.signal(p, Buffer.scratch, n + r, sendtb=0)
        for r in range(n):
            for p in peers(n, r):
                received = chunk(r, Buffer.scratch, n + p)
                received.wait(p, Buffer.output, p, recvtb=0)
                received.copy(r, Buffer.output, p, sendtb=0)
    return prog


def allgather_port(n, instances=1):
    """Every rank puts its input into every peer's scratch over port channels, signals and flushes; each rank
    copies what arrives into place."""
    with MSCCLPPProgram("ag_port", AllGather(n, 1, False), n, instances) as prog:
        for r in range(n):
            c = chunk(r, Buffer.input, 0)
            c.copy(r, Buffer.output, r, sendtb=0)
            for p in peers(n, r):
                c.put(p, Buffer.scratch, r, sendtb=0, chan_type=ChannelType.port)
                c.signal(p, Buffer.scratch, r, sendtb=0, chan_type=ChannelType.port)
                c.flush(p, Buffer.scratch, r, sendtb=0, chan_type=ChannelType.port)
        for r in range(n):
            for p in peers(n, r):
                received = chunk(r, Buffer.scratch, p)
                received.wait(p, Buffer.input, 0, recvtb=0, chan_type=ChannelType.port)
                received.copy(r, Buffer.output, p, sendtb=0)
    return prog


def reducescatter_allpairs(n, instances=1):
    """Input block p of every rank goes to rank p's scratch; rank r reduces block r of all ranks."""
    with MSCCLPPProgram("rs_allpairs", ReduceScatter(n, 1, False), n, instances) as prog:
        for r in range(n):
            for p in peers(n, r):
                chunk(r, Buffer.input, p).put(p, Buffer.scratch, r, sendtb=p)
                chunk(r, Buffer.input, p).signal(p, Buffer.scratch, r, sendtb=p)
        for r in range(n):
            result = chunk(r, Buffer.input, r).copy(r, Buffer.output, 0, sendtb=r)
            for p in peers(n, r):
                chunk(r, Buffer.scratch, p).wait(p, Buffer.input, r, recvtb=r)
                result.reduce(chunk(r, Buffer.scratch, p), recvtb=r)
    return prog


def alltoall_allpairs(n, instances=1):
    """Input block p of every rank travels to rank p's scratch, then into its output block; a barrier of
    thread blocks 0 and 1 separates the copies of each rank."""
    with MSCCLPPProgram("a2a_allpairs", AllToAll(n, 1, False), n, instances) as prog:
        for r in range(n):
            chunk(r, Buffer.input, r).copy(r, Buffer.output, r, sendtb=1)
            for p in peers(n, r):
                chunk(r, Buffer.input, p).put(p, Buffer.scratch, r, sendtb=0)
                chunk(r, Buffer.input, p).signal(p, Buffer.scratch, r, sendtb=0)
            rank(r).barrier(tb_list=[0, 1])
        for r in range(n):
            for p in peers(n, r):
                received = chunk(r, Buffer.scratch, p)
                received.wait(p, Buffer.input, r, recvtb=0)
                received.copy(r, Buffer.output, p, sendtb=0)
    return prog


# name -> (program function, its collective)
PROGRAMS = {
    "allreduce_allpairs_simple": (allreduce_allpairs_simple, "all_reduce"),
    "allreduce_allpairs_ll": (allreduce_allpairs_ll, "all_reduce"),
    "allreduce_two_phase": (allreduce_two_phase, "all_reduce"),
    "allgather_port": (allgather_port, "all_gather"),
    "reducescatter_allpairs": (reducescatter_allpairs, "reduce_scatter"),
    "alltoall_allpairs": (alltoall_allpairs, "all_to_all"),
}
