"""``mscclpp.language.program``: the two program classes of MSCCL++'s DSL, ``CollectiveProgram`` (the channel
API) and ``MSCCLPPProgram`` (the chunk API, with its functions ``chunk``, ``rank``, ``Json`` and ``Check``).

Both are used as ``with Program(...):`` blocks and give, once written, ``to_program()`` (our Program),
``plan()`` (its verified plan, replicated ``instances`` times) and ``to_json()`` (MSCCL++'s executor JSON).
"""

from __future__ import annotations

from collections import defaultdict

from .chunk_api import Check, Json, chunk, rank
from .collectives import CHANNEL_API, CHUNK_API
from .frontend import FrontEndProgram
from .utils import AlgoSpec, ReplicationPolicy

__all__ = ["Check", "CollectiveProgram", "Json", "MSCCLPPProgram", "chunk", "rank"]


class CollectiveProgram(FrontEndProgram):
    """A program of the channel API. ``auto_sync``, ``reuse_resources`` and ``buffer_alignment`` are accepted
    and have no effect: our lowering places barriers itself and the executors align chunks themselves."""

    api = CHANNEL_API

    def __init__(self, name, collective, num_ranks, instances=1, protocol="Simple", instr_fusion=True,
                 auto_sync=True, replication_policy=ReplicationPolicy.interleaved, reuse_resources=False,
                 num_threads_per_block=1024, use_double_scratch_buffer=False, buffer_alignment=16,
                 min_message_size=0, max_message_size=2**64 - 1):
        super().__init__(name, collective, num_ranks, instances, protocol, instr_fusion, replication_policy,
                         num_threads_per_block, use_double_scratch_buffer, min_message_size, max_message_size,
                         auto_sync=auto_sync, reuse_resources=reuse_resources, buffer_alignment=buffer_alignment)
        # (channel type, src rank, dst rank) -> endpoints made so far (channel.py pairs them by this count)
        self.endpoints_made = defaultdict(int)

    @classmethod
    def from_spec(cls, spec: AlgoSpec) -> CollectiveProgram:
        return cls(spec.name, spec.collective, spec.world_size, instances=spec.instances, protocol=spec.protocol,
                   instr_fusion=spec.instr_fusion, auto_sync=spec.auto_sync,
                   replication_policy=spec.replication_policy, reuse_resources=spec.reuse_resources,
                   num_threads_per_block=spec.num_threads_per_block,
                   use_double_scratch_buffer=spec.use_double_scratch_buffer, buffer_alignment=spec.buffer_alignment,
                   min_message_size=spec.min_message_size, max_message_size=spec.max_message_size)


class MSCCLPPProgram(FrontEndProgram):
    """A program of the chunk API (``chunk(rank, Buffer.x, index, size).put(...)``)."""

    api = CHUNK_API

    def __init__(self, name, collective, num_ranks, instances, protocol="Simple", instr_fusion=True,
                 replication_policy=ReplicationPolicy.duplicated, num_threads_per_block=1024,
                 use_double_scratch_buffer=False, min_message_size=0, max_message_size=2**64 - 1):
        super().__init__(name, collective, num_ranks, instances, protocol, instr_fusion, replication_policy,
                         num_threads_per_block, use_double_scratch_buffer, min_message_size, max_message_size)
