"""README's test command spreads the suite over the cores with pytest-xdist, but the suite is not tied to it: plain
pytest, without the plugin, collects and runs it (the suite's xdist hook is optional)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_test_that_plain_pytest_runs():
    pass


def test_plain_pytest_runs_the_suite_without_xdist():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
         f"{Path(__file__).relative_to(REPO)}::test_a_test_that_plain_pytest_runs"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout
