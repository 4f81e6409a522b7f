"""Faults mid-collective: what error each ends in, on which ranks, and how long it takes.

``python -m jax_mscclpp.tools.soak.faults`` runs, on CPU devices in one process (the host backend: every rank is a
thread of this process, so a lost rank is injected with ``jax_mscclpp.testing.faults``), each scenario of
``SCENARIOS`` on a communicator of its own, with the wait limit set to ``--timeout`` seconds:

- a rank that skips a call, and a rank that stops after the first of a call's two exchanges: every other rank must
  fail within the limit with an error naming the missing peer;
- ranks whose calls differ (op, size, collective, dtype, algorithm, a plan against a built-in algorithm; made
  with ``lax.cond`` on the axis index): every rank must fail at once with an error naming both calls.

For each it records the time the program took to raise, every rank's error and how long into its call it came
(``Communicator.errors()``), whether all of that holds, and whether a fresh communicator on the same devices then
works. The process then exits normally: its exit status says whether every scenario held.

``--launch N`` runs the multi-process forms instead (N processes under ``jax.distributed``, one device each:
GPUs): a peer process killed mid-collective (SIGKILL during a chain of calls), a process that stops taking part,
and a process that calls a different size or op. Each surviving process reports when and how its call failed
and whether it could exit; the report gives time to error after the kill and every process's exit status. Where
GPU kernels stop instead of trapping (``JAX_MSCCLPP_TRAP_ON_FAILURE=0``) a failed call returns: each process then
reports whether its outputs were poisoned and how the program's next call was refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from ..bench import launcher, machine

AXIS = "x"
BLOCK = 1024  # elements per rank of the scenarios' float32 operand
LOST_RANK = 5  # the rank that goes missing in the single-process scenarios (mesh of 8 devices)
RESULT_TAG = "FAULT_RESULT "


@dataclasses.dataclass
class Scenario:
    name: str
    description: str
    expect: str  # "lost peer" (survivors time out naming the peer) | "mismatch" (all fail at once naming both)


SCENARIOS = (
    Scenario("skipped_call", f"rank {LOST_RANK} skips one psum (1pa_ll)", "lost peer"),
    Scenario("stopped_mid_call", f"rank {LOST_RANK} stops after the first of the two exchanges of a psum (2pa_hb)",
             "lost peer"),
    Scenario("mismatched_op", "rank 0 calls pmax where the others call psum", "mismatch"),
    Scenario("mismatched_size", "rank 0 reduces half as many elements as the others", "mismatch"),
    Scenario("mismatched_collective", "rank 0 calls all_gather where the others call psum", "mismatch"),
    Scenario("mismatched_dtype", "rank 0 reduces int32 where the others reduce float32", "mismatch"),
    Scenario("mismatched_algorithm", "rank 0 forces 1pa_ll where the others force 2pa_hb", "mismatch"),
    Scenario("plan_vs_builtin", "rank 0 runs a registered 2PA-HB plan where the others run the built-in 2pa_hb",
             "mismatch"),
)
MULTI_PROCESS_SCENARIOS = ("killed_peer", "stalled_peer", "mismatched_size", "mismatched_op")
PLAN_NAME = "faults_allreduce_2pa_hb"


# ---- one process, CPU devices --------------------------------------------------------------------------------

def _diverging(first, others):
    """Rank 0 runs ``first``, every other rank ``others`` (a user error a cond on the axis index can make)."""
    from jax import lax

    from ... import _compat

    def run(v):
        return lax.cond(lax.axis_index(AXIS) == 0, lambda a: _compat.make_varying(first(a), (AXIS,)),
                        lambda a: _compat.make_varying(others(a), (AXIS,)), v)

    return run


def _program(name: str):
    """The per-device function of scenario ``name``."""
    import jax.numpy as jnp

    import jax_mscclpp as jm

    psum = lambda v: jm.psum(v, AXIS)  # noqa: E731
    if name == "skipped_call":
        return lambda v: jm.psum(v, AXIS, algorithm="1pa_ll")
    if name == "stopped_mid_call":
        return lambda v: jm.psum(v, AXIS, algorithm="2pa_hb")
    if name == "mismatched_op":
        return _diverging(lambda v: jm.pmax(v, AXIS), psum)
    if name == "mismatched_size":
        return _diverging(lambda v: jnp.concatenate([psum(v[: BLOCK // 2]), v[BLOCK // 2:]]), psum)
    if name == "mismatched_collective":
        return _diverging(lambda v: jm.all_gather(v[: BLOCK // 8], AXIS, tiled=True), psum)
    if name == "mismatched_dtype":
        return _diverging(lambda v: psum(v.astype(jnp.int32)).astype(v.dtype), psum)
    if name == "mismatched_algorithm":
        return _diverging(lambda v: jm.psum(v, AXIS, algorithm="1pa_ll"),
                          lambda v: jm.psum(v, AXIS, algorithm="2pa_hb"))
    if name == "plan_vs_builtin":
        return _diverging(lambda v: jm.psum(v, AXIS, algorithm=PLAN_NAME),
                          lambda v: jm.psum(v, AXIS, algorithm="2pa_hb"))
    raise ValueError(f"unknown scenario {name!r}; known: {', '.join(s.name for s in SCENARIOS)}")


def _names_the_fault(scenario: Scenario, message: str) -> bool:
    if scenario.expect == "mismatch":
        # A rank that found the mismatch names both calls; on GPUs a peer it stopped names it and the calls too.
        return "mismatched collective calls" in message and (message.count(" called ") >= 2 or
                                                             "failed the communicator" in message)
    return f"peer {LOST_RANK}" in message or "stopped after" in message


def run_scenario(scenario: Scenario, devices: list, timeout_s: float) -> dict:
    """Runs one scenario on a communicator of its own over ``devices``; returns its record."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from ...communicator import Communicator
    from ...testing import faults

    mesh = Mesh(np.array(devices, dtype=object), (AXIS,))
    comm = Communicator(mesh, AXIS)
    x = jax.device_put(jnp.asarray(np.random.default_rng(7).standard_normal(len(devices) * BLOCK), jnp.float32),
                       NamedSharding(mesh, P(AXIS)))
    f = jax.jit(jax.shard_map(_program(scenario.name), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))
    f.lower(x).compile()  # compile before the clock starts
    lost = mesh.devices[LOST_RANK]
    if scenario.name == "skipped_call":
        faults.skip_next_calls(comm, lost)
    elif scenario.name == "stopped_mid_call":
        faults.stop_mid_call(comm, lost, exchanges=1)
    error = None
    with faults.timeout(timeout_s):
        started = time.monotonic()
        try:
            jax.block_until_ready(f(x))
        except Exception as e:  # noqa: BLE001 - the fault must surface as an exception
            error = e
        wall = time.monotonic() - started
    from ..._native import native

    failures = [(rank, seconds, message) for _group, rank, seconds, message in native.host_failures(comm.id)]
    comm.destroy()
    first_by_rank = {}
    for rank, seconds, message in failures:
        first_by_rank.setdefault(rank, (seconds, message))
    expected_ranks = [r for r in range(len(devices)) if not (scenario.expect == "lost peer" and r == LOST_RANK)]
    survivors_failed = all(r in first_by_rank for r in expected_ranks)
    named = all(_names_the_fault(scenario, first_by_rank[r][1]) for r in expected_ranks if r in first_by_rank)
    within = all(first_by_rank[r][0] <= timeout_s * 1.5 + 1.0 for r in expected_ranks if r in first_by_rank)
    if scenario.expect == "mismatch":  # no rank may wait for the limit: the mismatch is seen at once
        within = within and all(first_by_rank[r][0] < timeout_s for r in expected_ranks if r in first_by_rank)
    recovered = _fresh_communicator_works(devices)
    return {
        "scenario": scenario.name,
        "description": scenario.description,
        "expect": scenario.expect,
        "timeout_s": timeout_s,
        "raised": error is not None,
        "error": None if error is None else f"{type(error).__name__}: {error}"[:1500],
        "wall_s": round(wall, 4),
        "rank_seconds": {str(r): round(s, 4) for r, (s, _) in sorted(first_by_rank.items())},
        "max_rank_s": round(max((s for s, _ in first_by_rank.values()), default=0.0), 4),
        "rank_errors": {str(r): m[:600] for r, (_, m) in sorted(first_by_rank.items())},
        "every_rank_failed": survivors_failed,
        "errors_name_the_fault": named,
        "within_limit": within,
        "recovered": recovered,
        "ok": error is not None and survivors_failed and named and within and recovered,
    }


