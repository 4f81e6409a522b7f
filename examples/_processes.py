"""Running an example as several processes under ``jax.distributed``, one device each (``--processes N``).

``launch(argv_of, processes)`` starts ``processes`` copies of a worker command line (``argv_of(process_id, port)``)
in an environment with NVLink multicast off, waits for them and raises ``SystemExit`` naming the exit statuses when
one fails. ``worker_reports(script, argv, processes, what)`` runs ``script`` so, each worker with ``--worker --port
P --process-id I --result FILE`` after ``argv``, and returns the JSON each wrote to its FILE, in process order;
``reports_of(script, argv, args, measure, what)`` is an example's whole run: the report of ``measure(args)`` in this
process, or each worker's, or, in a worker, its report written to its FILE. ``initialize(port, processes, process_id)`` is what each worker calls before its first JAX
computation: the coordinator on this host, and GPU ``process_id % local_gpus()`` as its device, so that more
processes than GPUs share them (then only an NCCL library of ours can run XLA's collectives: NVIDIA's refuses a
shared GPU). An example comparing ours with lax's variant (``args.variants``) takes ``add_process_arguments``'
options, brackets ``measure`` with ``start_process`` and ``end_process``, and reads its processes' reports as one
(``combined_report``).
"""

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import Callable

from _devices import gpu_expected  # examples/_devices.py


def one_process(argv: list) -> bool:
    """Whether ``argv`` runs one process (every device) rather than ``--processes N`` of one device each: only then
    may the example ask for virtual CPU devices (``configure_cpu_devices``), before JAX is imported."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--processes", default="1")
    value = pre.parse_known_args(argv)[0].processes
    return not (value.isdigit() and int(value) > 1)


def local_gpus() -> int:
    """The GPUs of this host (at least 1: processes on a machine without one run on its CPU)."""
    return max(1, len(glob.glob("/dev/nvidia[0-9]*")))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def environment() -> dict:
    """This process's environment with NVLink multicast off and no NCCL library of ours asked for (a worker
    loads ours itself when it wants it)."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.pop("JAX_MSCCLPP_NVLS", None)
    env.pop("JAX_MSCCLPP_NCCL", None)
    return env


def launch(argv_of: Callable[[int, int], list], processes: int, what: str) -> None:
    """Runs ``processes`` workers, ``argv_of(process_id, port)`` each, to their end."""
    port = free_port()
    env = environment()
    procs = [subprocess.Popen(argv_of(i, port), env=env) for i in range(processes)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"the {what} failed (exit status {codes})")


def worker_reports(script: str, argv: list, processes: int, what: str) -> list:
    """Runs ``processes`` workers of ``script`` (this interpreter, ``argv`` and the worker's options) to their end;
    their reports, in process order."""
    with tempfile.TemporaryDirectory() as folder:
        paths = [os.path.join(folder, f"process{i}.json") for i in range(processes)]
        launch(lambda i, port: [sys.executable, os.path.abspath(script), *argv, "--worker", "--port", str(port),
                                "--process-id", str(i), "--result", paths[i]], processes, what)
        reports = []
        for path in paths:
            with open(path) as f:
                reports.append(json.load(f))
    return reports


def reports_of(script: str, argv: list, args, measure: Callable, what: str) -> list:
    """The reports of an example's run as ``args`` asks for it: ``[measure(args)]`` in one process, each worker's
    (``args.processes`` of them, in process order) in several; in a worker (``args.worker``), ``measure(args)``
    written to ``args.result``, and no report here (``[]``)."""
    if args.worker:
        with open(args.result, "w") as f:
            json.dump(measure(args), f)
        return []
    if args.processes == 1:
        return [measure(args)]
    return worker_reports(script, argv, args.processes, what)


