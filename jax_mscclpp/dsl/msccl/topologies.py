"""Topologies: which ranks a program may send between. ``links[dst][src]`` is the bandwidth of the link from
``src`` to ``dst`` (0: none). A transfer over a missing link is refused when the program is written; the plan
itself does not depend on the topology (every pair of ranks of a communicator can reach each other)."""

from __future__ import annotations


class Topology:
    """``num_nodes()`` ranks joined by ``links`` (``links[dst][src]``); ``switches`` lists (sources,
    destinations, bandwidth, name) groups sharing a switch, kept for reference."""

    def __init__(self, name: str, links: list, switches: list | None = None):
        n = len(links)
        if n < 1 or any(len(row) != n for row in links):
            raise ValueError(f"topology {name}: links must be a square matrix, got {links!r}")
        self.name = name
        self.links = links
        self.switches = list(switches or [])

    def link(self, src: int, dst: int):
        """The bandwidth of the link from ``src`` to ``dst`` (0 when there is none)."""
        return self.links[dst][src]

    def num_nodes(self) -> int:
        return len(self.links)

    def nodes(self) -> range:
        return range(self.num_nodes())

    def sources(self, dst: int):
        return (src for src, bandwidth in enumerate(self.links[dst]) if bandwidth > 0)

    def destinations(self, src: int):
        return (dst for dst, row in enumerate(self.links) if row[src] > 0)

    def __repr__(self) -> str:
        return self.name


def _topology(name: str, n: int, linked) -> Topology:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} needs a positive number of nodes, got {n!r}")
    return Topology(f"{name}(n={n})", [[1 if linked(src, dst) else 0 for src in range(n)] for dst in range(n)])


def fully_connected(num_nodes: int) -> Topology:
    """Every rank linked to every other."""
    return _topology("FullyConnected", num_nodes, lambda src, dst: src != dst)


def ring(num_nodes: int) -> Topology:
    """Rank i linked both ways to i-1 and i+1, modulo the rank count."""
    return _topology("Ring", num_nodes, lambda src, dst: src != dst and (src - dst) % num_nodes in (1, num_nodes - 1))


def line(num_nodes: int) -> Topology:
    """Rank i linked both ways to i-1 and i+1, without wrapping around."""
    return _topology("Line", num_nodes, lambda src, dst: abs(src - dst) == 1)


def star(num_nodes: int) -> Topology:
    """Rank 0 linked both ways to every other rank."""
    return _topology("Star", num_nodes, lambda src, dst: src != dst and 0 in (src, dst))
