"""MSCCL-IR XML texts for the load_plan tests, written the way msccl-tools' ``XML()`` writes them (the old
format: ``<step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>``), by small generators of this file.

``XmlWriter`` collects thread blocks and steps; a step's ``dep=(tb, s)`` marks that step ``hasdep="1"``.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class _Tb:
    send: int
    recv: int
    chan: int
    steps: list = dataclasses.field(default_factory=list)


class XmlWriter:
    def __init__(self, name: str, coll: str, ngpus: int, proto: str, nchunksperloop: int, i_chunks: int,
                 o_chunks: int, s_chunks: int = 0, inplace: bool = False):
        self.head = dict(name=name, proto=proto, nchunksperloop=nchunksperloop, ngpus=ngpus, coll=coll,
                         inplace=int(inplace))
        self.chunks = dict(i_chunks=i_chunks, o_chunks=o_chunks, s_chunks=s_chunks)
        self.gpus = [[] for _ in range(ngpus)]

    def tb(self, gpu: int, send: int = -1, recv: int = -1, chan: int = 0) -> int:
        self.gpus[gpu].append(_Tb(send, recv, chan))
        return len(self.gpus[gpu]) - 1

    def step(self, gpu: int, tb: int, type_: str, src=("i", -1), dst=("o", -1), cnt: int = 1, dep=None) -> int:
        steps = self.gpus[gpu][tb].steps
        steps.append(dict(type=type_, srcbuf=src[0], srcoff=src[1], dstbuf=dst[0], dstoff=dst[1], cnt=cnt,
                          depid=dep[0] if dep else -1, deps=dep[1] if dep else -1, hasdep=0))
        if dep:
            self.gpus[gpu][dep[0]].steps[dep[1]]["hasdep"] = 1
        return len(steps) - 1

    def text(self) -> str:
        nchannels = max(tb.chan for tbs in self.gpus for tb in tbs) + 1
        head = dict(self.head)
        head = {"name": head["name"], "proto": head["proto"], "nchannels": nchannels, **{
            k: head[k] for k in ("nchunksperloop", "ngpus", "coll", "inplace")}}
        lines = ["<algo " + _attrs(head) + ">"]
        for gpu, tbs in enumerate(self.gpus):
            lines.append(f'  <gpu id="{gpu}" ' + _attrs(self.chunks) + ">")
            for index, tb in enumerate(tbs):
                lines.append(f'    <tb id="{index}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
                for s, step in enumerate(tb.steps):
                    lines.append(f'      <step s="{s}" ' + _attrs(step) + "/>")
                lines.append("    </tb>")
            lines.append("  </gpu>")
        lines.append("</algo>")
        return "\n".join(lines) + "\n"


def _attrs(values: dict) -> str:
    return " ".join(f'{key}="{value}"' for key, value in values.items())


def ring_allreduce(n: int, proto: str = "Simple", instances: int = 1, inplace: bool = False) -> str:
    """Ring reduce-scatter then ring all-gather, one thread block per instance on its own channel; instance i
    handles chunks ``c * instances + i``. Out of place it reduces input into output; in place, input into
    itself."""
    k = instances
    xml = XmlWriter(f"ring_allreduce_{proto}", "allreduce", n, proto, n * k, n * k, n * k, inplace=inplace)
    out = "i" if inplace else "o"
    for r in range(n):
        for i in range(k):
            tb = xml.tb(r, send=(r + 1) % n, recv=(r - 1) % n, chan=i)

            def chunk(c):
                return (c % n) * k + i

            xml.step(r, tb, "s", src=("i", chunk(r)), dst=("i", chunk(r)))
            for step in range(n - 1):
                c = chunk(r - step - 1)
                xml.step(r, tb, "rrcs", src=("i", c), dst=(out, c))
            for step in range(n - 1):
                c = chunk(r - step)
                xml.step(r, tb, "rcs" if step < n - 2 else "r", src=(out, c), dst=(out, c))
    return xml.text()


def allpairs_allreduce(n: int, proto: str = "Simple") -> str:
    """Rank r gathers chunk r from every peer into scratch, reduces it into output chunk r on thread block 0
    (waiting for each peer's thread block), and every peer thread block sends the result once it is done."""
    xml = XmlWriter(f"allpairs_allreduce_{proto}", "allreduce", n, proto, n, n, n, s_chunks=n - 1)
    for r in range(n):
        peers = [(r + d) % n for d in range(1, n)]
        tbs = [xml.tb(r, send=p, recv=p) for p in peers]
        for t, p in zip(tbs, peers):
            xml.step(r, t, "s", src=("i", p), dst=("s", tbs.index(t)))
            xml.step(r, t, "r", src=("i", r), dst=("s", t))
        xml.step(r, 0, "cpy", src=("i", r), dst=("o", r))
        last = xml.step(r, 0, "re", src=("s", 0), dst=("o", r))
        for t in tbs[1:]:
            last = xml.step(r, 0, "re", src=("s", t), dst=("o", r), dep=(t, 1))
        for t, p in zip(tbs, peers):
            xml.step(r, t, "s", src=("o", r), dst=("o", r), dep=None if t == 0 else (0, last))
            xml.step(r, t, "r", src=("o", p), dst=("o", p))
    return xml.text()


def allpairs_allgather(n: int, proto: str = "Simple") -> str:
    xml = XmlWriter(f"allpairs_allgather_{proto}", "allgather", n, proto, n, 1, n)
    for r in range(n):
        for p in [(r + d) % n for d in range(1, n)]:
            t = xml.tb(r, send=p, recv=p)
            xml.step(r, t, "s", src=("i", 0), dst=("o", r))
            xml.step(r, t, "r", src=("i", 0), dst=("o", p))
        xml.step(r, 0, "cpy", src=("i", 0), dst=("o", r))
    return xml.text()


def ring_allgather(n: int, proto: str = "LL", instances: int = 1) -> str:
    """Ring all-gather with ``rcs`` forwarding, ``instances`` chunks per rank on as many channels."""
    k = instances
    xml = XmlWriter(f"ring_allgather_{proto}", "allgather", n, proto, n * k, k, n * k)
    for r in range(n):
        for i in range(k):
            tb = xml.tb(r, send=(r + 1) % n, recv=(r - 1) % n, chan=i)
            xml.step(r, tb, "cpy", src=("i", i), dst=("o", r * k + i))
            xml.step(r, tb, "s", src=("i", i), dst=("o", r * k + i))
            for step in range(n - 1):
                c = ((r - step - 1) % n) * k + i
                xml.step(r, tb, "rcs" if step < n - 2 else "r", src=("o", c), dst=("o", c))
    return xml.text()


def allpairs_reducescatter(n: int, proto: str = "Simple", into_input: bool = False) -> str:
    """Rank r gathers block r from every peer into scratch and reduces it into output block 0 on thread block 0
    (waiting for each peer's thread block). ``into_input``: it reduces into input block r, then copies that
    into the output."""
    xml = XmlWriter(f"allpairs_reducescatter_{proto}", "reducescatter", n, proto, n, n, 1, s_chunks=n - 1)
    for r in range(n):
        tbs = _gather_own_block(xml, n, r)
        reduced = ("i", r) if into_input else ("o", 0)
        if not into_input:
            xml.step(r, 0, "cpy", src=("i", r), dst=reduced)
        _reduce_gathered(xml, r, tbs, reduced)
        if into_input:
            xml.step(r, 0, "cpy", src=reduced, dst=("o", 0))
    return xml.text()


def mixed_input_reads(n: int) -> str:
    """allpairs_reducescatter into its input, then one step that copies the whole input (the reduced chunk and
    the untouched others) into scratch and one that takes the reduced chunk from there into the output."""
    xml = XmlWriter("mixed_input_reads", "reducescatter", n, "Simple", n, n, 1, s_chunks=2 * n - 1)
    for r in range(n):
        _reduce_gathered(xml, r, _gather_own_block(xml, n, r), ("i", r))
        xml.step(r, 0, "cpy", src=("i", 0), dst=("s", n - 1), cnt=n)
        xml.step(r, 0, "cpy", src=("s", n - 1 + r), dst=("o", 0))
    return xml.text()


def _gather_own_block(xml: XmlWriter, n: int, r: int) -> list[int]:
    """Rank r sends every peer its block and receives its own block from each into scratch chunk t, on thread
    block t of that peer; returns those thread blocks."""
    peers = [(r + d) % n for d in range(1, n)]
    tbs = [xml.tb(r, send=p, recv=p) for p in peers]
    for t, p in zip(tbs, peers):
        xml.step(r, t, "s", src=("i", p), dst=("s", t))
        xml.step(r, t, "r", src=("i", r), dst=("s", t))
    return tbs


def _reduce_gathered(xml: XmlWriter, r: int, tbs: list[int], reduced: tuple) -> None:
    """On thread block 0 of rank r, reduce the scratch chunks ``_gather_own_block`` received into ``reduced``, each
    after its thread block's receive."""
    xml.step(r, 0, "re", src=("s", 0), dst=reduced)
    for t in tbs[1:]:
        xml.step(r, 0, "re", src=("s", t), dst=reduced, dep=(t, 1))


def ring_reducescatter(n: int, proto: str = "LL") -> str:
    """Ring reduce-scatter with ``rrs`` (reduce and send on, storing nothing) and a final ``rrc``."""
    xml = XmlWriter(f"ring_reducescatter_{proto}", "reducescatter", n, proto, n, n, 1)
    for r in range(n):
        tb = xml.tb(r, send=(r + 1) % n, recv=(r - 1) % n)
        xml.step(r, tb, "s", src=("i", (r - 1) % n), dst=("i", (r - 1) % n))
        for step in range(n - 1):
            c = (r - step - 2) % n
            if step < n - 2:
                xml.step(r, tb, "rrs", src=("i", c), dst=("i", c))
            else:
                xml.step(r, tb, "rrc", src=("i", r), dst=("o", 0))
    return xml.text()


def allpairs_alltoall(n: int, proto: str = "Simple") -> str:
    xml = XmlWriter(f"allpairs_alltoall_{proto}", "alltoall", n, proto, n, n, n)
    for r in range(n):
        for p in [(r + d) % n for d in range(1, n)]:
            t = xml.tb(r, send=p, recv=p)
            xml.step(r, t, "s", src=("i", p), dst=("o", r))
            xml.step(r, t, "r", src=("i", r), dst=("o", p))
        xml.step(r, 0, "cpy", src=("i", r), dst=("o", r))
    return xml.text()
