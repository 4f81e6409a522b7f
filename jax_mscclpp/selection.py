"""Algorithm selection: (collective, platform, bytes per rank, world size) -> algorithm name.

The table is ordered; the first rule whose platform and size range match wins. ``algorithm=`` on a call and the
``JAX_MSCCLPP_ALGORITHM`` environment variable (one name, applied to every collective that knows it) override it.
A choice of ``"lax"`` means the call is lowered to the matching lax collective instead of ours.
"""

from __future__ import annotations

import dataclasses
import os

from ._types import ALGORITHMS_OF, Collective

# Algorithms each platform's backend runs.
PLATFORM_ALGORITHMS = {
    "cpu": {
        Collective.ALL_REDUCE: ("1pa_ll", "2pa_ll", "2pa_hb", "2ph"),
        Collective.ALL_GATHER: ("allpairs",),
        Collective.REDUCE_SCATTER: ("allpairs",),
        Collective.ALL_TO_ALL: ("allpairs",),
    },
    "gpu": {
        Collective.ALL_REDUCE: ("1pa_ll", "2pa_ll", "2pa_hb", "2pr", "2pa_nvls", "2ph"),
        Collective.ALL_GATHER: ("allpairs",),
        Collective.REDUCE_SCATTER: ("allpairs",),
        Collective.ALL_TO_ALL: ("allpairs",),
    },
}


@dataclasses.dataclass(frozen=True)
class Rule:
    collective: Collective
    platform: str
    max_bytes: int | None  # per-rank input bytes, inclusive; None = no limit
    algorithm: str


DEFAULT_TABLE = (
    Rule(Collective.ALL_REDUCE, "cpu", 16 * 1024, "1pa_ll"),
    Rule(Collective.ALL_REDUCE, "cpu", None, "2pa_hb"),
    Rule(Collective.ALL_GATHER, "cpu", None, "allpairs"),
    Rule(Collective.REDUCE_SCATTER, "cpu", None, "allpairs"),
    Rule(Collective.ALL_TO_ALL, "cpu", None, "allpairs"),
    # GPU: one LL hop for the latency-bound sizes, two LL phases up to 1 MiB, then bandwidth (HB).
    Rule(Collective.ALL_REDUCE, "gpu", 32 * 1024, "1pa_ll"),
    Rule(Collective.ALL_REDUCE, "gpu", 1 << 20, "2pa_ll"),
    Rule(Collective.ALL_REDUCE, "gpu", None, "2pa_hb"),
    Rule(Collective.ALL_GATHER, "gpu", None, "allpairs"),
    Rule(Collective.REDUCE_SCATTER, "gpu", None, "allpairs"),
    Rule(Collective.ALL_TO_ALL, "gpu", None, "allpairs"),
)


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


def choose(collective: Collective, platform: str, nbytes: int, requested: str | None) -> str:
    """The algorithm to run, or "lax" to emit the lax collective. Raises ValueError for a forced algorithm that
    this platform's backend does not run."""
    supported = PLATFORM_ALGORITHMS.get(platform, {}).get(collective, ())
    if requested is None:
        env = os.environ.get("JAX_MSCCLPP_ALGORITHM")
        if env and env in ALGORITHMS_OF[collective]:
            requested = env
    if requested is not None:
        if requested != "lax" and requested not in supported:
            raise ValueError(
                f"jax_mscclpp: algorithm {requested!r} does not run on platform {platform!r} for "
                f"{collective.name.lower()}; there it runs: {', '.join(supported) or 'none'} (or 'lax')"
            )
        return requested
    # Rules measured on this machine (``tuning.py``: JAX_MSCCLPP_TUNING_FILE or the topology's default file) first.
    for rule in (*_tuned_rules(platform), *DEFAULT_TABLE):
        if rule.collective == collective and rule.platform == platform:
            if rule.max_bytes is None or nbytes <= rule.max_bytes:
                return rule.algorithm
    return "lax"


def _tuned_rules(platform: str | None) -> tuple:
    from . import tuning

    return tuning.rules_for(platform)


def table() -> list[dict]:
    """The selection table, for ``info()``: tuned rules (consulted first) and then the defaults."""
    from . import tuning

    return [
        {
            "collective": r.collective.name.lower(),
            "platform": r.platform,
            "max_bytes": r.max_bytes,
            "algorithm": r.algorithm,
            "source": source,
        }
        for r, source in (*tuning.listed_rules(), *((r, "default") for r in DEFAULT_TABLE))
    ]
