"""What the native-harness benchmarks of this folder share: the environment they run in (set on import, before CUDA
or JAX start: ``_environment.py``'s, and JAX on the CPU unless told otherwise, since they run no JAX computation on
the GPU) and where their JSON goes (bench/results/<kind>-<date>.json)."""

import datetime
import json
import os

from _environment import REPO

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def write_result(result: dict, kind: str, out: str | None = None) -> str:
    """Writes ``result`` to ``out`` (default: bench/results/<kind>-<today>.json); returns the path."""
    out = out or os.path.join(REPO, "bench", "results", f"{kind}-{datetime.date.today().isoformat()}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", out)
    return out
