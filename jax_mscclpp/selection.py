"""Which algorithm runs a call: the one owner of that decision (``decide``), and the size table behind it.

Order of precedence, for one call of a collective on a platform:

1. ``algorithm=`` on the call, else ``JAX_MSCCLPP_ALGORITHM`` when it names an algorithm of this collective or a
   plan registered for it on this platform (the variable applies to every collective that knows the name; a name
   no collective knows is a ValueError, ``settings.forced_algorithm``);
2. a registered DSL plan (``plans.py``): the requested one, else the first whose size range covers the call and
   that runs on this communicator;
3. the rules measured on this machine (the tuning file, ``tuning_file.py``), then ``DEFAULT_TABLE``: the first
   rule whose collective, platform, world size and size range match. The match is the native rule matcher's
   (``runtime/select``, the module's ``select``), the one the NCCL-API library asks too;
4. ``"lax"`` (also what a rule may say): the lax collective is emitted instead of ours, and so it is whenever the
   communicator cannot run here (``Communicator.fallback_reason``). Between ranks that share a GPU
   (``Communicator.shares_gpus``) selection.def's shared-GPU rows, measured on one GPU, decide before its other
   rules; ``auto`` never emits lax where lax cannot run (``lax_runnable``: processes sharing one GPU): there the
   tuning file's first rule of ours, else those rows, decide.

The GPU rules of ``DEFAULT_TABLE`` come from measurements on two H200s joined by NVLink
(``bench/results/``, docs/benchmarking.md): ours where it was faster than lax in the same run, lax elsewhere, so
that ``auto`` is never slower than lax there. For world sizes not measured, only the small-message rules (one
LL hop, latency-bound) apply and the rest stays lax.
"""

from __future__ import annotations

import dataclasses

from . import selection_table, settings
from ._jax_mscclpp import select as _select
from ._types import ALGORITHMS_OF, COMPOSED_ALGORITHMS, PLATFORM_ALGORITHMS, Collective

# Whether XLA may record a GPU call into its command buffers (CUDA graphs; settings.command_buffers): "1" always,
# "0" never, unset: calls of more than GRAPH_MIN_BYTES per rank only (docs/architecture.md, "Command buffers", has
# the measurements).
GRAPH_MIN_BYTES = 1 << 20


# The built-in rules: kernels/include/jax_mscclpp/selection.def, shared with the NCCL-API library (a view of the
# matcher's rows, selection_table.py).
DEFAULT_TABLE = selection_table.DEFAULT_TABLE


@dataclasses.dataclass(frozen=True)
class Decision:
    """How one call is lowered: ``kind`` is "native" (one of our kernels, ``algorithm``), "plan" (a registered
    plan, ``plan`` and ``plan_dict``), "composed" (``algorithm`` built from other collectives) or "lax";
    ``reason``: why (what ``explain`` says), not part of the decision's value."""

    kind: str
    algorithm: str
    plan: object = None
    plan_dict: dict | None = None
    reason: str = dataclasses.field(default="", compare=False)


# Why a call of ``decide`` runs what it runs (``Decision.reason``, shown by ``explain``).
GRADIENT_TREE_REASON = ("the large leaves of a gradient-like pytree sum run lax's all-reduce, which XLA overlaps "
                        "with the backward pass")
LAX_CANNOT_RUN_REASON = ("lax cannot run here (processes share a GPU): the tuning file's first rule of ours for the "
                         "call, else selection.def's rows for ranks that share a GPU")
SHARED_GPU_ROWS = ", its rows for ranks that share a GPU first"


def _requested_reason(requested: str, algorithm: str | None) -> str:
    """Why ``requested`` runs: asked for by ``algorithm=`` or by JAX_MSCCLPP_ALGORITHM."""
    return f"algorithm={requested!r} asked for" if algorithm is not None else f"{settings.ENV_ALGORITHM}={requested}"


def _table_reason(platform: str) -> str:
    """The rules ``choose`` matched: the tuning file's (when it has rules for ``platform``), then selection.def's."""
    return ("the selection table (the tuning file's rules, then selection.def)" if _tuned_rules(platform)
            else "the selection table (selection.def)")


