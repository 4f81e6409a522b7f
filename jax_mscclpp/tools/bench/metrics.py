"""nccl-tests' figures of merit: time, algorithm bandwidth and bus bandwidth.

``size`` is nccl-tests' size: the bytes of the larger per-rank buffer (all_reduce: the input; all_gather: the
output, n inputs; reduce_scatter: the input, n outputs; all_to_all: the input, equal to the output).

    algbw = size / time
    busbw = algbw * factor, factor = 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, all_to_all)

busbw is comparable across rank counts and with the hardware's link bandwidth.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from ...collective_specs import spec_named


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' algbw -> busbw factor for ``op`` over ``world`` ranks."""
    if world < 1:
        raise ValueError(f"world size must be positive, got {world}")
    return spec_named(op).bus_factor(world)  # collective_specs.py


def algbw_gbps(size_bytes: int, time_us: float | None) -> float | None:
    """Algorithm bandwidth in GB/s (1e9 bytes per second), or None when the time is not positive."""
    if time_us is None or not math.isfinite(time_us) or time_us <= 0:
        return None
    return size_bytes / (time_us * 1e-6) / 1e9


def busbw_gbps(op: str, world: int, size_bytes: int, time_us: float | None) -> float | None:
    """Bus bandwidth in GB/s, or None when the time is not positive."""
    algbw = algbw_gbps(size_bytes, time_us)
    return None if algbw is None else algbw * bus_factor(op, world)


@dataclasses.dataclass(frozen=True)
class Stats:
    """Median, minimum and maximum of a set of samples (microseconds here)."""

    median: float
    min: float
    max: float
    count: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Stats":
        if not samples:
            raise ValueError("no samples")
        ordered = sorted(samples)
        n = len(ordered)
        mid = n // 2
        median = ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
        return cls(float(median), float(ordered[0]), float(ordered[-1]), n)


def below_noise(median_us: float | None, min_us: float | None) -> bool:
    """Whether a per-collective time (a chained program minus the trivial one, over K: ``timing.per_collective``)
    cannot be told from zero: its median or its smallest sample is at or below zero, i.e. some chained run took no
    longer than the trivial program. Such a time, and any speedup or bandwidth derived from it, means nothing."""
    if median_us is None:
        return False
    return median_us <= 0 or (min_us is not None and min_us <= 0)


def speedup(ours_us: float | None, lax_us: float | None) -> float | None:
    """lax time over ours: above 1 means ours is faster."""
    if ours_us is None or lax_us is None or ours_us <= 0 or lax_us <= 0:
        return None
    return lax_us / ours_us
