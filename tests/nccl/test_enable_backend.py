"""enable_nccl_backend(): loads our libnccl.so.2 before JAX's backends start, so that dlopen("libnccl.so.2") finds
it; refuses, with a clear error, after them or beside another NCCL. JAX_MSCCLPP_NCCL=1 does it at interpreter start
and reaches every process started from there: a child started the way JAX's multi-process test launcher starts its
workers (`/proc/self/exe`, the parent's sys.path as PYTHONPATH: a virtual environment's site-packages is then never
processed), one started by subprocess with a copied environment, with -I or -S. Where it cannot take effect it says
so in one line, and info() names the library XLA binds. Each case runs in its own process; the switch's cases run in
a virtual environment made for the test, holding this checkout's start-up hook (nccl/jax_mscclpp_nccl.pth,
nccl/jax_plugins/) over this interpreter's packages."""

import filecmp
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.nccl.conftest import ROOT, run_worker

PROBE = Path(__file__).with_name("_switch_probe.py")
HOOK_FILES = {"jax_mscclpp_nccl.pth": ROOT / "nccl" / "jax_mscclpp_nccl.pth",
              os.path.join("jax_plugins", "jax_mscclpp_nccl.py"): ROOT / "nccl" / "jax_plugins" / "jax_mscclpp_nccl.py"}
NO_GPU = not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg"))


def test_enable_after_devices_raises(stand_in):
    r = run_worker("enable_after_devices", stand_in)
    assert r["raised"] is not None
    assert "backends are already started" in r["raised"] and "JAX_MSCCLPP_NCCL=1" in r["raised"]
    assert r["active"] is False


def test_enable_beside_another_nccl_raises(stand_in):
    r = run_worker("enable_beside_other_nccl", stand_in)
    assert r["raised"] is not None
    assert "another NCCL is already loaded" in r["raised"] and stand_in in r["raised"]


def test_enable_before_devices(stand_in, our_library):
    r = run_worker("enable_before_devices", stand_in)
    assert r["before"] is False
    assert r["devices"] >= 1
    assert r["soname_is_ours"], "dlopen('libnccl.so.2') did not answer with our library"
    assert r["version"] == 22809
    assert r["real_opened_before_devices"] == stand_in
    assert r["version_reached_the_loaded_stand_in"]
    status = r["status"]
    assert status["active"] is True and status["library"] == our_library
    assert status["real_nccl"] == stand_in and status["real_nccl_opened"] == stand_in


def test_enable_without_a_real_nccl_raises():
    r = run_worker("enable_without_real_nccl", "/nonexistent/libnccl.so.2")
    assert r["raised"] is not None
    assert "no real NCCL to forward to" in r["raised"]
    assert "cannot open the real NCCL named by JAX_MSCCLPP_REAL_NCCL: /nonexistent/libnccl.so.2" in r["raised"]


def test_environment_variable_enables_at_interpreter_start(stand_in, our_library):
    r = run_worker("startup_variable", stand_in, extra_env={"JAX_MSCCLPP_NCCL": "1"})
    if our_library not in r["mapped"]:
        pytest.fail(f"JAX_MSCCLPP_NCCL=1 did not load our library at start (mapped: {r['mapped']}); is "
                    "jax_mscclpp_nccl.pth installed in site-packages?")
    assert r["status"]["active"] is True


def test_without_the_variable_nothing_is_loaded_or_imported(stand_in):
    r = run_worker("startup_without_variable", stand_in)
    assert r["jax_imported_at_start"] is False
    assert r["mapped"] == []


# --- JAX_MSCCLPP_NCCL=1 in every process ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def switch_venv(tmp_path_factory, our_library) -> Path:
    """The python of a fresh virtual environment (its bin/python a symlink, as venv makes it) whose site-packages
    holds this checkout's hook files and a jax_mscclpp/lib/libnccl.so.2 link to ours, and sees this interpreter's
    packages (their folders as path lines, their .pth files but the installed hook's)."""
    home = tmp_path_factory.mktemp("switch_venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(home), "platbase": str(home)}))
    ours_dirs = [Path(d) for d in site.getsitepackages()]
    (purelib / "00_outer_packages.pth").write_text("".join(f"{d}\n" for d in ours_dirs))
    for folder in ours_dirs:
        for pth in sorted(folder.glob("*.pth")):
            if pth.name != "jax_mscclpp_nccl.pth":
                shutil.copy(pth, purelib / pth.name)
    for installed, source in HOOK_FILES.items():
        (purelib / installed).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, purelib / installed)
    (purelib / "jax_mscclpp" / "lib").mkdir(parents=True)
    (purelib / "jax_mscclpp" / "lib" / "libnccl.so.2").symlink_to(our_library)
    return home / "bin" / "python"


