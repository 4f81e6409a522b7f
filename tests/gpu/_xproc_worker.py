"""One rank of the cross-process tests: two processes share GPU 0 and exchange CUDA IPC handles as bytes
through files. Prints one JSON line of results."""

import json
import os
import sys
import time

import numpy as np

from tests.harness.virtual_ranks import INPUT, OUTPUT, make_params, native_cuda


def exchange(tmp, name, rank, payload: bytes, timeout=120.0) -> bytes:
    """Writes this rank's bytes as <name>.<rank> and returns the other rank's."""
    mine = os.path.join(tmp, f"{name}.{rank}")
    with open(mine + ".tmp", "wb") as f:
        f.write(payload)
    os.rename(mine + ".tmp", mine)
    theirs = os.path.join(tmp, f"{name}.{1 - rank}")
    deadline = time.monotonic() + timeout
    while not os.path.exists(theirs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {theirs}")
        time.sleep(0.005)
    with open(theirs, "rb") as f:
        return f.read()


def data_of(rank, cycle, n):
    return np.random.default_rng(1000 * cycle + rank).integers(0, 256, n, dtype=np.uint8)


def main():
    rank, tmp, cycles = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    cuda = native_cuda()
    peer = 1 - rank
    slot = 1 << 20
    nbytes = slot - 5
    results = {"rank": rank, "cycles": []}
    for c in range(cycles):
        res = {}
        hr = cuda.HarnessRank(rank, 2, device=0, input_bytes=2 * slot, output_bytes=2 * slot, scratch_bytes=2 * slot,
                              channels_per_peer=2, timeout_s=60.0, port_channels=True)
        hr.connect(peer, exchange(tmp, f"ep{c}", rank, hr.endpoint()))
        hr.build(shares_gpu=True)  # both processes on device 0
        res["ipc_mappings_open"] = cuda.live_ipc_mappings()
        hr.upload(INPUT, 0, data_of(rank, c, nbytes).tobytes())
        exchange(tmp, f"ready{c}", rank, b"1")

        def run(op, **kw):
            hr.launch(make_params(cuda, op, **kw))
            hr.synchronize()
            return int(hr.counters()[0])

        run("hb_exchange", bytes=nbytes, slot_stride=slot, mode=0, blocks=2, threads=512)
        got = np.frombuffer(hr.download(OUTPUT, peer * slot, nbytes), dtype=np.uint8)
        res["hb_ok"] = bool(np.array_equal(got, data_of(peer, c, nbytes)))
        res["ll_bad_words"] = run("ll_exchange", bytes=4096, slot_stride=8192, packet=16, iters=20, blocks=1, threads=256)
        run("ping_pong", mode=0, bytes=64, iters=10, peer=1)
        run("ping_pong", mode=2, bytes=4096, iters=5, peer=1)
        hr.upload(INPUT, 0, data_of(rank, c, nbytes).tobytes())
        run("port_exchange", bytes=40_001, slot_stride=slot, mode=2, threads=256)
        got = np.frombuffer(hr.download(OUTPUT, peer * slot, 40_001), dtype=np.uint8)
        res["port_ok"] = bool(np.array_equal(got, data_of(peer, c, 40_001)))
        exchange(tmp, f"done{c}", rank, b"1")  # the peer no longer touches this rank's memory
        hr.close()
        del hr
        res["ipc_mappings_after_close"] = cuda.live_ipc_mappings()
        res["proxy_threads_after_close"] = cuda.live_proxy_threads()
        results["cycles"].append(res)
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
