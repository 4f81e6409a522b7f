"""``mscclpp.language.utils``: the replication policy and the algorithm specification."""

from __future__ import annotations

import dataclasses

from .types import ReplicationPolicy

__all__ = ["AlgoSpec", "ReplicationPolicy"]


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
