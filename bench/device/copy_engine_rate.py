"""The copy engines' peer-to-peer rate between GPU 0 and GPU 1 (cudaMemcpyPeerAsync, one stream per direction), one
direction and both at once: what a copy-engine all_gather / all_to_all of two ranks could reach at most.

    python bench/device/copy_engine_rate.py [--mib 512] [--iters 10] [--out FILE]
"""

import argparse
import datetime
import json

import cupy as cp


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=512, help="bytes per copy, MiB")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    n = args.mib << 20
    rt = cp.cuda.runtime
    bufs, streams = {}, {}
    for d in (0, 1):
        with cp.cuda.Device(d):
            rt.deviceEnablePeerAccess(1 - d)
            bufs[d] = (cp.ones(n, dtype=cp.uint8), cp.empty(n, dtype=cp.uint8))  # (source, destination)
            streams[d] = cp.cuda.Stream(non_blocking=True)

    def run(directions):
        """GB/s per direction: each d in `directions` copies its source into the peer's destination."""
        for _ in range(2):  # warm-up
            for d in directions:
                rt.memcpyPeerAsync(bufs[1 - d][1].data.ptr, 1 - d, bufs[d][0].data.ptr, d, n, streams[d].ptr)
        for d in directions:
            streams[d].synchronize()
        start = {}
        stop = {}
        for d in directions:
            with cp.cuda.Device(d):
                start[d], stop[d] = cp.cuda.Event(), cp.cuda.Event()
                start[d].record(streams[d])
        for _ in range(args.iters):
            for d in directions:
                rt.memcpyPeerAsync(bufs[1 - d][1].data.ptr, 1 - d, bufs[d][0].data.ptr, d, n, streams[d].ptr)
        for d in directions:
            with cp.cuda.Device(d):
                stop[d].record(streams[d])
        for d in directions:
            stop[d].synchronize()
        return {f"gpu{d}->gpu{1 - d}": n * args.iters / (cp.cuda.get_elapsed_time(start[d], stop[d]) * 1e-3) / 1e9
                for d in directions}

    result = {
        "what": "cudaMemcpyPeerAsync GPU0<->GPU1, GB/s per direction",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpus": [cp.cuda.runtime.getDeviceProperties(d)["name"].decode() for d in (0, 1)],
        "gpu_count": 2,
        "bytes_per_copy": n,
        "iters": args.iters,
        "one_direction": run((0,)),
        "both_directions": run((0, 1)),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