def probe(python: Path, args: list[str], *, switch: bool = True, extra_env: dict | None = None):
    """(JSON result, stderr) of _switch_probe.py ARGS under `python`, with JAX_MSCCLPP_NCCL=1 when `switch`, on the
    CPU, our runtime off, the stand-in as the real NCCL (extra_env)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_MSCCLPP_NCCL_RUNTIME="0", NCCL_NVLS_ENABLE="0")
    for name in ("JAX_MSCCLPP_NCCL", "JAX_MSCCLPP_REAL_NCCL", "JAX_MSCCLPP_NVLS", "LD_PRELOAD", "PYTHONPATH"):
        env.pop(name, None)
    if switch:
        env["JAX_MSCCLPP_NCCL"] = "1"
    env.update(extra_env or {})
    proc = subprocess.run([str(python), str(PROBE), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def switch_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("jax_mscclpp: JAX_MSCCLPP_NCCL=1")]


def test_launcher_child_binds_ours(switch_venv, stand_in, our_library):
    """The launcher's child never runs the .pth (its interpreter is the base one: the venv's site-packages is only a
    PYTHONPATH entry); ours reaches it through the LD_PRELOAD the parent's switch exported, and stays bound when
    NVIDIA's library (the stand-in) is loaded afterwards, as JAX's CUDA plugin loads it."""
    top, _ = probe(switch_venv, ["launch", "other_after"], extra_env={"JAX_MSCCLPP_REAL_NCCL": stand_in})
    assert top["at_start"]["backend_loaded"] and not top["at_start"]["jax_imported"]
    assert top["bound"] == {"path": our_library, "ours": True}
    assert top["ld_preload"].split()[0] == our_library
    launched = top["launched"]
    assert launched["returncode"] == 0, launched["stderr"][-3000:]
    child = launched["child"]
    assert not child["at_start"]["backend_loaded"], "the child ran the .pth: the launcher's mechanism is not reproduced"
    assert child["prefix"] != top["prefix"] and child["executable"] == "/proc/self/exe"
    assert child["bound"] == {"path": our_library, "ours": True}
    assert stand_in in child["mapped"] and child["real_nccl"] == stand_in


def test_launcher_child_without_a_switching_parent(switch_venv, stand_in):
    """The variable only in the workers' environment (a launcher adding it): nothing of ours runs at the child's
    start and NVIDIA's library (the stand-in) is bound; JAX's plugin discovery finds our check there, which raises at
    the first CUDA backend use (GPU only: tests/gpu/test_nccl_switch.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_MSCCLPP_NCCL", "LD_PRELOAD", "PYTHONPATH")}
    env.update(JAX_PLATFORMS="cpu", JAX_MSCCLPP_NCCL_RUNTIME="0", JAX_MSCCLPP_REAL_NCCL=stand_in)
    launcher = ("import os, subprocess, sys; env = dict(os.environ, JAX_MSCCLPP_NCCL='1', "
                "PYTHONPATH=os.pathsep.join(sys.path));"
                f"sys.exit(subprocess.run(['/proc/self/exe', {str(PROBE)!r}, 'other_after'], env=env).returncode)")
    run = subprocess.run([str(switch_venv), "-c", launcher], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    child = json.loads(run.stdout.strip().splitlines()[-1])
    assert not child["at_start"]["backend_loaded"]
    assert child["bound"] == {"path": stand_in, "ours": False}
    assert child["hook_found"] and child["check_registered"]
    assert "Traceback" not in run.stderr


def test_import_after_another_nccl_says_why(switch_venv, stand_in):
    """JAX_MSCCLPP_NCCL=1 met first at `import jax_mscclpp`, after NVIDIA's library (the stand-in) was loaded: one
    line on stderr, no traceback, and info() names the bound library and why ours is not active."""
    result, stderr = probe(switch_venv, ["variable_after_other"], switch=False,
                           extra_env={"JAX_MSCCLPP_REAL_NCCL": stand_in})
    assert not result["at_start"]["backend_loaded"]
    status = result["status"]
    assert status["active"] is False and status["requested"] is True and status["bound"] == stand_in
    assert "another NCCL is already loaded" in status["reason"] and stand_in in status["reason"]
    lines = switch_lines(stderr)
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert ("no CUDA device is visible" if NO_GPU else stand_in) in lines[0]


@pytest.mark.parametrize("flags", ["-", "-I", "-S"])
def test_subprocess_with_a_copied_environment_binds_ours(switch_venv, stand_in, our_library, flags):
    """subprocess.run([sys.executable, ...], env=os.environ.copy()): the child runs the .pth itself (and opens the
    real NCCL at start); with -S it runs no site at all and ours comes through LD_PRELOAD."""
    top, _ = probe(switch_venv, ["spawn", flags, "report"], extra_env={"JAX_MSCCLPP_REAL_NCCL": stand_in})
    launched = top["launched"]
    assert launched["returncode"] == 0, launched["stderr"][-3000:]
    child = launched["child"]
    assert child["at_start"]["backend_loaded"] is (flags != "-S")
    assert not child["at_start"]["jax_imported"]
    assert child["bound"] == {"path": our_library, "ours": True}
    assert child["ld_preload"].split().count(our_library) == 1
    if flags != "-S":
        assert stand_in in child["mapped"], "the real NCCL was not opened at interpreter start"


@pytest.mark.skipif(not NO_GPU, reason="a CUDA device is visible here")
@pytest.mark.parametrize("real", ["stand_in", "missing"])
def test_without_a_gpu_the_switch_is_one_line(switch_venv, stand_in, real):
    real_path = stand_in if real == "stand_in" else "/nonexistent/libnccl.so.2"
    _, stderr = probe(switch_venv, ["report"], extra_env={"JAX_MSCCLPP_REAL_NCCL": real_path})
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1 and len(switch_lines(stderr)) == 1, stderr
    assert "changes nothing here: no CUDA device is visible" in stderr and "XLA:CPU never calls NCCL" in stderr


def test_another_nccl_first_is_one_line_and_info_names_it(switch_venv, stand_in):
    """Another libnccl.so.2 bound before the interpreter starts (LD_PRELOAD of NVIDIA's): one line at start, no
    traceback, and info() names the bound library and why ours is not active."""
    result, stderr = probe(switch_venv, ["other_first"],
                           extra_env={"JAX_MSCCLPP_REAL_NCCL": stand_in, "LD_PRELOAD": stand_in})
    assert "Traceback" not in stderr and len(switch_lines(stderr)) == 1, stderr
    assert result["at_start"]["backend_loaded"]
    status = result["status"]
    assert status["active"] is False and status["bound"] == stand_in and stand_in in status["mapped"]
    assert "another NCCL is already loaded" in status["reason"] and stand_in in status["reason"]
    assert stand_in not in result["ld_preload"].split()[1:], "our switch exported something after a failure"


def test_without_the_variable_the_hook_costs_one_lookup(switch_venv):
    result, stderr = probe(switch_venv, ["report"], switch=False)
    assert result["at_start"] == {"backend_loaded": False, "jax_plugins_imported": False, "jax_imported": False}
    assert result["mapped"] == [] and result["ld_preload"] == "" and stderr == ""


def test_installed_hook_is_this_checkout(our_library):
    """The hook files installed beside our library are this checkout's (a stale install keeps an older switch)."""
    site_packages = Path(our_library).parents[2]
    stale = [name for name, source in HOOK_FILES.items()
             if not (site_packages / name).is_file() or not filecmp.cmp(site_packages / name, source, shallow=False)]
    assert not stale, f"{stale} in {site_packages} differ from the checkout's: reinstall (python -m pip install -e .)"


def test_loading_ours_allows_xla_ragged_all_to_all_over_nccl(monkeypatch):
    """Where the running XLA knows the flag that lets it run a ragged all-to-all as NCCL sends and receives (which
    ours serves as one launch per group), loading ours sets it, once, keeping the flags there; where XLA does not
    know it, nothing is added (an unknown flag stops XLA)."""
    from jax_mscclpp import nccl_backend

    flag = nccl_backend.RAGGED_OVER_NCCL_FLAG
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setattr(nccl_backend, "_xla_knows_flag", lambda name: name == flag)
    nccl_backend._allow_ragged_all_to_all_over_nccl()
    nccl_backend._allow_ragged_all_to_all_over_nccl()
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x --{flag}=true"
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr(nccl_backend, "_xla_knows_flag", lambda name: False)
    nccl_backend._allow_ragged_all_to_all_over_nccl()
    assert os.environ["XLA_FLAGS"] == ""


def test_xla_knows_flag_reads_the_installed_jaxlib():
    from jax_mscclpp import nccl_backend

    assert nccl_backend._xla_knows_flag("xla_gpu_enable_command_buffer")
    assert not nccl_backend._xla_knows_flag("xla_no_such_flag_anywhere_" + "x" * 8)
