"""Timing: blocking calls, interleaved across programs, and the chained-minus-trivial estimate.

Every call is followed by ``block_until_ready``, so a sample is one dispatch plus its device work, and no two
programs are ever in flight together (XLA:CPU on a few cores can stall with several blocking collective programs
in flight). Programs of one configuration are timed in rotating order, iteration by iteration, so drift (clocks,
other load) hits them alike.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

import jax

from .metrics import Stats


def run_blocking(fn: Callable, args: Sequence):
    out = fn(*args)
    jax.block_until_ready(out)
    return out


def time_call_us(fn: Callable, args: Sequence) -> float:
    """Wall time of one blocking call, in microseconds."""
    start = time.perf_counter()
    run_blocking(fn, args)
    return (time.perf_counter() - start) * 1e6


def interleaved(programs: Mapping[str, tuple[Callable, Sequence]], iters: int, warmup: int) -> dict[str, list[float]]:
    """``iters`` samples (us) of every program after ``warmup`` untimed rounds; iteration i starts at program
    i mod len(programs)."""
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    names = list(programs)
    for _ in range(max(0, warmup)):
        for name in names:
            run_blocking(*programs[name])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(iters):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(time_call_us(*programs[name]))
    return samples


def per_collective(chain_samples: Sequence[float], trivial_samples: Sequence[float], chain: int) -> Stats:
    """Device time of one collective: each chained sample minus the trivial program's median, over K.

    Can come out at or below zero when the collective costs less than the noise of the two programs (often so
    on CPU): reported as measured, and bandwidths are then left empty."""
    base = Stats.of(trivial_samples).median
    return Stats.of([(t - base) / chain for t in chain_samples])
