"""What the examples share for measuring and reporting: the median step time of a function, the speedup (lax's
time over ours, as ``python -m jax_mscclpp.tools.bench`` reports it), what every JSON report opens with (example, date,
machine, devices, versions) and how it is written.

Imported after JAX (``header`` reads the devices and versions of the running process).
"""

import datetime
import hashlib
import json
import os
import platform as host_platform
import statistics
import time


def median_ms(fn, args, steps: int) -> float:
    """Median wall time of ``fn(*args)`` over ``steps`` calls, each blocked on, after one call to compile and warm
    up, in milliseconds."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


# How every printed speedup is labelled; the JSON reports call it "speedup".
SPEEDUP = "speedup (lax/ours)"


def speedup(lax_time: float, ours_time: float) -> float:
    """lax's time over ours: above 1, ours is faster."""
    return lax_time / ours_time


def header(example: str, devices, **device_fields) -> dict:
    """The report's first fields; ``device_fields`` (e.g. ``tp=2``) join the devices entry."""
    import jax
    import jaxlib
    import numpy as np

    import jax_mscclpp as jm

    versions = {"python": host_platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                "jax_mscclpp": jm.__version__, "numpy": np.__version__}
    try:
        import flax

        versions["flax"] = flax.__version__
    except ImportError:
        pass
    return {
        "example": example,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"hostname": host_platform.node(), "system": host_platform.system(),
                    "arch": host_platform.machine(), "cpu_count": os.cpu_count()},
        "devices": {"platform": devices[0].platform, "kind": devices[0].device_kind, "count": len(devices),
                    **device_fields},
        "versions": versions,
    }


def digest(arrays) -> str:
    """SHA-256 over the bytes of ``arrays`` (numpy or JAX arrays of this process, in order), bit for bit: two runs
    that differ only in how the bytes travel between devices print the same digest."""
    import numpy as np

    sha = hashlib.sha256()
    for a in arrays:
        sha.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return sha.hexdigest()


def write(report: dict, path: str | None) -> None:
    """Writes ``report`` as indented JSON to ``path`` (nothing when ``path`` is None)."""
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {path}")