# The dtypes of the fused all-reduce epilogue kernels (collectives/epilogue.h).
EPILOGUE_DTYPES = ("float32", "bfloat16", "float16")


def fuses(world: int, algorithm: str | None, dtype: str, communicator, kernel_takes) -> object | None:
    """Whether a fused all-reduce epilogue (``jax_mscclpp.fused``) runs as its one GPU kernel: the communicator to
    run it on, or None for the composition (our psum, then the add and the norm). The kernel runs under the
    runtime's choice only (a forced algorithm runs the composition with it), over two ranks or more, on a float
    dtype, where ``communicator()`` gives one that does not fall back to lax, and where ``kernel_takes(comm)``
    (the kernel's own limits of size, row and scratch)."""
    if algorithm is not None or world < 2 or dtype not in EPILOGUE_DTYPES:
        return None
    comm = communicator()
    if comm is None or comm.fallback_reason is not None or not kernel_takes(comm):
        return None
    return comm


def protocol_of(algorithm: str, platform: str, block_bytes: int, *, collective: Collective, world: int,
                shares_gpu: bool) -> str | None:
    """The algorithm ``algorithm`` runs as on ``platform`` for a call of ``collective`` with blocks of
    ``block_bytes`` bytes on ``world`` ranks, which share a GPU or not (``allpairs`` -> ``allpairs_ll`` or
    ``allpairs_hb`` on GPUs, by selection.def's protocol rows), or None where it is its own."""
    placement = selection_table.PLACEMENT_CODES["shared_gpu" if shares_gpu else "own_gpu"]
    return _select.protocol_of(algorithm, platform, block_bytes, int(collective), world, placement)


def in_command_buffers(nbytes: int, between_processes: bool = False) -> bool:
    """Whether a GPU call of ``nbytes`` per rank is emitted command-buffer compatible (JAX_MSCCLPP_COMMAND_BUFFERS,
    read at lowering). A recorded call costs a re-trace whenever XLA updates the command buffer holding it (every
    step whose input or output buffers moved), which outweighs a small call's kernel; a large call's kernel hides it.
    Unset, not on a communicator whose ranks are of several processes (``between_processes``): a recorded call
    never runs in place on XLA's buffers there (runtime/gpu/call.cc: the ranks agree per call, which a replay
    skips), and a large call gains more in place than a replay saves. Never where failing kernels stop
    (``settings.stops_on_failure``): a recorded call replays without its handler, which refuses every call of a
    rank whose kernel failed."""
    value = settings.command_buffers()
    if settings.stops_on_failure():
        return False
    return value == "1" or (value == "" and nbytes > GRAPH_MIN_BYTES and not between_processes)


# A sum of a pytree with at least GRADIENT_TREE_LEAVES leaves of their own calls (collectives.has_own_call),
# totalling GRADIENT_TREE_BYTES per rank, is taken for a gradient sum after jax.grad. XLA runs its own all-reduces
# of such a tree asynchronously, beside the backward pass, where our calls would run on the compute stream after
# it: on two H200s, jm.psum of a training step's gradients was 0.95x lax at 128 MiB and 1.00x at 1 GiB
# (bench/results/train-x2-2026-11-29-final.json). So auto emits lax for those leaves; value_and_psum_grad is
# the way to have ours overlap them (docs/architecture.md, "Overlap").
GRADIENT_TREE_LEAVES = 2
GRADIENT_TREE_BYTES = 64 << 20


# What tree_sum_algorithm gives the large leaves of a gradient-like sum: lax's all-reduce where lax can run
# (``lax_runnable``), else the table's choice; decided at lowering, where the communicator is known.
GRADIENT_TREE_LAX = "auto:lax"


def tree_sum_algorithm(algorithm: str | None, own_call_bytes: list[int]) -> str | None:
    """The algorithm for the large leaves of one psum of a pytree (``own_call_bytes``: their bytes per rank):
    ``GRADIENT_TREE_LAX`` when nothing asked for an algorithm and the tree looks like a gradient sum, else
    ``algorithm``."""
    if algorithm is not None or settings.forced_algorithm():
        return algorithm
    if len(own_call_bytes) >= GRADIENT_TREE_LEAVES and sum(own_call_bytes) >= GRADIENT_TREE_BYTES:
        return GRADIENT_TREE_LAX
    return None