def combined_report(reports: list, passed: str, largest: tuple) -> dict:
    """The first of the processes' reports (each with the same ``results`` rows), each row that ran (``ran`` not
    false) passing where every process's passed (key ``passed``) and holding the largest of the processes' values of
    each key in ``largest`` (per entry where the value is a dict)."""
    report = reports[0]
    for i, row in enumerate(report["results"]):
        if row.get("ran", True):
            rows = [r["results"][i] for r in reports]
            row[passed] = all(r[passed] for r in rows)
            for key in largest:
                values = [r[key] for r in rows]
                row[key] = ({name: max(v[name] for v in values) for name in values[0]}
                            if isinstance(values[0], dict) else max(values))
    return report


def replicas_agree(reports: list, key: str) -> bool:
    """Whether every process's ``key`` (a digest of values every process holds whole) equals the first process's, in
    every ``results`` row that ran."""
    first = reports[0]["results"]
    return all(r["results"][i][key] == row[key] for r in reports for i, row in enumerate(first)
               if row.get("ran", True))


def print_between_processes(report: dict, key: str, what: str) -> None:
    """The digests ``key`` of each variant's row (as ``{variant: digest}`` or one digest per row labelled by its
    ``collectives``) and how our calls between the processes ran, as ``end_process`` counted them."""
    for row in report["results"]:
        if not row.get("ran", True):
            continue
        value = row[key]
        shown = (", ".join(f"{v} {d[:16]}" for v, d in value.items()) if isinstance(value, dict)
                 else f"{row.get('collectives', '')} {value[:16]}".strip())
        print(f"{row.get('config', 'run')}: {what} sha256 {shown}")
    if "in_place_between_processes" in report:
        print(f"our calls between processes: {report['in_place_between_processes']}")


def initialize(port: int, processes: int, process_id: int) -> None:
    import jax

    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=processes,
                               process_id=process_id, local_device_ids=[process_id % local_gpus()])


def add_process_arguments(parser: argparse.ArgumentParser) -> None:
    """``--processes N``, and the options ``worker_reports`` gives each worker (hidden)."""
    parser.add_argument("--processes", type=int, default=1,
                        help="processes under jax.distributed, one device each (default 1: one process, every device)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one process of --processes N
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)


def start_process(args) -> bool:
    """What ``measure(args)`` does before its first JAX computation: where more processes than GPUs share them,
    XLA's collectives through our NCCL library (NVIDIA's refuses a shared GPU; asked for before JAX starts its
    backends), for lax's variant and for the lax collectives every variant keeps (a loss's mean); then, in one of
    several processes, ``initialize``. Whether the processes share a GPU."""
    shared_gpu = args.processes > 1 and gpu_expected() and args.processes > local_gpus()
    if shared_gpu:
        import jax_mscclpp

        jax_mscclpp.enable_nccl_backend()
    if args.processes > 1:
        initialize(args.port, args.processes, args.process_id)
    return shared_gpu


def end_process(args, report: dict) -> None:
    """What ``measure(args)`` does after its last JAX computation: in one of several processes, how our calls
    between the processes ran (``in_place_between_processes``: in place on XLA's buffers or through scratch, over
    every communicator of ours the process used) and the calls our NCCL library counted (where it ran XLA's
    collectives: ``nccl_library_calls``, its in-place kernel as algorithm "in_place") into ``report``, and
    ``jax.distributed`` shut down."""
    if args.processes == 1:
        return
    import jax

    import jax_mscclpp

    counts = [comm.in_place_between_processes() for comm in jax_mscclpp.Communicator.live() if comm.platform == "gpu"]
    if counts:
        report["in_place_between_processes"] = {
            "in_place": sum(c["in_place"] for c in counts),
            "through_scratch": sum(c["through_scratch"] for c in counts),
            "unavailable": sorted({c["unavailable"] for c in counts if c["unavailable"]})}
    if jax_mscclpp.nccl_backend.runs_collectives():
        report["nccl_library_calls"] = jax_mscclpp.nccl_backend.call_counts()
    jax.distributed.shutdown()
