"""What the pytest fixtures are made of, usable without pytest: the test mesh, GPU detection and
``CollectiveBenchmark`` (ours beside lax for one configuration, checked, timed with device synchronization)."""

from __future__ import annotations

from typing import Any

from ..collective_specs import OPERATION_NAMES

AXIS = "x"
OP_ALIASES = OPERATION_NAMES  # every name CollectiveBenchmark takes -> the collective's (collective_specs.py)


def default_mesh(devices=None):
    """A 1-D mesh named "x" over ``devices`` (default: every device of JAX's default backend, i.e. the GPUs
    when there are, else the CPU devices)."""
    import jax

    from ..tools.bench.programs import make_mesh

    return make_mesh(jax.devices() if devices is None else devices)


def cuda_device_count() -> int:
    """CUDA devices visible here: those JAX sees, or, when the session keeps JAX off the GPU (``JAX_PLATFORMS=cpu``,
    as the project's own tests do) or JAX has no CUDA backend, those jax_mscclpp's CUDA runtime sees."""
    import jax

    seen = 0
    for name in ("cuda", "gpu"):
        try:
            devices = jax.devices(name)
        except RuntimeError:
            continue
        seen = sum(1 for d in devices if "rocm" not in str(getattr(d.client, "platform_version", "")).lower())
        break
    try:
        from .. import _jax_mscclpp as native

        cuda = getattr(native, "cuda", None)
        if cuda is not None:
            seen = max(seen, int(cuda.device_count()))
    except (ImportError, RuntimeError):
        pass
    return seen


def cuda_built() -> bool:
    from .. import _native

    return bool(_native.CUDA_BUILT)


def gpu_skip_reason(count: int = 1) -> str | None:
    """Why a test needing ``count`` CUDA GPUs cannot run here, or None."""
    if not cuda_built():
        return "needs jax_mscclpp built with CUDA (this build is CPU-only)"
    found = cuda_device_count()
    if found < count:
        return f"needs {count} CUDA GPU(s), found {found}"
    return None


class Unavailable(Exception):
    """Our collectives cannot run on this mesh (platform without a backend, or several processes on CPU)."""


class CheckFailed(AssertionError):
    """Ours disagreed with lax."""


class CollectiveBenchmark:
    """``bench(op, nbytes, dtype=..., algorithm=...)`` -> a record (``jax_mscclpp.tools.bench.sweep.Record``) with
    ``ours_us``, ``lax_us`` and ``speedup`` (device time per collective), the dispatch-level times, algbw and
    busbw. Ours is checked against lax on random data first: disagreement raises ``CheckFailed``.

    ``op``: all_reduce (or psum / pmax / pmin), all_gather, reduce_scatter (or psum_scatter), all_to_all;
    ``nbytes``: nccl-tests' size (int or "64K"); ``algorithm``: a name, or None / "auto" for the runtime's choice.
    ``benchmark``: a pytest-benchmark fixture, fed ours' one-call-per-dispatch program on the first call.
    """

    def __init__(self, mesh, *, iters: int | None = None, warmup: int | None = None, chain: int | None = None,
                 benchmark: Any = None):
        self.mesh = mesh
        self.iters, self.warmup, self.chain = iters, warmup, chain
        self.benchmark = benchmark
        self.records: list = []

    def __call__(self, op: str, nbytes, dtype: str = "float32", algorithm: str | None = None, *,
                 redop: str | None = None, mode: str = "plain", check: bool = True, iters: int | None = None,
                 warmup: int | None = None, chain: int | None = None, seed: int = 0):
        import jax.numpy as jnp
        import numpy as np

        from ..tools.bench import driver, programs, sweep
        from ..tools.bench.units import parse_size

        (canonical,), redop = programs.resolve_ops([op], redop)
        size = parse_size(nbytes) if isinstance(nbytes, str) else int(nbytes)
        algorithm = "auto" if algorithm is None else algorithm
        devices = list(np.asarray(self.mesh.devices).flat)
        settings = driver.resolve_settings(
            devices[0].platform, ops=[canonical], sizes=[size], dtypes=[jnp.dtype(dtype).name],
            algorithms=[algorithm], modes=[mode], iters=iters or self.iters, warmup=self.warmup if warmup is None else warmup,
            chain=chain or self.chain, redop=redop, check=check, seed=seed,
        )
        runner = sweep.Runner(self.mesh, settings, [])
        if runner.unavailable:
            raise Unavailable(runner.unavailable)
        groups = runner.groups()
        if not groups or algorithm not in groups[0].algorithms:
            raise ValueError(f"{canonical}: algorithm {algorithm!r} does not run here ({'; '.join(runner.notices)})")
        records = runner.run_group(groups[0])
        record = next(r for r in records if r.algorithm == algorithm)
        self.records.append(record)
        if record.status == "check failed":
            raise CheckFailed(
                f"{canonical} {size} B {dtype} {algorithm}: ours differs from lax by {record.check_max_error}"
            )
        if record.status != "ok":
            raise RuntimeError(f"{canonical} {size} B {dtype} {algorithm}: {record.status}")
        self._feed_pytest_benchmark(runner, record)
        return record

    def _feed_pytest_benchmark(self, runner, record) -> None:
        if self.benchmark is None:
            return
        benchmark, self.benchmark = self.benchmark, None  # pytest-benchmark times once per test
        import jax

        fn, args = runner.last_programs[f"ours_single:{record.algorithm}"]
        benchmark.extra_info.update({
            k: getattr(record, k)
            for k in ("op", "size", "dtype", "algorithm", "chosen", "world", "ours_us", "lax_us", "speedup",
                      "ours_busbw", "lax_busbw", "ours_dispatch_us", "lax_dispatch_us", "chain")
        })
        benchmark.pedantic(lambda: jax.block_until_ready(fn(*args)), rounds=max(1, record.iters),
                           warmup_rounds=record.warmup, iterations=1)