def nccl_api_active() -> bool:
    """Whether our NCCL-API library is what XLA's collectives call in this process and runs them on our runtime
    (``nccl_backend.runs_collectives``), so that lax's collectives run wherever ours do."""
    from . import nccl_backend

    return nccl_backend.runs_collectives()


def lax_runnable(communicator) -> bool:
    """Whether lax's collectives can run over ``communicator``'s devices, so that ``auto`` may emit them: not where
    several processes drive one physical GPU (``Communicator.shares_gpus``: NCCL refuses two ranks on one device,
    "Duplicate GPU detected"), unless ``nccl_api_active()``."""
    return not getattr(communicator, "shares_gpus", False) or nccl_api_active()


def _matched(collective: Collective, platform: str, nbytes: int, world: int | None, lax_runs: bool,
             shares_gpu: bool = False) -> str:
    """The matcher's algorithm for this call: the tuned rules, then (``shares_gpu``: ranks that share a GPU)
    selection.def's shared-GPU rows, then its rules (``lax_runs`` False: a lax rule decides nothing, and without a
    rule of ours the shared-GPU rows' algorithm runs if this platform runs it)."""
    return _select.choose(_tuned_rules(platform), int(collective), platform, nbytes, world, lax_runs, shares_gpu)


def _ours_where_lax_cannot_run(collective: Collective, platform: str, nbytes: int, world: int | None) -> str:
    """The algorithm where lax cannot run, i.e. between processes that share a GPU: the first tuned rule for this
    call that is not lax, else selection.def's shared-GPU rows."""
    return _matched(collective, platform, nbytes, world, lax_runs=False, shares_gpu=True)


def requested_algorithm(collective: Collective, platform: str, algorithm: str | None) -> str | None:
    """``algorithm`` if given, else JAX_MSCCLPP_ALGORITHM when it means something for this collective here."""
    from . import plans

    if algorithm is not None:
        return algorithm
    name = settings.forced_algorithm()
    if name is None or name in ALGORITHMS_OF[collective]:
        return name
    entry = plans.registered(name)
    return name if entry is not None and entry.collective == collective and platform in entry.platforms else None


def choose(collective: Collective, platform: str, nbytes: int, requested: str | None, world: int | None = None,
           shares_gpu: bool = False) -> str:
    """The built-in algorithm to run (or "lax"), from ``requested`` or the rules (``shares_gpu``: for ranks that
    share a GPU). Raises ValueError for a forced algorithm that this platform's backend does not run."""
    supported = PLATFORM_ALGORITHMS.get(platform, {}).get(collective, ())
    if requested is not None:
        if requested != "lax" and requested not in supported:
            raise ValueError(
                f"jax_mscclpp: algorithm {requested!r} does not run on platform {platform!r} for "
                f"{collective.name.lower()}; there it runs: {', '.join(supported) or 'none'} (or 'lax')"
            )
        return requested
    return _matched(collective, platform, nbytes, world, lax_runs=True, shares_gpu=shares_gpu)


