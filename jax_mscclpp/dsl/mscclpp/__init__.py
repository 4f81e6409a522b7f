"""MSCCL++'s DSL (``mscclpp.language``) as a front end of ours: a program written for MSCCL++ runs here with
its imports changed from ``mscclpp.language`` to ``jax_mscclpp.dsl.mscclpp`` (and ``mscclpp.language.X`` to
``jax_mscclpp.dsl.mscclpp.X``).

Both of MSCCL++'s APIs are here: the channel API (``program.CollectiveProgram``, ``channel.MemoryChannel``,
``PortChannel``, ``SwitchChannel``, ``rank.Rank``, ``rank.Buffer``, ``general.JSON``) and the chunk API
(``MSCCLPPProgram``, ``chunk``, ``rank``, ``Json``, ``Check``, ``buffer.Buffer``, ``types.ChannelType``). A
program records its calls while it is written and is translated as a whole (translate.py) into our Program,
which lowers, fuses, places barriers and verifies as ours do:

* ``program.to_program()``: our Program (``jax_mscclpp.dsl.Program``);
* ``program.plan()``: its verified execution plan, replicated ``instances`` times, for
  ``jax_mscclpp.dsl.simulate.run_plan``; ``jax_mscclpp.register_algorithm`` takes the program itself, a function
  of the world size returning one, or the plan;
* ``program.to_json()`` (``JSON()``, ``Json()``): that plan in MSCCL++'s executor JSON format.

A call with no counterpart in our plans (a get, a remote read, a put into a peer's input or output, packets on a
port channel, loops, ...) raises ``UnsupportedConstruct`` naming the call and the reason; docs/
bringing_algorithms.md, "From MSCCL++ (its DSL)", has the table.
"""

from . import buffer, channel, collectives, general, rank, types, utils  # noqa: F401 (MSCCL++'s submodules)
from .errors import UnsupportedConstruct
from .program import Check, CollectiveProgram, Json, MSCCLPPProgram, chunk
from .program import rank  # noqa: F811 (the chunk API's rank(r), over the submodule's name, as in MSCCL++)
from .utils import AlgoSpec, ReplicationPolicy

__all__ = ["AlgoSpec", "Check", "CollectiveProgram", "Json", "MSCCLPPProgram", "ReplicationPolicy",
           "UnsupportedConstruct", "chunk", "rank"]
