"""The tuning file: algorithm choices measured on this machine, which ``selection.choose`` reads before its
default table (and the NCCL-API library too). Its text is read, and where it lies decided, by the one reader both
use (``runtime/select/tuning_file.h``, the native module's ``select``); this module keeps what is the JAX path's:
the topology of JAX's devices, when a file is read again (whenever it changed), what a file it cannot use is (an
error for the file the environment names, a warning for a default one), and the writer the tuner uses.

Where it is read from:

- ``JAX_MSCCLPP_TUNING_FILE=/path/file.json``: that file (a missing or unreadable file is an error, settings.py);
  ``JAX_MSCCLPP_TUNING_FILE=off`` (or ``none``, ``0``, ``false``): no file at all;
- otherwise (unset or empty) the default file of this topology, if it exists:
  ``<cache>/tuning/<platform>-<device kind>-<n>dev[-<p>proc].json`` where ``<cache>`` is ``JAX_MSCCLPP_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/jax_mscclpp``, else ``~/.cache/jax_mscclpp``. The NCCL-API library names the topology
  its communicator spans: the same name for a communicator over every device of the job.

``python -m jax_mscclpp.tools.tune`` writes it. Format (JSON, ``"format": "jax_mscclpp.tuning/1"``): ``rules`` is an
ordered list of ``{collective, platform, max_bytes, algorithm}`` (plus ``min_bytes``, ``margin`` and ``runner_up``,
for people) with selection's meaning: per-rank input bytes, inclusive upper bound (an integer, at least 0), first
match wins; ``null`` max_bytes means no limit. Sizes past the last rule's bound fall through to the default table.
Rules naming an algorithm this build does not run on that platform are ignored with a warning.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import warnings

from ._jax_mscclpp import select as _select

FORMAT = _select.TUNING_FORMAT
ENV_FILE = "JAX_MSCCLPP_TUNING_FILE"
ENV_CACHE_DIR = "JAX_MSCCLPP_CACHE_DIR"

_lock = threading.Lock()
_loaded: dict = {}  # path -> (stat signature, rules)
_warned: set = set()
_topologies: dict = {}


def _named_file() -> str | None:
    """The file JAX_MSCCLPP_TUNING_FILE names, "" when it says off; None when it is unset or empty (both mean: the
    default file)."""
    return _select.named_tuning_file()


def cache_dir() -> str:
    """Where the tuning files live (``<cache>`` above)."""
    return _select.cache_dir()


def topology_name(platform: str, device_kind: str, devices: int, processes: int) -> str:
    """``<platform>-<device kind>-<n>dev`` (``-<p>proc`` with several processes), the kind lower-cased with each run
    of other characters than letters and digits one dash (the NCCL-API library's name, by the same code)."""
    return _select.topology_name(platform, device_kind, devices, processes)


def _jax_devices(platform: str):
    import jax

    names = {"cuda": ("cuda", "gpu"), "rocm": ("rocm", "gpu")}.get(platform, (platform,))
    for name in names:
        try:
            return jax.devices(name)
        except RuntimeError:
            continue
    return []


def topology(platform: str) -> str | None:
    """``<platform>-<device kind>-<n>dev`` (``-<p>proc`` with several processes), or None when JAX has no device
    of ``platform``."""
    if platform in _topologies:
        return _topologies[platform]
    import jax

    devices = _jax_devices(platform)
    if not devices:
        return None
    name = topology_name(platform, devices[0].device_kind, len(devices), jax.process_count())
    _topologies[platform] = name
    return name


def default_file_of(topology_name: str) -> str:
    """The default selection file of the topology named ``topology_name``."""
    return _select.default_tuning_file(topology_name)


def default_path(platform: str) -> str | None:
    """The default selection file of this machine's ``platform`` topology (None when there is no device)."""
    name = topology(platform)
    return None if name is None else default_file_of(name)


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # noqa: BLE001
        return False


def active_path(platform: str | None) -> str | None:
    """The selection file ``choose`` reads for ``platform``, or None. Without ``JAX_MSCCLPP_TUNING_FILE`` and
    before JAX has started (or with no platform), there is none: finding the default needs the devices."""
    named = _named_file()
    if named is not None:
        return named or None
    if platform is None or not _backends_started():
        return None
    path = default_path(platform)
    return path if path and os.path.exists(path) else None


def _warn_once(key, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _to_rules(text: str, path: str) -> tuple:
    """The rules of a selection file's text that this build runs where they say (ValueError for text not of the
    format); the others are dropped with a warning."""
    from ._types import PLATFORM_ALGORITHMS
    from .selection_table import rule_of

    runs = {platform: {int(c): list(names) for c, names in by_collective.items()}
            for platform, by_collective in PLATFORM_ALGORITHMS.items()}
    kept, skipped = _select.parse_tuning_file(text, runs)
    for rule in map(rule_of, skipped):
        _warn_once(
            (path, rule.collective, rule.platform, rule.algorithm),
            f"jax_mscclpp: {path}: ignoring rule {rule.collective.name.lower()} -> {rule.algorithm!r}: this build "
            f"does not run it on {rule.platform!r}",
        )
    return tuple(map(rule_of, kept))


def load_rules(path: str, named: bool = False) -> tuple:
    """The rules of the selection file at ``path`` (cached until the file changes). ``named``: the path is
    JAX_MSCCLPP_TUNING_FILE's value, and a file that does not exist or cannot be read is a ValueError (one policy
    for environment values, settings.py); otherwise (the per-topology default file) () with a warning once."""
    try:
        st = os.stat(path)
    except OSError:
        if named:
            raise ValueError(f"jax_mscclpp: {ENV_FILE}={path!r} is not understood: the file does not exist; "
                             "accepted: the path of a selection file (python -m jax_mscclpp.tools.tune writes one) "
                             "or off")
        _warn_once((path, "missing"), f"jax_mscclpp: {ENV_FILE}={path} does not exist; using the default table")
        return ()
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _lock:
        cached = _loaded.get(path)
        if cached and cached[0] == signature:
            return cached[1]
    try:
        with open(path) as f:
            rules = _to_rules(f.read(), path)
    except (OSError, ValueError) as e:
        if named:
            raise ValueError(f"jax_mscclpp: {ENV_FILE}={path!r} is not understood: cannot read the selection file "
                             f"({e}); accepted: the path of a selection file (python -m jax_mscclpp.tools.tune writes "
                             "one) or off") from e
        _warn_once((path, signature), f"jax_mscclpp: cannot read the selection file {path}: {e}; using the default table")
        rules = ()
    with _lock:
        _loaded[path] = (signature, rules)
    return rules


def rules_for(platform: str | None) -> tuple:
    """Tuned rules that apply to ``platform`` (all platforms when None), in file order."""
    path = active_path(platform)
    if path is None:
        return ()
    rules = load_rules(path, named=_named_file() is not None)
    return rules if platform is None else tuple(r for r in rules if r.platform == platform)


def listed_rules() -> list:
    """(rule, file) for every tuned rule in force, for ``selection.table()``: the JAX_MSCCLPP_TUNING_FILE's, or
    (once JAX has started) each platform's default file's."""
    from ._types import PLATFORM_ALGORITHMS

    if _named_file() is not None:
        path = active_path(None)
        return [(r, path) for r in load_rules(path)] if path else []
    out = []
    for platform in PLATFORM_ALGORITHMS:
        path = active_path(platform)
        if path:
            out.extend((r, path) for r in load_rules(path) if r.platform == platform)
    return out


def write(path: str, doc: dict) -> str:
    """Writes ``doc`` to ``path`` atomically (a reader never sees half a file)."""
    doc = {"format": FORMAT, **doc}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


def rules_from_winners(collective: str, platform: str, winners) -> list[dict]:
    """Merges per-size winners ``[(bytes, algorithm, margin, runner_up)]`` (any order) into rules: a run of sizes
    with one winner becomes one rule up to its largest size; its margin is the smallest in the run."""
    rules: list[dict] = []
    for nbytes, algorithm, margin, runner_up in sorted(winners):
        if rules and rules[-1]["algorithm"] == algorithm:
            rule = rules[-1]
            rule["max_bytes"] = nbytes
            if margin is not None and (rule["margin"] is None or margin < rule["margin"]):
                rule["margin"], rule["runner_up"] = margin, runner_up
        else:
            rules.append({
                "collective": collective, "platform": platform, "min_bytes": nbytes, "max_bytes": nbytes,
                "algorithm": algorithm, "margin": margin, "runner_up": runner_up,
            })
    return rules


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
