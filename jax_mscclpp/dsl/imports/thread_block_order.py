"""Ordering between thread blocks of one rank, as foreign plans express it (MSCCL-IR ``depid``/``deps``) and as
the prologue that moves a rank's input needs it (``input_places.py``): a memory channel from the rank to itself
per (producer, consumer) pair of thread blocks. The producer signals after the step the consumer needs; the
consumer waits before the step that needs it. A signal releases everything the producer wrote before it and the
wait acquires it (PLAN.md, "Execution model").
"""

from __future__ import annotations

from ..channels import MemoryChannel
from ..program import Program


class ThreadBlockOrder:
    """The self channels of one program, made on first use."""

    def __init__(self, program: Program):
        self.program = program
        self._pipes: dict[tuple[int, int, int], MemoryChannel] = {}

    def _pipe(self, rank: int, producer: int, consumer: int) -> MemoryChannel:
        key = (rank, producer, consumer)
        if key not in self._pipes:
            self._pipes[key] = MemoryChannel(self.program, rank, rank, "HB")
        return self._pipes[key]

    def signal(self, rank: int, producer: int, consumer: int) -> None:
        """On ``producer``: everything done so far is released to ``consumer``'s next wait."""
        self._pipe(rank, producer, consumer).signal(tb=producer)

    def wait(self, rank: int, producer: int, consumer: int) -> None:
        """On ``consumer``: wait for ``producer``'s next signal."""
        self._pipe(rank, producer, consumer).wait(tb=consumer)
