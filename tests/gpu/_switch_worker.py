"""Processes of tests/gpu/test_nccl_switch.py: JAX_MSCCLPP_NCCL=1 with no code change, in workers started the way
JAX's own multi-process test launcher starts them (`/proc/self/exe`, the launcher's environment copied and its
sys.path as PYTHONPATH, so a virtual environment's site-packages, where jax_mscclpp_nccl.pth is, is never processed
in them). The workers never import jax_mscclpp: they see our library only through what XLA binds.

    python _switch_worker.py launch MODE NPROC PORT   the launcher: NPROC workers, their outputs, exit 1 if one failed
        MODE "collectives": the variable comes from the launcher's own environment (its .pth ran there)
        MODE "refused": the launcher adds the variable to its workers' environment only
    python _switch_worker.py MODE PROCESS_ID NPROC PORT   one worker
"""

import ctypes
import json
import os
import subprocess
import sys
import time

AT_START = "jax_mscclpp.nccl_backend" in sys.modules  # whether the start-up hook ran in this interpreter


def bound() -> ctypes.CDLL | None:
    """The libnccl.so.2 XLA's dlopen("libnccl.so.2") answers, when it is ours (it alone exports jax_mscclpp_*)."""
    try:
        handle = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD)
    except OSError:
        return None
    return handle if hasattr(handle, "jax_mscclpp_nccl_call_counts") else None


def collectives(pid: int, nproc: int, port: int) -> int:
    import numpy as np
    from _rank_data import per_rank_inputs

    import jax
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc, process_id=pid,
                               local_device_ids=[0])
    devices = jax.devices("cuda")
    mesh = Mesh(np.array(devices), ("x",))
    mine = [r for r, d in enumerate(devices) if d.process_index == jax.process_index()][0]
    failures = 0
    print(f"rank {mine}: start-up hook ran here: {AT_START}; interpreter {sys.executable}, prefix {sys.prefix}")
    failures += AT_START  # the launcher's mechanism was not reproduced

    def run(fn, per_rank):
        shard = jax.device_put(per_rank[mine], devices[mine])
        x = jax.make_array_from_single_device_arrays((nproc * per_rank[mine].shape[0],),
                                                     NamedSharding(mesh, P("x")), [shard])
        f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
        return np.asarray(f(x).addressable_data(0))

    for count in (1, 1023, 8 * 4096 + 5):
        per_rank = per_rank_inputs(nproc, count, count, np.float32)
        checks = {"psum": (run(lambda v: lax.psum(v, "x"), per_rank), np.sum(per_rank, axis=0)),
                  "all_gather": (run(lambda v: lax.all_gather(v, "x", tiled=True), per_rank),
                                 np.concatenate(per_rank))}
        for name, (got, want) in checks.items():
            ok = got.shape == want.shape and np.allclose(got, want, rtol=0, atol=1e-5 * max(1, np.abs(want).max()))
            failures += not ok
            print(f"rank {mine}: {name} n={count}: {'ok' if ok else 'MISMATCH'}", flush=True)
    ours = bound()
    counts = {}
    if ours is not None:
        ours.jax_mscclpp_nccl_call_counts.restype = ctypes.c_char_p
        for line in (ours.jax_mscclpp_nccl_call_counts() or b"").decode().splitlines():
            name, algorithm, calls = line.split()
            counts.setdefault(name, {})[algorithm] = int(calls)
    ran = sum(c for per in counts.values() for a, c in per.items() if a != "nccl")
    forwarded = sum(per.get("nccl", 0) for per in counts.values())
    print(f"rank {mine}: ours bound: {ours is not None}; calls {json.dumps(counts, sort_keys=True)}", flush=True)
    failures += not (ours is not None and ran > 0 and forwarded == 0)
    jax.distributed.shutdown()
    print(f"rank {mine}: {failures} failures", flush=True)
    return 1 if failures else 0


def refused(pid: int) -> int:
    import jax

    try:
        jax.devices()
    except RuntimeError as error:
        message = str(error)
        print(f"process {pid}: refused: {message}", flush=True)
        named = "JAX_MSCCLPP_NCCL=1" in message and "/nvidia/nccl/lib/libnccl.so.2" in message and \
            "jax_mscclpp/lib/libnccl.so.2" in message
        print(f"process {pid}: {0 if named and not AT_START else 1} failures", flush=True)
        return 0 if named and not AT_START else 1
    print(f"process {pid}: jax.devices() ran with NVIDIA's NCCL bound; 1 failures", flush=True)
    return 1


def launch(mode: str, nproc: int, port: int) -> int:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.pathsep.join(sys.path), env.get("PYTHONPATH", "")] if p)
    if mode == "refused":
        env["JAX_MSCCLPP_NCCL"] = "1"
    procs = [subprocess.Popen(["/proc/self/exe", os.path.abspath(__file__), mode, str(i), str(nproc), str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(nproc)]
    deadline = time.monotonic() + 300
    codes = []
    for i, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            out, _ = proc.communicate()
        print(f"=== worker {i}, exit {proc.returncode}\n{out[-4000:]}", flush=True)
        codes.append(proc.returncode)
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        sys.exit(launch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    mode, pid, nproc, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sys.exit(collectives(pid, nproc, port) if mode == "collectives" else refused(pid))
