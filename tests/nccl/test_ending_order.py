"""The order in which ncclCommDestroy and ncclCommAbort end a communicator of ours that has both parts, our
runtime's and NVIDIA's beside it (nccl/ending_order.h, which entry_points_custom.cc's end_communicator follows).
Such a communicator needs ranks on several GPUs, so the order is checked here on the header itself: a small program
compiled with the system C++ compiler ends stand-in parts that record what ran, in what order, and how.

Abort releases our runtime (not orderly: its kernels are stopped from the host) before NVIDIA's abort, which may
wait for the device and so must not wait behind a kernel of ours stuck on a peer; destroy ends NVIDIA's first and
ours (orderly) only once that succeeded, so that a failed destroy leaves a valid handle."""

import os
import shutil
import subprocess

import pytest

from tests.nccl.conftest import ROOT

NCCL_SUCCESS, NCCL_INTERNAL_ERROR = 0, 3

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ending_order.h"

using namespace jax_mscclpp::nccl;

int main(int argc, char** argv) {
  const bool aborting = std::string(argv[1]) == "abort";
  const ncclResult_t real_result = static_cast<ncclResult_t>(std::atoi(argv[2]));
  std::string steps;
  const ncclResult_t result = end_in_order(
      aborting, {[&] { steps += "real;"; return real_result; },
                 [&](bool orderly) { steps += orderly ? "runtime(orderly);" : "runtime(stopped);"; },
                 [&] { steps += "handle;"; }});
  std::printf("%d %s\n", static_cast<int>(result), steps.c_str());
  return 0;
}
"""


@pytest.fixture(scope="module")
def ending(tmp_path_factory):
    compiler = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("needs a C++ compiler")
    folder = tmp_path_factory.mktemp("ending_order")
    source, program = folder / "ending.cc", folder / "ending"
    source.write_text(PROGRAM)
    subprocess.run([compiler, "-std=c++17", "-I", str(ROOT / "nccl"), "-I", str(ROOT / "nccl" / "include"),
                    "-o", str(program), str(source)], check=True)

    def end(function: str, real_result: int) -> tuple[int, list[str]]:
        out = subprocess.run([str(program), function, str(real_result)], capture_output=True, text=True,
                             check=True).stdout.split()
        return int(out[0]), [s for s in (out[1] if len(out) > 1 else "").split(";") if s]

    return end


def test_abort_stops_our_runtime_before_nvidias_abort(ending):
    assert ending("abort", NCCL_SUCCESS) == (NCCL_SUCCESS, ["runtime(stopped)", "real", "handle"])


def test_a_failed_nvidia_abort_keeps_the_handle_with_our_runtime_already_stopped(ending):
    assert ending("abort", NCCL_INTERNAL_ERROR) == (NCCL_INTERNAL_ERROR, ["runtime(stopped)", "real"])


def test_destroy_ends_nvidias_first_then_ours_orderly(ending):
    assert ending("destroy", NCCL_SUCCESS) == (NCCL_SUCCESS, ["real", "runtime(orderly)", "handle"])


def test_a_failed_nvidia_destroy_leaves_ours_whole(ending):
    assert ending("destroy", NCCL_INTERNAL_ERROR) == (NCCL_INTERNAL_ERROR, ["real"])
