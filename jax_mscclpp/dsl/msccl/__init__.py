"""MSCCLang, the chunk-routing language of msccl-tools, as a front end of the DSL.

A program written for MSCCLang runs with its imports changed: ``from msccl.language import *`` becomes
``from jax_mscclpp.dsl.msccl import *``, ``msccl.language.collectives`` becomes
``jax_mscclpp.dsl.msccl.collectives`` and ``msccl.topologies`` becomes ``jax_mscclpp.dsl.msccl.topologies``.
Inside ``with MSCCLProgram(...):``, ``chunk()`` references move by ``copy`` and ``reduce``; ``Check()`` checks the
collective's postcondition and verifies the lowered plan, ``XML()`` prints MSCCL-IR. Outside, the program's
``lower()`` is an execution plan (PLAN.md) for ``verify``, ``run_plan`` and ``jax_mscclpp.register_algorithm``,
which also takes the MSCCLProgram itself or a function of the world size returning one. program.py says how.
"""

from . import collectives, topologies
from .buffers import Buffer, Chunk, ReduceChunk
from .collectives import AllGather, AllReduce, AllToAll, Collective, ReduceScatter
from .program import PROTOCOLS, Check, MSCCLProgram, ThreadblockPolicy, XML, chunk, create_scratch
from .refs import ChunkRef, Ref

__all__ = [
    "PROTOCOLS",
    "AllGather",
    "AllReduce",
    "AllToAll",
    "Buffer",
    "Check",
    "Chunk",
    "ChunkRef",
    "Collective",
    "MSCCLProgram",
    "ReduceChunk",
    "ReduceScatter",
    "Ref",
    "ThreadblockPolicy",
    "XML",
    "chunk",
    "collectives",
    "create_scratch",
    "topologies",
]
