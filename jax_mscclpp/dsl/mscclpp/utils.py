"""``mscclpp.language.utils``: the replication policy and the algorithm specification."""

from __future__ import annotations

import dataclasses
from enum import Enum

__all__ = ["AlgoSpec", "ReplicationPolicy"]


class ReplicationPolicy(Enum):
    """How ``instances`` copies of a program share the buffers. Every policy lowers to our replication
    (PLAN.md, "How lowering builds a plan": instance i takes its own chunks of every block, thread blocks and
    channels), which computes the same collective; the chunk order inside a block may differ from MSCCL++'s."""

    duplicated = "duplicated"
    interleaved = "interleaved"
    packed = "packed"
    none = "none"

    def __str__(self):
        return self.value


@dataclasses.dataclass(frozen=True)
class AlgoSpec:
    """The parameters of ``CollectiveProgram.from_spec``, as MSCCL++ names them."""

    name: str
    collective: object
    nranks_per_node: int
    world_size: int
    in_place: bool
    instances: int
    protocol: str
    instr_fusion: bool = True
    auto_sync: bool = True
    replication_policy: ReplicationPolicy = ReplicationPolicy.interleaved
    reuse_resources: bool = False
    num_threads_per_block: int = 1024
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = 16
    min_message_size: int = 0
    max_message_size: int = 2**64 - 1
    tags: dict = dataclasses.field(default_factory=dict)
