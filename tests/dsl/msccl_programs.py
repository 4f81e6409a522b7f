"""Collective algorithms written in MSCCLang's language (chunk routing), for the MSCCLang front end's tests.

Each function builds and returns an MSCCLProgram for ``n`` ranks; ``protocol`` and ``instances`` are MSCCLang's.
They import only what an MSCCLang program imports, from ``jax_mscclpp.dsl.msccl``.
"""

from jax_mscclpp.dsl.msccl import *  # noqa: F403 (MSCCLang programs import the language this way)
from jax_mscclpp.dsl.msccl.collectives import AllGather, AllReduce, AllToAll, Collective, ReduceScatter
from jax_mscclpp.dsl.msccl.topologies import fully_connected, ring


def allreduce_ring(n, protocol="Simple", instances=1, inplace=True):
    """Chunk r starts on rank r+1, is reduced around the ring into rank r, then copied around the ring."""
    with MSCCLProgram("allreduce_ring", ring(n), AllReduce(n, n, inplace), instances, protocol=protocol) as prog:
        for r in range(n):
            c = chunk((r + 1) % n, Buffer.input, r)
            for step in range(2, n + 1):
                c = chunk((r + step) % n, Buffer.input, r).reduce(c)
            if not inplace:
                c = c.copy(r, Buffer.output, r)
            for step in range(1, n):
                c = c.copy((r + step) % n, Buffer.output, r)
    return prog


def allreduce_allpairs(n, protocol="LL", instances=1):
    """Every rank sends chunk p of its input to rank p's scratch and reduces what it gets into its own chunk,
    then sends the result to every peer. Thread blocks by hand: one per peer."""
    with MSCCLProgram("allreduce_allpairs", fully_connected(n), AllReduce(n, n, True), instances, protocol=protocol,
                      threadblock_policy=ThreadblockPolicy.manual) as prog:
        for r in range(n):
            for p in range(n):
                if p != r:
                    chunk(r, Buffer.input, p).copy(p, "scratch", r, sendtb=p, recvtb=r)
        for r in range(n):
            c = chunk(r, Buffer.input, r)
            for p in range(n):
                if p != r:
                    c = c.reduce(chunk(r, "scratch", p), sendtb=r)
            for p in range(n):
                if p != r:
                    c.copy(p, Buffer.input, r, sendtb=p, recvtb=r)
    return prog