def decide(collective: Collective, platform: str, *, nbytes: int, world: int, block_count: int, itemsize: int,
           algorithm: str | None, communicator, permutation=None) -> Decision:
    """How to lower one call. ``communicator()`` returns the call's Communicator (made on first use; only called
    when one of our algorithms may run); ``permutation``: the permutation's (source, destination) pairs, which a
    registered plan of it must implement."""
    from . import plans

    gradient_tree = algorithm == GRADIENT_TREE_LAX
    requested = None if gradient_tree else requested_algorithm(collective, platform, algorithm)
    wants_plan = plans.registered(requested) is not None
    if wants_plan or (requested is None and not gradient_tree and plans.registered_for(collective, platform)):
        comm = communicator()
        if comm.fallback_reason is None:
            # The host backend has every port channel; on GPUs they exist only if the communicator was made so.
            port_channels = platform == "cpu" or comm.port_channels
            picked = plans.pick(collective, platform, requested, nbytes, world, block_count, itemsize,
                                comm.scratch_bytes, port_channels, permutation)
            if picked is not None:
                reason = (_requested_reason(requested, algorithm) if wants_plan
                          else "a registered plan covers this call")
                return Decision("plan", picked[0].name, picked[0], picked[1], reason)
        if wants_plan:  # a requested plan whose communicator falls back to lax
            return Decision("lax", "lax", reason=comm.fallback_reason or "the requested plan does not fit this call")
    if gradient_tree and lax_runnable(communicator()):
        chosen, reason = "lax", GRADIENT_TREE_REASON
    elif requested is not None:
        chosen, reason = choose(collective, platform, nbytes, requested, world), _requested_reason(requested, algorithm)
    elif not lax_runnable(communicator()):
        chosen, reason = _ours_where_lax_cannot_run(collective, platform, nbytes, world), LAX_CANNOT_RUN_REASON
    else:
        shares_gpu = platform == "gpu" and getattr(communicator(), "shares_gpus", False)
        chosen = choose(collective, platform, nbytes, None, world, shares_gpu)
        reason = _table_reason(platform) + (SHARED_GPU_ROWS if shares_gpu else "")
    if chosen in COMPOSED_ALGORITHMS:
        return Decision("composed", chosen, reason=reason)
    if chosen != "lax" and communicator().fallback_reason is not None:
        return Decision("lax", "lax", reason=communicator().fallback_reason)
    if chosen == "lax":
        return Decision("lax", "lax", reason=reason)
    if platform == "gpu":
        # What the algorithm needs of the communicator beyond memory channels (codes.def's `needs`, checked by the
        # native matcher's one check: runtime/select/rules.h, missing_need).
        missing = _select.missing_need(chosen, world, communicator().port_channels)
        if missing == "port channels":
            raise ValueError(f"jax_mscclpp: algorithm {chosen!r} needs port channels: create the communicator with "
                             "Communicator(mesh, axes, port_channels=True) before the first call")
        if missing is not None:
            raise ValueError(f"jax_mscclpp: algorithm {chosen!r} needs {missing}, which a GPU communicator of "
                             f"{world} ranks does not have")
    return Decision("native", chosen, reason=reason)


def check_algorithm(collective: Collective, algorithm: str | None, api_name: str) -> None:
    """Raises ValueError unless ``algorithm`` is None, a name ``collective`` knows, or a registered plan."""
    from . import plans

    if algorithm is None or algorithm in ALGORITHMS_OF[collective]:
        return
    entry = plans.registered(algorithm)
    if entry is not None and entry.collective == collective:
        return
    registered = [p.name for p in plans.registered_for(collective, None)]
    raise ValueError(
        f"{api_name}: unknown algorithm {algorithm!r}; {collective.name.lower()} knows "
        f"{', '.join(ALGORITHMS_OF[collective] + tuple(registered))}"
    )


def _tuned_rules(platform: str | None) -> tuple:
    from . import tuning_file

    return tuning_file.rules_for(platform)


def table() -> list[dict]:
    """The selection table, for ``info()``, in the order ``decide`` consults it: the registered DSL algorithms
    (a row per platform; chosen for sizes from ``min_bytes`` to ``max_bytes``), the tuned rules, the defaults."""
    from . import plans, tuning_file

    registered = [
        {
            "collective": p.collective.name.lower(),
            "platform": platform,
            "world": None,
            "min_bytes": p.min_bytes,
            "max_bytes": p.max_bytes,
            "algorithm": p.name,
            "source": "registered",
        }
        for c in Collective for p in plans.registered_for(c, None) for platform in p.platforms
    ]
    return registered + [
        {
            "collective": r.collective.name.lower(),
            "platform": r.platform,
            "world": r.world,
            "max_bytes": r.max_bytes,
            "algorithm": r.algorithm,
            "source": source,
        }
        for r, source in (*tuning_file.listed_rules(), *((r, "default") for r in DEFAULT_TABLE))
    ]
