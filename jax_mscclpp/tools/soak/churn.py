"""Communicator churn: create / use / destroy cycles, watching what a leak would grow.

``python -m jax_mscclpp.tools.soak.churn --cycles 1000`` runs cycles of: a mesh drawn at random (a random subset and
order of the devices, 1-D or 2-D, so the rank count varies; over every device when several processes take part),
a ``Communicator`` over random axes with a random scratch size (and, on GPUs, port channels on or off), a jitted
program running ours beside lax (psum and a tiled all_gather) on random integers and compared exactly, then
``Communicator.destroy()``. Every ``--sample-every`` cycles it samples the process's threads, its resident memory
(RSS) and the C heap in use (glibc's ``mallinfo2``), the live communicators (Python's cache and the native
registry) and, on GPUs, free device memory, proxy threads and IPC mappings.

Every cycle compiles a new program, and JAX keeps each in its caches: the heap grows with them (``--control``
runs the same cycles with lax alone, no communicator, to show the part that is JAX's). So the baseline is taken
after warm-up cycles and ``jax.clear_caches()``, and the end state after ``jax.clear_caches()`` again: the heap in
use, the threads and the live communicators must come back to the baseline (RSS need not: the allocator keeps
freed pages). A last cycle then shows that lowering afresh still works. Exit status 1 when a cycle failed or
something did not come back.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time

import numpy as np

from ..bench import launcher, machine

# Scratch sizes per rank and half drawn for a cycle, by platform (None: the platform's default).
SCRATCH_CHOICES = {"cpu": (None, 64 << 10, 256 << 10, 1 << 20), "gpu": (None, 4 << 20, 32 << 20)}
# What the heap in use may exceed its baseline by at the end: allocator bookkeeping, plus what JAX itself keeps
# for every distinct mesh after jax.clear_caches() (measured with --control, lax alone: 4.5 MB after 1,000 cycles
# of random meshes on CPU devices, 2026-11-29).
HEAP_SLACK_MB = 4.0
HEAP_SLACK_MB_PER_CYCLE = 0.008
# Free device memory may end this much below its baseline (allocator granularity).
GPU_SLACK_MB = 64.0


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def process_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def heap_in_use_bytes() -> int | None:
    """Bytes the C allocator has handed out and not taken back (glibc >= 2.33), or None elsewhere."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def sample(cycle: int, devices: list) -> dict:
    """What a leak would grow, now."""
    import jax

    from ..._native import native
    from ...communicator import Communicator

    gc.collect()
    heap = heap_in_use_bytes()
    out = {"cycle": cycle, "threads": process_threads(), "rss_mb": round(resident_bytes() / 2**20, 1),
           "heap_mb": None if heap is None else round(heap / 2**20, 1),
           "live_communicators": len(Communicator.live()),
           "native_host_communicators": len(native.live_communicators())}
    cuda = getattr(native, "cuda", None)
    if devices[0].platform == "gpu" and cuda is not None:
        local = sorted({d.local_hardware_id for d in devices if d.process_index == jax.process_index()})
        out["gpu_free_mb"] = {str(i): round(cuda.mem_get_info(i)[0] / 2**20, 1) for i in local}
        out["proxy_threads"] = int(cuda.live_proxy_threads())
        out["ipc_mappings"] = int(cuda.live_ipc_mappings())
    return out