def allreduce_recursive_halving_doubling(n, protocol="Simple", instances=1):
    """Reduce-scatter by recursive halving (each step keeps the half of the range holding the rank's own chunk and
    reduces the peer's copy of it), then all-gather by recursive doubling. ``n`` is a power of two. Its references
    span several chunks, so MSCCL-IR replicates it by instance blocks (``interleaved_replication=False``)."""
    with MSCCLProgram("allreduce_rhd", fully_connected(n), AllReduce(n, n, True), instances, protocol=protocol,
                      threadblock_policy=ThreadblockPolicy.manual, interleaved_replication=False) as prog:
        distance = n // 2
        while distance >= 1:
            for r in range(n):
                peer = r ^ distance
                low = (r // distance) * distance  # the half of size `distance` that holds chunk r
                chunk(r, Buffer.input, low, size=distance).reduce(chunk(peer, Buffer.input, low, size=distance),
                                                                   sendtb=r, recvtb=peer, ch=0)
            distance //= 2
        distance = 1
        while distance < n:
            for r in range(n):
                peer = r ^ distance
                low = (r // distance) * distance
                chunk(r, Buffer.input, low, size=distance).copy(peer, Buffer.input, low, sendtb=peer, recvtb=r, ch=0)
            distance *= 2
    return prog


def allreduce_hierarchical(nodes, gpus, protocol="Simple", instances=1):
    """Two levels over ``nodes`` x ``gpus`` ranks (rank = node * gpus + gpu): reduce-scatter inside each node
    through scratch, reduce-scatter across nodes between the gpus of one index, then all-gather across nodes and
    inside nodes. Chunk c belongs to gpu c // nodes and, within that gpu's share, to node c % nodes."""
    n = nodes * gpus
    with MSCCLProgram("allreduce_hierarchical", fully_connected(n), AllReduce(n, n, True), instances,
                      protocol=protocol, interleaved_replication=False) as prog:
        def rank(node, gpu):
            return node * gpus + gpu

        def share(gpu):  # the chunks gpu `gpu` of every node reduces inside its node
            return gpu * nodes

        for node in range(nodes):
            for g in range(gpus):
                for other in range(gpus):
                    if other != g:
                        chunk(rank(node, g), Buffer.input, share(other), size=nodes).copy(
                            rank(node, other), f"from_gpu{g}", 0)
            for g in range(gpus):
                c = chunk(rank(node, g), Buffer.input, share(g), size=nodes)
                for other in range(gpus):
                    if other != g:
                        c = c.reduce(chunk(rank(node, g), f"from_gpu{other}", 0, size=nodes))
        for g in range(gpus):
            for node in range(nodes):
                c = chunk(rank(node, g), Buffer.input, share(g) + node)
                for step in range(1, nodes):
                    peer = rank((node + step) % nodes, g)
                    c = c.reduce(chunk(peer, Buffer.input, share(g) + node))
            for node in range(nodes):
                for step in range(1, nodes):
                    chunk(rank(node, g), Buffer.input, share(g) + node).copy(rank((node + step) % nodes, g),
                                                                              Buffer.input, share(g) + node)
        for node in range(nodes):
            for g in range(gpus):
                for other in range(gpus):
                    if other != g:
                        chunk(rank(node, g), Buffer.input, share(g), size=nodes).copy(rank(node, other), Buffer.input,
                                                                                       share(g))
    return prog


def allgather_ring(n, protocol="Simple", instances=1, inplace=False):
    """Each rank's chunk travels the ring; out of place, each rank first copies its own into its output."""
    with MSCCLProgram("allgather_ring", ring(n), AllGather(n, 1, inplace), instances, protocol=protocol) as prog:
        for r in range(n):
            c = chunk(r, Buffer.input, 0)
            if not inplace:
                c = c.copy(r, Buffer.output, r)
            for step in range(1, n):
                c = c.copy((r + step) % n, Buffer.output, r)
    return prog


def reducescatter_ring(n, protocol="Simple", instances=1, chunk_factor=1):
    """Block b starts on rank b+1 and is reduced around the ring into rank b, which copies it to its output;
    chunks of a block travel as one reference."""
    cf = chunk_factor
    with MSCCLProgram("reducescatter_ring", ring(n), ReduceScatter(n, cf, False), instances, protocol=protocol) as prog:
        for b in range(n):
            c = chunk((b + 1) % n, Buffer.input, b * cf, size=cf)
            for step in range(2, n + 1):
                c = chunk((b + step) % n, Buffer.input, b * cf, size=cf).reduce(c)
            c.copy(b, Buffer.output, 0)
    return prog


def alltoall_two_step(nodes, gpus, protocol="Simple", instances=1):
    """Hierarchical all-to-all over ``nodes`` x ``gpus`` ranks: inside a node, every gpu gathers in a scratch
    buffer per remote node the chunks of all local gpus for its peer there; one transfer per (gpu, remote node)
    then carries them; chunks for the own node go directly."""
    n = nodes * gpus
    with MSCCLProgram("alltoall_two_step", fully_connected(n), AllToAll(n, 1, False), instances,
                      protocol=protocol) as prog:
        for n1 in range(nodes):
            for step in range(1, nodes):
                n2 = (n1 + step) % nodes
                for g1 in range(gpus):
                    for g2 in range(gpus):
                        c = chunk(n1 * gpus + g1, Buffer.input, n2 * gpus + g2)
                        c.copy(n1 * gpus + g2, f"to_node{n2}", g1)
            for step in range(1, nodes):
                n2 = (n1 + step) % nodes
                for g in range(gpus):
                    c = chunk(n1 * gpus + g, f"to_node{n2}", 0, size=gpus)
                    c.copy(n2 * gpus + g, Buffer.output, c.get_dst_index())
        for r in range(n):
            node = r // gpus
            for g in range(gpus):
                c = chunk(r, Buffer.input, node * gpus + g)
                c.copy(c.get_dst_rank(), Buffer.output, c.get_dst_index())
    return prog


class AllToNext(Collective):
    """Rank r's input ends in rank r+1's output; the last rank sends nothing."""

    def init_buffers(self):
        cf = self.chunk_factor
        buffers = []
        for r in range(self.num_ranks):
            inputs = [Chunk(r, c, r + 1, c) if r + 1 < self.num_ranks else None for c in range(cf)]
            buffers.append({Buffer.input: inputs, Buffer.output: [None] * cf})
        return buffers

    def check(self, prog):
        correct = True
        for r in range(1, self.num_ranks):
            for c in range(self.chunk_factor):
                found = prog.buffers[r][Buffer.output][c]
                if found != Chunk(r - 1, c):
                    print(f"rank {r} output chunk {c}: expected chunk {c} of rank {r - 1}, found {found}")
                    correct = False
        return correct


def alltonext(n, protocol="Simple", instances=1, chunk_factor=2, relay=True):
    """AllToNext; with ``relay`` chunk 0 goes through a scratch buffer of the next-but-one rank and back."""
    with MSCCLProgram("alltonext", fully_connected(n), AllToNext(n, chunk_factor, False), instances,
                      protocol=protocol) as prog:
        for r in range(n - 1):
            for c in range(chunk_factor):
                ref = chunk(r, Buffer.input, c)
                if relay and c == 0 and n > 2:
                    ref = ref.copy((r + 2) % n, f"relay{r}", 0)
                ref.copy(r + 1, Buffer.output, c)
    return prog


def _two_nodes(n):
    return n >= 4 and n % 2 == 0


# name -> (builder of (world size, protocol), whether it is written for that world size): every program above, as
# the tests that run them on a world size take them
PROGRAMS = {
    "ring": (lambda n, p: allreduce_ring(n, p), lambda n: True),
    "ring_out_of_place": (lambda n, p: allreduce_ring(n, p, inplace=False), lambda n: True),
    "allpairs": (lambda n, p: allreduce_allpairs(n, p), lambda n: True),
    "recursive_halving_doubling": (lambda n, p: allreduce_recursive_halving_doubling(n, p),
                                   lambda n: n & (n - 1) == 0),
    "hierarchical": (lambda n, p: allreduce_hierarchical(2, n // 2, p), _two_nodes),
    "allgather_ring": (lambda n, p: allgather_ring(n, p), lambda n: True),
    "reducescatter_ring": (lambda n, p: reducescatter_ring(n, p, chunk_factor=2), lambda n: True),
    "alltoall_two_step": (lambda n, p: alltoall_two_step(2, n // 2, p), _two_nodes),
    "alltonext": (lambda n, p: alltonext(n, p), lambda n: n >= 2),
}
