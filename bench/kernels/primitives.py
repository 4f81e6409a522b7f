"""Primitive-level measurements on one GPU (virtual ranks), written as JSON under bench/results/.

    python bench/kernels/primitives.py [--out bench/results/primitives-<date>.json] [--quick]

Measures, each against the device-to-device copy bandwidth of cudaMemcpyAsync measured in the same run
(bandwidth counts bytes read + bytes written):
  - HB copy loops: MemoryChannel put into a peer's scratch (same GPU), a local copy_bytes, and get;
  - N-input reduce loops (reduce_elements, f32 and bf16, N = 2, 4, 8);
  - LL16 / LL8 / HB round trip (put + signal + wait, echoed back) between two ranks on two streams;
  - PortChannel trigger-to-completion latency (put_with_signal_and_flush of 8 bytes, timed on the device with
    %globaltimer) and a signal/wait round trip through the proxy.
Timing: events around repeated launches after a warm-up, or in-kernel loops for round trips.
"""

from __future__ import annotations

import argparse
import sys

import _run  # noqa: E402  (bench/kernels/_run.py: the environment, the results folder)

import numpy as np  # noqa: E402

from tests.harness.virtual_ranks import INPUT, OUTPUT, VirtualRanks, device_run_header, native_cuda  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def gbps(nbytes_moved: float, ms: float) -> float:
    return nbytes_moved / (ms * 1e-3) / 1e9