def draw_mesh(rng: np.random.Generator, devices: list, multi_process: bool):
    """A random mesh and the axes of the cycle's collectives."""
    from jax.sharding import Mesh

    count = len(devices) if multi_process else int(rng.integers(1, len(devices) + 1))
    chosen = [devices[i] for i in rng.permutation(len(devices))[:count]]
    if count >= 4 and count % 2 == 0 and rng.random() < 0.5:
        mesh = Mesh(np.array(chosen, dtype=object).reshape(2, count // 2), ("a", "b"))
        choices = [("a",), ("b",), ("a", "b"), ("b", "a")]
    else:
        mesh = Mesh(np.array(chosen, dtype=object), ("x",))
        choices = [("x",)]
    return mesh, choices[int(rng.integers(len(choices)))]


def one_cycle(rng: np.random.Generator, devices: list, multi_process: bool, port_channels: bool,
              control: bool = False) -> dict:
    """Create, use (checked against lax) and destroy one communicator; returns what it was. ``control``: the same
    program with lax in place of ours, and no communicator."""
    import jax
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jax_mscclpp as jm
    from ...communicator import Communicator

    mesh, axes = draw_mesh(rng, devices, multi_process)
    choices = SCRATCH_CHOICES.get(devices[0].platform, SCRATCH_CHOICES["cpu"])
    scratch = choices[int(rng.integers(len(choices)))]
    comm = None if control else Communicator(mesh, axes, scratch_bytes=scratch, port_channels=port_channels)
    ours_psum, ours_gather = (lax.psum, lax.all_gather) if control else (jm.psum, jm.all_gather)
    try:
        spec = P(mesh.axis_names)
        block = int(rng.integers(1, 3000))
        seed = int(rng.integers(1 << 31))

        def data(index):
            start = index[0].start or 0
            return np.random.default_rng([seed, start]).integers(-(2**31), 2**31 - 1, size=block, dtype=np.int32)

        x = jax.make_array_from_callback((mesh.devices.size * block,), NamedSharding(mesh, spec), data)

        def both(v):
            return (ours_psum(v, axes), lax.psum(v, axes), ours_gather(v, axes, tiled=True),
                    lax.all_gather(v, axes, tiled=True))

        f = jax.jit(jax.shard_map(both, mesh=mesh, in_specs=spec, out_specs=(spec,) * 4))
        ours_sum, lax_sum, ours_gather, lax_gather = jax.block_until_ready(f(x))
        for ours, ref in ((ours_sum, lax_sum), (ours_gather, lax_gather)):
            for a, b in zip(ours.addressable_shards, ref.addressable_shards):
                if not np.array_equal(np.asarray(a.data), np.asarray(b.data)):
                    raise AssertionError(f"ours differs from lax on mesh {dict(mesh.shape)} over {axes}")
    finally:
        if comm is not None:
            comm.destroy()
    return {"ranks": int(np.prod([mesh.shape[a] for a in axes])), "mesh": dict(mesh.shape), "axes": axes,
            "scratch": comm.scratch_bytes if comm else None}


def run(devices: list, cycles: int, seed: int = 0, sample_every: int = 100, port_channels=(False,),
        warmup: int = 5, control: bool = False, log=print) -> dict:
    """``warmup`` cycles, ``jax.clear_caches()`` and a baseline sample; ``cycles`` cycles with samples; then
    ``jax.clear_caches()``, a sample that must match the baseline, and one more cycle. ``port_channels``: the
    settings cycles alternate over."""
    import jax

    multi_process = jax.process_count() > 1
    rng = np.random.default_rng(seed)
    failures: list[str] = []
    ranks_seen: dict[int, int] = {}

    def cycle(i: int) -> None:
        try:
            info = one_cycle(rng, devices, multi_process, port_channels[i % len(port_channels)], control)
            ranks_seen[info["ranks"]] = ranks_seen.get(info["ranks"], 0) + 1
        except Exception as error:  # noqa: BLE001 - every failure is counted and reported
            failures.append(f"cycle {i}: {type(error).__name__}: {str(error)[:500]}")
            log(failures[-1])

    for i in range(warmup):
        cycle(-1 - i)
    jax.clear_caches()
    baseline = sample(0, devices)
    samples = [baseline]
    started = time.monotonic()
    for i in range(1, cycles + 1):
        cycle(i)
        if i % sample_every == 0 or i == cycles:
            samples.append(sample(i, devices))
            log(f"cycle {i}: {samples[-1]}")
    elapsed = time.monotonic() - started
    jax.clear_caches()
    after_clear = sample(cycles, devices)
    cycle(cycles + 1)
    return {
        "cycles": cycles,
        "control": control,
        "failures": failures,
        "leaks": leaks(baseline, after_clear, cycles),
        "ranks_seen": {str(k): v for k, v in sorted(ranks_seen.items())},
        "elapsed_s": round(elapsed, 1),
        "heap_slack_mb": round(HEAP_SLACK_MB + HEAP_SLACK_MB_PER_CYCLE * cycles, 2),
        "baseline": baseline,
        "samples": samples,
        "after_clear_caches": after_clear,
    }


def leaks(baseline: dict, after: dict, cycles: int, control: dict | None = None) -> list[str]:
    """What did not come back to ``baseline`` by ``after`` (both samples, ``after`` taken after
    ``jax.clear_caches()``). ``control``: a ``run(..., control=True)`` result of the same cycles, whose growth is
    JAX's own and is allowed here too (on GPUs XLA keeps about 1 MB of device memory per compiled program after
    jax.clear_caches(), and starts a few threads on first use: bench/results/churn-x2-2026-11-29-split.json)."""
    def allowed(key: str, device: str | None = None) -> float:
        if control is None:
            return 0.0
        b, a = control["baseline"], control["after_clear_caches"]
        if device is not None:
            return b["gpu_free_mb"][device] - a["gpu_free_mb"][device]  # device memory control lost
        return (a[key] - b[key]) if a.get(key) is not None and b.get(key) is not None else 0.0

    found = []
    for key in ("live_communicators", "native_host_communicators", "proxy_threads", "ipc_mappings", "threads"):
        if key in baseline and after[key] > baseline[key] + max(0.0, allowed(key)):
            found.append(f"{key}: {baseline[key]} at the baseline, {after[key]} after the cycles")
    slack = HEAP_SLACK_MB + HEAP_SLACK_MB_PER_CYCLE * cycles + max(0.0, allowed("heap_mb"))
    if baseline["heap_mb"] is not None and after["heap_mb"] > baseline["heap_mb"] + slack:
        found.append(f"heap in use: {baseline['heap_mb']} MB at the baseline, {after['heap_mb']} MB after "
                     f"the cycles and jax.clear_caches() (more than {slack:.1f} MB over)")
    for device, free in baseline.get("gpu_free_mb", {}).items():
        lost = free - after["gpu_free_mb"][device]
        if lost > GPU_SLACK_MB + max(0.0, allowed("gpu_free_mb", device)):
            found.append(f"GPU {device} free memory: {free} MB at the baseline, {after['gpu_free_mb'][device]} MB "
                         f"after the cycles")
    return found




def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_mscclpp.tools.soak.churn", description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=1000, help="create/use/destroy cycles (default: 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-every", type=int, default=100, help="cycles between samples (default: 100)")
    p.add_argument("--devices", type=int, default=None, help="use the first N devices (default: all)")
    p.add_argument("--launch", type=int, default=None, metavar="N",
                   help="N processes under jax.distributed, one device each (GPUs)")
    p.add_argument("--port-channels", choices=("off", "on", "both"), default="off",
                   help="GPU communicators with port channels off, on, or alternating (default: off)")
    p.add_argument("--control", action="store_true",
                   help="the same cycles with lax alone and no communicator: JAX's own share of the growth")
    p.add_argument("--against-control", action="store_true",
                   help="run the --control cycles first, then ours, and count as a leak only growth beyond the "
                   "control's (on GPUs XLA keeps device memory and threads of its own per compiled program)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the results as JSON to FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.launch is not None:
        if launcher.is_child():
            parser.error("--launch inside a launched process")
        return launcher.launch(args.launch, "jax_mscclpp.tools.soak.churn", argv)
    if launcher.is_child():
        launcher.initialize_child()
    else:
        machine.ensure_host_devices(args.devices or machine.DEFAULT_HOST_DEVICES)
    import jax

    from . import record

    devices = jax.devices()[: args.devices] if args.devices else jax.devices()
    port_channels = {"off": (False,), "on": (True,), "both": (False, True)}[args.port_channels]
    lead = jax.process_index() == 0
    log = print if lead else (lambda line: None)
    if args.against_control and args.control:
        parser.error("--against-control runs the control itself; leave out --control")
    control = (run(devices, args.cycles, args.seed, args.sample_every, port_channels, control=True, log=log)
               if args.against_control else None)
    results = run(devices, args.cycles, args.seed, args.sample_every, port_channels, control=args.control, log=log)
    if control is not None:
        results["leaks"] = leaks(results["baseline"], results["after_clear_caches"], args.cycles, control)
        results["control_run"] = control
    if lead:
        b, f, c = results["baseline"], results["samples"][-1], results["after_clear_caches"]
        print(f"churn{' (control: lax only)' if args.control else ''}: {args.cycles} cycles in "
              f"{results['elapsed_s']} s, rank counts {results['ranks_seen']}, {len(results['failures'])} "
              f"failure(s); heap in use {b['heap_mb']} -> {f['heap_mb']} MB, {c['heap_mb']} MB after "
              f"jax.clear_caches(); RSS {b['rss_mb']} -> {f['rss_mb']} -> {c['rss_mb']} MB; threads "
              f"{b['threads']} -> {c['threads']}; live communicators {b['live_communicators']} -> "
              f"{c['live_communicators']} (native {b['native_host_communicators']} -> "
              f"{c['native_host_communicators']}); leaks: {results['leaks'] or 'none'}")
        if args.out:
            record.write_json(args.out, "churn", devices, vars(args), results)
            print(f"wrote {args.out}")
    return 1 if results["failures"] or results["leaks"] else 0


if __name__ == "__main__":
    sys.exit(main())
