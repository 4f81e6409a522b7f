"""A pure-Python DSL for collective communication algorithms, lowered to JSON execution plans.

Write a collective once for all ranks (``Program``), move chunks through typed channels (``MemoryChannel``,
``PortChannel``, ``SwitchChannel``), place operations on thread blocks, and ``lower()`` it to a plan that the
native executors interpret. Lowering fuses operations, places barriers and runs ``verify``, which proves the
collective's postcondition and reports races, deadlocks and bad chunks as ``VerificationError``. The plan
schema is documented in PLAN.md next to this file. ``run_plan`` (numpy) executes a plan on real data.

Nothing here imports jax or native code; ``run_plan`` alone needs numpy, imported on first use.
"""

from . import library
from .channels import MemoryChannel, PortChannel, SwitchChannel, all_pairs
from .errors import OpLocation, VerificationError
from .load_plan import load_plan
from .plan_format import PLAN_VERSION, plan_from_json, plan_to_json, validate_plan
from .program import Buffer, Chunk, Program, Rank, ThreadBlockGroup, verify


def __getattr__(name: str):
    if name == "run_plan":
        from .simulate import run_plan

        return run_plan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PLAN_VERSION",
    "Buffer",
    "Chunk",
    "MemoryChannel",
    "OpLocation",
    "PortChannel",
    "Program",
    "Rank",
    "SwitchChannel",
    "ThreadBlockGroup",
    "VerificationError",
    "all_pairs",
    "library",
    "load_plan",
    "plan_from_json",
    "plan_to_json",
    "run_plan",
    "validate_plan",
    "verify",
]
