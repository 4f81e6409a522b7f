"""The GPU test suite (tests/gpu) in parts that each finish within ten minutes on one H200, with a JSON record.

    python3 bench/device/gpu_suite.py PART [PART ...] [--out DIR]

runs each part's pytest command from the repository root and writes DIR/gpu-suite-PART.json (machine, GPU count
and name, driver, date, versions, the command, passed, failed, skipped, errors, seconds); the exit status is
pytest's worst. ``--list`` prints the parts and their commands. The module must be built with the test harness
(``-C cmake.define.JAX_MSCCLPP_TESTING=ON``, the default where a GPU is visible). Every environment built here
keeps NVLink multicast off.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Part name -> (what it covers, pytest arguments, minutes it took on one H200).
PARTS = {
    "kernels": ("virtual ranks in one process: primitives, collective kernels, the executor, call checks, timeouts "
                "and the error paths, teardown, one process on every local GPU",
                ["tests/gpu", "--ignore=tests/gpu/test_jax_multiprocess.py", "--ignore=tests/gpu/test_nccl_library.py"],
                4),
    "processes": ("the JAX path across 2 and 4 processes sharing the GPUs: every algorithm, plans, command buffers "
                  "on and off, a lost peer",
                  ["tests/gpu/test_jax_multiprocess.py", "-k", "not large_world"], 4),
    "large_world": ("a communicator of 10 processes, more ranks than an emulated SwitchChannel holds",
                    ["tests/gpu/test_jax_multiprocess.py", "-k", "large_world"], 6),
    "nccl": ("XLA's own collectives (lax's and the partitioner's) through our libnccl.so.2, 2, 3 and 4 processes "
             "sharing the GPU, command buffers on and off", ["tests/gpu/test_nccl_library.py"], 5),
}

# A lost signal fails within this many seconds rather than the default 300.
TIMEOUT_S = "15"


def machine() -> dict:
    def query(field):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], text=True,
                                 capture_output=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        return [line.strip() for line in out.splitlines() if line.strip()]

    names = query("name")
    import jax

    return {"host": platform.node(), "gpus": len(names), "gpu": names[0] if names else None,
            "driver": (query("driver_version") or [None])[0], "python": platform.python_version(),
            "jax": jax.__version__}


def commit_here() -> str | None:
    """HEAD of the repository here, or None where the tree has no .git (a device's copy: pass --commit)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True, capture_output=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def counts(junit: Path) -> dict:
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def run_part(name: str, out_dir: Path, about: dict) -> int:
    _, args, _ = PARTS[name]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1")
    env.pop("JAX_MSCCLPP_NVLS", None)
    env.setdefault("JAX_MSCCLPP_TIMEOUT_S", TIMEOUT_S)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, f"--junitxml={junit}"]
        start = time.monotonic()
        rc = subprocess.run(command, cwd=ROOT, env=env).returncode
        seconds = round(time.monotonic() - start, 1)
        result = counts(junit) if junit.exists() else {"passed": 0, "failed": 0, "errors": 1, "skipped": 0}
    record = {"part": name, "covers": PARTS[name][0], "command": "python3 -m pytest " + " ".join(args),
              "date": datetime.date.today().isoformat(), "machine": about, **result, "seconds": seconds,
              "exit_status": rc, "timeout_s": env["JAX_MSCCLPP_TIMEOUT_S"]}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"gpu-suite-{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"gpu suite part {name}: {result['passed']} passed, {result['failed']} failed, {result['skipped']} "
          f"skipped, {result['errors']} errors in {seconds} s", flush=True)
    return rc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", metavar="PART", help=", ".join(PARTS))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "bench" / "results")),
                        help="folder for the records (default $OUT, else bench/results)")
    parser.add_argument("--list", action="store_true", help="print the parts and their commands")
    parser.add_argument("--commit", default=os.environ.get("COMMIT"),
                        help="the commit of the tree (default $COMMIT, else git rev-parse HEAD here)")
    args = parser.parse_args(argv)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    if args.list or not args.parts:
        for name, (covers, pytest_args, minutes) in PARTS.items():
            print(f"{name:<10} ~{minutes} min  python3 -m pytest {' '.join(pytest_args)}\n{'':<18}{covers}")
        return 0
    about = machine()
    about["commit"] = args.commit or commit_here()
    return max(run_part(name, args.out, about) for name in args.parts)


if __name__ == "__main__":
    sys.exit(main())