def _fresh_communicator_works(devices: list) -> bool:
    """A new communicator on the same devices computes psum as lax does."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    import jax_mscclpp as jm

    mesh = Mesh(np.array(devices, dtype=object), (AXIS,))
    x = jnp.asarray(np.random.default_rng(3).integers(-1000, 1000, len(devices) * 16), jnp.int32)
    ours = jax.jit(jax.shard_map(lambda v: jm.psum(v, AXIS), mesh=mesh, in_specs=P(AXIS), out_specs=P()))(x)
    ref = jax.jit(jax.shard_map(lambda v: lax.psum(v, AXIS), mesh=mesh, in_specs=P(AXIS), out_specs=P()))(x)
    ok = bool(np.array_equal(np.asarray(ours), np.asarray(ref)))
    from ...communicator import Communicator

    Communicator(mesh, AXIS).destroy()
    return ok


def run_single_process(devices: list, timeout_s: float, names=None, log=print) -> list[dict]:
    """Records of the scenarios named (all by default); those of a lost peer, which inject it, are skipped (logged)
    in a build without the fault hooks (``jax_mscclpp.testing.faults.HOOKS_BUILT``)."""
    import jax_mscclpp as jm
    from ...dsl import library
    from ...testing import faults

    jm.register_algorithm(library.allreduce_2pa_hb, name=PLAN_NAME, min_bytes=1 << 62, platforms=("cpu",))
    records = []
    try:
        for scenario in SCENARIOS:
            if names and scenario.name not in names:
                continue
            if scenario.expect == "lost peer" and not faults.HOOKS_BUILT:
                log(f"skip {scenario.name}: this build has no fault hooks (the testing build has them)")
                continue
            record = run_scenario(scenario, devices, timeout_s)
            records.append(record)
            log(f"{'ok  ' if record['ok'] else 'FAIL'} {scenario.name}: raised after {record['wall_s']:.3f} s "
                f"(slowest rank {record['max_rank_s']:.3f} s, limit {timeout_s:g} s); "
                f"rank 0: {record['rank_errors'].get('0', record['rank_errors'].get('1', '-'))[:220]}")
    finally:
        jm.unregister_algorithm(PLAN_NAME)
    return records


# ---- several processes (GPUs) ----------------------------------------------------------------------------------

def _print_threads() -> None:
    """Every thread of this process, as Python sees them (faulthandler) and as the kernel does (the state, the
    wait channel and the system call of each task, from /proc: a thread in the GPU driver is in an ioctl)."""
    print("THREADS OF A PROCESS STILL IN ITS CALL", flush=True)
    faulthandler.dump_traceback(file=sys.stdout)
    for task in sorted(os.listdir("/proc/self/task"), key=int):
        fields = []
        for name in ("comm", "wchan", "syscall"):
            try:
                with open(f"/proc/self/task/{task}/{name}") as f:
                    fields.append(f.read().strip().split(" ")[0])
            except OSError:
                fields.append("?")
        print(f"task {task}: {' '.join(fields)}", flush=True)


def child(scenario: str, timeout_s: float, delay_s: float, heartbeat_s: int) -> int:
    """One process of a multi-process scenario; the last process is the faulty one. Prints its result as one line,
    then exits the usual way (JAX's shutdown included): the parent sees how long that took and how it ended. JAX
    declares a silent peer dead after ``heartbeat_s`` and then aborts the survivors, so that bounds a clean exit."""
    process, count = launcher.initialize_child(heartbeat_timeout_seconds=heartbeat_s,
                                               shutdown_timeout_seconds=heartbeat_s)
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jax_mscclpp as jm
    from ... import _compat, settings
    from ...communicator import Communicator
    from ...testing import faults

    faulty = process == count - 1
    mesh = Mesh(np.array(jax.devices(), dtype=object), (AXIS,))
    comm = Communicator(mesh, AXIS)
    sharding = NamedSharding(mesh, P(AXIS))
    block = 1 << 18

    def operand(n):
        return jax.make_array_from_callback((count * n,), sharding,
                                            lambda index: np.ones(n, np.float32) * (1 + process))

    def chain(reduce):
        def run(v):
            return lax.fori_loop(0, 64, lambda i, a: lax.pcast(reduce(a, AXIS), AXIS, to="varying") * 0.5, v)
        return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))

    healthy = chain(jm.psum)
    x = operand(block)
    jax.block_until_ready(healthy(x))  # everyone compiles and runs once
    _compat.barrier(f"jax_mscclpp_faults_ready_{scenario}", heartbeat_s)
    result = {"process": process, "faulty": faulty, "scenario": scenario}
    program, data = healthy, x
    if faulty and scenario == "mismatched_size":
        program, data = healthy, operand(block // 2)
    elif faulty and scenario == "mismatched_op":
        program = chain(jm.pmax)
    if faulty and scenario == "killed_peer":
        def kill():
            time.sleep(delay_s)
            print(f"{RESULT_TAG}{json.dumps({**result, 'killed_at': time.time()})}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
    if faulty and scenario == "stalled_peer":
        result["stalled_at"] = time.time()
        print(f"{RESULT_TAG}{json.dumps(result)}", flush=True)
        time.sleep(timeout_s * 3 + 10)  # alive, but never calls again
        return 0
    started = time.time()
    # A process still in its call past the limit prints where each of its threads is (stderr, which the parent
    # keeps as the output tail): what a hang that no bounded wait catches is waiting for.
    stuck = threading.Timer(timeout_s + 5, _print_threads)
    stuck.daemon = True
    stuck.start()
    with faults.timeout(timeout_s):
        try:
            deadline = time.monotonic() + timeout_s * 3 + delay_s + 30
            while time.monotonic() < deadline:  # a peer killed mid-chain: the error comes on some call
                out = jax.block_until_ready(program(data))
                if scenario != "killed_peer":
                    break
            result["raised"] = False
        except Exception as e:  # noqa: BLE001 - the fault must surface as an exception
            result["raised"] = True
            result["error"] = f"{type(e).__name__}: {e}"[:1500]
        result["started_at"], result["failed_at"] = started, time.time()
        if not result["raised"] and settings.stops_on_failure():
            # Kernels that stop instead of trapping: the failed call returns with its outputs poisoned (all bits
            # set), and the program's next call is refused with the record (docs/reliability.md).
            result["outputs_poisoned"] = bool(np.isnan(np.asarray(out.addressable_shards[0].data)).all())
            try:
                jax.block_until_ready(program(data))
                result["next_call_error"] = None
            except Exception as e:  # noqa: BLE001
                result["next_call_error"] = f"{type(e).__name__}: {e}"[:1500]
        try:  # inside the block: a record's message quotes the limit in force when it is read
            result["comm_errors"] = comm.errors()[:8]
        except Exception as e:  # noqa: BLE001
            result["comm_errors"] = [f"errors() failed: {e}"]
    result["platform"] = jax.devices()[0].platform
    result["ours_ran"] = comm.fallback_reason is None
    result["exiting_at"] = time.time()
    stuck.cancel()
    print(f"{RESULT_TAG}{json.dumps(result)}", flush=True)
    return 0


def run_multi_process(processes: int, scenario: str, timeout_s: float, delay_s: float, heartbeat_s: int,
                      log=print) -> dict:
    """Launches ``processes`` children for ``scenario`` and gathers what each reported and how it ended. Unlike
    ``bench.launcher.launch`` it leaves the others running when one dies: that is the fault under study."""
    coordinator = f"localhost:{launcher.free_port()}"
    argv = [sys.executable, "-m", "jax_mscclpp.tools.soak.faults", "--child", scenario, "--timeout", str(timeout_s),
            "--delay", str(delay_s), "--heartbeat", str(heartbeat_s)]
    children = [subprocess.Popen(argv, env=launcher.child_env(i, processes, coordinator), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True) for i in range(processes)]
    limit = timeout_s * 4 + delay_s + heartbeat_s * 3 + 120
    started = time.monotonic()
    outputs: list[str] = [""] * processes
    ended: list[float | None] = [None] * processes
    ended_at: list[float | None] = [None] * processes

    def collect(i: int) -> None:
        outputs[i] = children[i].stdout.read()
        children[i].wait()
        ended[i], ended_at[i] = time.monotonic() - started, time.time()

    readers = [threading.Thread(target=collect, args=(i,), daemon=True) for i in range(processes)]
    for r in readers:
        r.start()
    for i, r in enumerate(readers):
        r.join(timeout=max(0.0, limit - (time.monotonic() - started)))
        if r.is_alive():
            children[i].kill()
            r.join()
            outputs[i] += "\n(killed: still running past the limit)"
    reports = []
    for i, out in enumerate(outputs):
        lines = [json.loads(line[len(RESULT_TAG):]) for line in out.splitlines() if line.startswith(RESULT_TAG)]
        report = {"process": i, "exit_status": children[i].returncode, "ended_after_s": round(ended[i], 2),
                  "reports": lines, "output_tail": out[-20000:]}
        for line in lines:
            if "exiting_at" in line:
                report["exit_took_s"] = round(ended_at[i] - line["exiting_at"], 2)
        reports.append(report)
    fault_time = None
    for r in reports:
        for line in r["reports"]:
            fault_time = line.get("killed_at") or line.get("stalled_at") or fault_time
    for r in reports:
        for line in r["reports"]:
            if "failed_at" in line and line.get("raised"):
                reference = fault_time if fault_time is not None else line["started_at"]
                line["time_to_error_s"] = round(line["failed_at"] - reference, 3)
        log(f"process {r['process']}: exit status {r['exit_status']} ({r.get('exit_took_s')} s after reporting); "
            + "; ".join(f"raised={line.get('raised')} time_to_error={line.get('time_to_error_s')} "
                        + (f"outputs_poisoned={line['outputs_poisoned']} next call: "
                           f"{(line['next_call_error'] or 'not refused')[:200]} " if "outputs_poisoned" in line else "")
                        + f"{(line.get('error') or '')[:200]}" for line in r["reports"] if "raised" in line))
        if not any("raised" in line for line in r["reports"]):  # no report: where it was (Python stacks), if shown
            tail, marker = r["output_tail"], "THREADS OF A PROCESS STILL IN ITS CALL"
            stacks = tail[tail.find(marker):] if marker in tail else ""
            log(f"process {r['process']} made no report" + (f"; its threads:\n{stacks[:4000]}" if stacks else ""))
    return {"scenario": scenario, "processes": processes, "timeout_s": timeout_s, "fault_at": fault_time,
            "results": reports}


# ---- command line ----------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_mscclpp.tools.soak.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--timeout", type=float, default=2.0, help="JAX_MSCCLPP_TIMEOUT_S for the scenarios (default: 2)")
    p.add_argument("--scenarios", default=None,
                   help="comma list (default: all). One process: " + ", ".join(s.name for s in SCENARIOS)
                   + ". With --launch: " + ", ".join(MULTI_PROCESS_SCENARIOS))
    p.add_argument("--launch", type=int, default=None, metavar="N", help="the multi-process forms, N processes")
    p.add_argument("--delay", type=float, default=1.0, help="killed_peer: seconds into the chain (default: 1)")
    p.add_argument("--heartbeat", type=int, default=10,
                   help="launched processes: JAX's heartbeat and shutdown timeouts, seconds (default: 10)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the results as JSON to FILE")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else None
    if args.child is not None:
        return child(args.child, args.timeout, args.delay, args.heartbeat)
    if args.launch is not None:
        if args.launch < 2:
            parser.error("--launch needs at least 2 processes")
        results = []
        for name in names or MULTI_PROCESS_SCENARIOS:
            if name not in MULTI_PROCESS_SCENARIOS:
                parser.error(f"unknown multi-process scenario {name!r}; known: {', '.join(MULTI_PROCESS_SCENARIOS)}")
            print(f"== {name}: {args.launch} processes", flush=True)
            results.append(run_multi_process(args.launch, name, args.timeout, args.delay, args.heartbeat))
        if args.out:
            from . import record

            record.write_json(args.out, "faults", None, vars(args), {"multi_process": results})
            print(f"wrote {args.out}")
        return 0
    known = {s.name for s in SCENARIOS}
    for name in names or ():
        if name not in known:
            parser.error(f"unknown scenario {name!r}; known: {', '.join(sorted(known))}")
    machine.ensure_host_devices(machine.DEFAULT_HOST_DEVICES)
    import jax

    devices = jax.devices("cpu")
    if len(devices) < 8:
        parser.error("the single-process scenarios need 8 CPU devices (XLA_FLAGS=--xla_force_host_platform_"
                     "device_count=8, set before JAX starts)")
    records = run_single_process(devices[:8], args.timeout, names)
    held = sum(r["ok"] for r in records)
    print(f"faults: {held} of {len(records)} scenarios ended as they must (limit {args.timeout:g} s)")
    if args.out:
        from . import record

        record.write_json(args.out, "faults", devices[:8], vars(args), {"single_process": records})
        print(f"wrote {args.out}")
    return 0 if held == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