def best(vr, op, moved, shapes, repeats, **params):
    """Times `op` on rank 0 for each (blocks, threads); returns all and the fastest."""
    rows = []
    for blocks, threads in shapes:
        vr.timed(op, ranks=[0], repeats=2, blocks=blocks, threads=threads, **params)  # warm-up
        ms = min(vr.timed(op, ranks=[0], repeats=repeats, blocks=blocks, threads=threads, **params) for _ in range(3))
        rows.append({"blocks": blocks, "threads": threads, "ms": ms, "GBps": gbps(moved, ms)})
    return rows, max(rows, key=lambda r: r["GBps"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = ap.parse_args()

    cuda = native_cuda()
    if cuda is None or cuda.device_count() < 1:
        sys.exit("needs the CUDA build and a GPU")
    sm_shapes = [(132, 512), (264, 512), (528, 512), (264, 1024), (1056, 256)]
    reduce_shapes = [(132, 512), (264, 512), (528, 512), (1056, 256), (2112, 128)]  # reduce_local: <= 512 threads
    if args.quick:
        sm_shapes, reduce_shapes = sm_shapes[:2], reduce_shapes[:2]
    sizes = [MiB, 16 * MiB, 256 * MiB, GiB] if not args.quick else [16 * MiB, 256 * MiB]
    repeats = 20 if not args.quick else 5

    result = {
        **device_run_header("primitives", cuda),
        "conventions": "bandwidth = (bytes read + bytes written) / time; times are per launch (events) unless noted",
    }

    # ---- copies -------------------------------------------------------------------------------------------------
    big = max(sizes)
    copies = []
    with VirtualRanks(2, buffer_bytes=big, scratch_bytes=big, channels_per_peer=1) as vr:
        vr.upload(0, INPUT, np.random.default_rng(0).integers(0, 256, big, dtype=np.uint8))
        for n in sizes:
            memcpy_ms = min(vr.ranks[0].time_memcpy(n, repeats) for _ in range(3))
            row = {"bytes": n, "memcpy_ms": memcpy_ms, "memcpy_GBps": gbps(2 * n, memcpy_ms)}
            for mode, name in [(0, "put"), (1, "local_copy"), (2, "get")]:
                shapes, top = best(vr, "copy_bench", 2 * n, sm_shapes, repeats, bytes=n, peer=1, mode=mode)
                row[name] = {"best": top, "shapes": shapes, "vs_memcpy": top["GBps"] / row["memcpy_GBps"]}
            copies.append(row)
            print(f"copy {n >> 20:6d} MiB  memcpy {row['memcpy_GBps']:7.0f} GB/s  put {row['put']['best']['GBps']:7.0f}"
                  f" ({row['put']['vs_memcpy']:.1%})  local {row['local_copy']['best']['GBps']:7.0f}"
                  f" ({row['local_copy']['vs_memcpy']:.1%})  get {row['get']['best']['GBps']:7.0f}", flush=True)
        result["copy"] = copies
    memcpy_ref = copies[-1]["memcpy_GBps"]

    # ---- N-input reduce ---------------------------------------------------------------------------------------
    reduces = []
    per_src = 64 * MiB if not args.quick else 16 * MiB
    with VirtualRanks(1, buffer_bytes=8 * per_src, channels_per_peer=1) as vr:
        rng = np.random.default_rng(1)
        vr.upload(0, INPUT, rng.standard_normal(8 * per_src // 4).astype(np.float32))
        for dtype, esize in [("float32", 4), ("bfloat16", 2)]:
            for nsrc in (2, 4, 8):
                moved = (nsrc + 1) * per_src
                shapes, top = best(vr, "reduce_local", moved, reduce_shapes, repeats, dtype=dtype, reduce_op="sum",
                                   nsrc=nsrc, count=per_src // esize, slot_stride=per_src)
                reduces.append({"dtype": dtype, "nsrc": nsrc, "bytes_per_source": per_src, "best": top,
                                "shapes": shapes, "vs_memcpy": top["GBps"] / memcpy_ref})
                print(f"reduce {dtype:8s} N={nsrc}  {top['GBps']:7.0f} GB/s ({top['GBps'] / memcpy_ref:.1%} of memcpy)",
                      flush=True)
    result["reduce"] = reduces

    # ---- LL vs HB round trips -----------------------------------------------------------------------------------
    rt = []
    rt_sizes = [8, 64, 256, 1024, 4096, 16384, 65536, 262144, MiB]
    with VirtualRanks(2, buffer_bytes=4 * MiB, scratch_bytes=8 * MiB, channels_per_peer=1) as vr:
        for n in rt_sizes:
            row = {"bytes": n}
            for mode, name in [(0, "LL16"), (1, "LL8"), (2, "HB")]:
                iters = 2000 if n <= 65536 else 200
                vr.timed("ping_pong", ranks=[0, 1], iters=20, bytes=n, mode=mode, peer=1, threads=1024)
                ms = min(vr.timed("ping_pong", ranks=[0, 1], iters=iters, bytes=n, mode=mode, peer=1, threads=1024)
                         for _ in range(3))
                row[name + "_us"] = ms * 1e3 / iters
            rt.append(row)
            print(f"round trip {n:8d} B  LL16 {row['LL16_us']:7.2f} us  LL8 {row['LL8_us']:7.2f} us  "
                  f"HB {row['HB_us']:7.2f} us", flush=True)
    crossover = next((r["bytes"] for r in rt if r["HB_us"] < min(r["LL16_us"], r["LL8_us"])), None)
    result["round_trip"] = {"rows": rt, "one block of 1024 threads per rank; put + signal + wait echoed back": True,
                            "HB_faster_from_bytes": crossover}

    # ---- PortChannel through the proxy ------------------------------------------------------------------------
    with VirtualRanks(2, buffer_bytes=64 * MiB, scratch_bytes=64 * MiB, channels_per_peer=1, port_channels=True) as vr:
        iters = 2000
        port = {}
        for mode, name in [(0, "put_with_signal_and_flush_8B"), (1, "signal_wait_round_trip")]:
            vr.run("port_latency", ranks=[0, 1], mode=mode, iters=100, bytes=8, peer=1)
            vr.run("port_latency", ranks=[0, 1], mode=mode, iters=iters, bytes=8, peer=1)
            lat = vr.download(0, OUTPUT, 8 * iters, dtype=np.uint64).astype(np.float64) / 1e3
            port[name] = {"median_us": float(np.median(lat)), "p10_us": float(np.percentile(lat, 10)),
                          "p90_us": float(np.percentile(lat, 90)), "iters": iters}
            print(f"port {name:30s} median {port[name]['median_us']:7.2f} us  p10 {port[name]['p10_us']:7.2f}"
                  f"  p90 {port[name]['p90_us']:7.2f}", flush=True)
        n = 64 * MiB
        vr.run("port_latency", ranks=[0, 1], mode=0, iters=2, bytes=n, peer=1)
        vr.run("port_latency", ranks=[0, 1], mode=0, iters=10, bytes=n, peer=1)
        lat = vr.download(0, OUTPUT, 8 * 10, dtype=np.uint64).astype(np.float64)
        port["put_64MiB"] = {"median_us": float(np.median(lat) / 1e3), "GBps": gbps(2 * n, float(np.median(lat)) / 1e6)}
        print(f"port put 64 MiB + flush: {port['put_64MiB']['median_us']:.1f} us, {port['put_64MiB']['GBps']:.0f} GB/s",
              flush=True)
        port["proxy"] = dict(cuda.proxy_status(0))
        result["port_channel"] = port

    _run.write_result(result, "primitives", args.out)


if __name__ == "__main__":
    main()
