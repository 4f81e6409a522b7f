"""Benchmarks of jax_mscclpp's collectives beside the lax collectives, with nccl-tests' conventions.

Command line: ``python -m jax_mscclpp.tools.bench --help`` (docs/benchmarking.md). From Python::

    from jax_mscclpp.tools import bench
    records = bench.run(ops=["all_reduce"], sizes="1K:1M", dtypes=["float32"])

Modules: ``units`` (sizes), ``metrics`` (algbw, busbw, stats), ``programs`` (what runs), ``timing`` (how it is
timed), ``modes`` (plain / command buffers), ``sweep`` (configurations -> records), ``report`` (table, JSON, CSV,
PNG), ``machine`` (what it ran on), ``launcher`` (one process per device), ``progress``, ``cli``, ``driver`` (one
run, end to end); ``kernel_record`` (the kernel speed record: ``python -m jax_mscclpp.tools.bench.kernel_record``),
``kernel_record_base`` (its record, plan and comparison), ``kernel_record_jax`` (its JAX settings) and
``kernel_record_auto`` (what ``auto`` runs in its virtual-rank cells, against each cell's fastest).
Importing this package does not start JAX's backends; ``run`` does.
"""

from .metrics import algbw_gbps, bus_factor, busbw_gbps
from .units import format_size, parse_size, parse_sizes


def run(*args, **kwargs):
    """Runs a sweep in this process and returns its records: see :func:`jax_mscclpp.tools.bench.driver.run`."""
    from .driver import run as _run

    return _run(*args, **kwargs)


__all__ = ["algbw_gbps", "bus_factor", "busbw_gbps", "format_size", "parse_size", "parse_sizes", "run"]
