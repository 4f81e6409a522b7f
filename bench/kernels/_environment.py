"""The environment every benchmark of this folder runs in, set on import, before CUDA or JAX start: enough hardware
queues for every virtual rank's stream, NVLink multicast off, and the repository on sys.path (tests.harness)."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.pop("JAX_MSCCLPP_NVLS", None)
if REPO not in sys.path:
    sys.path.insert(0, REPO)
