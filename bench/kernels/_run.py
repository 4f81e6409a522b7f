"""What the kernel benchmarks of this folder share: the environment they run in (set on import, before CUDA or JAX
start: NVLink multicast off, the repository on sys.path for tests.harness) and where their JSON goes
(bench/results/<kind>-<date>.json)."""

import datetime
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, REPO)  # tests.harness


def write_result(result: dict, kind: str, out: str | None = None) -> str:
    """Writes ``result`` to ``out`` (default: bench/results/<kind>-<today>.json); returns the path."""
    out = out or os.path.join(REPO, "bench", "results", f"{kind}-{datetime.date.today().isoformat()}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", out)
    return out
