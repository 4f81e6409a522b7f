"""Execution modes: plain dispatch, and XLA command buffers (CUDA graphs) on GPU.

A mode is a set of XLA compiler options applied per program (``Lowered.compile(compiler_options=...)``), so both
modes run in one process. On GPU, "plain" turns command buffers off and "cmdbuf" records fusions, custom calls
(ours) and collectives into one, even for tiny graphs. On CPU there are no command buffers: the mode does not
apply and is skipped with a notice.
"""

from __future__ import annotations

MODES = ("plain", "cmdbuf")

_GPU_OPTIONS = {
    "plain": {"xla_gpu_enable_command_buffer": ""},
    "cmdbuf": {
        "xla_gpu_enable_command_buffer": "FUSION,CUSTOM_CALL,COLLECTIVES",
        "xla_gpu_graph_min_graph_size": 1,
    },
}


class ModeNotApplicable(Exception):
    """The mode means nothing on this platform."""


def compiler_options(mode: str, platform: str) -> dict | None:
    """XLA compiler options for ``mode`` on ``platform`` (a jax platform name: "cpu", "gpu", "cuda", "rocm")."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if platform in ("gpu", "cuda", "rocm"):
        return dict(_GPU_OPTIONS[mode])
    if mode == "plain":
        return None
    raise ModeNotApplicable(
        f"mode {mode!r} does not apply on platform {platform!r}: XLA command buffers are a GPU feature"
    )
