"""The build backend: scikit-build-core's, asking for jaxlib, whose XLA FFI headers the build needs, pinned to the
oldest jaxlib the package supports (``HEADERS_JAXLIB``).

A handler declares the FFI API version of the headers it was compiled against, and a jaxlib refuses a handler
whose version is newer than its own framework's; a newer jaxlib accepts an older handler. Compiled against the
oldest supported jaxlib's headers, one module works with every supported jax (pyproject.toml's range). The pin is
for the headers only: the module does not link jaxlib, and the jax a user installs is independent of it.

pip installs the build requirements into a new environment for every install. jaxlib (and the numpy and scipy it
brings) is asked for only while no earlier build in build/ has staged the pinned release's headers (CMakeLists.txt
records which jaxlib they came from): without it a rebuild's environment takes a second or two instead of most of
the rebuild's time. A build without isolation (``--no-build-isolation``) uses the environment's jaxlib's headers or
staged ones, whichever the oldest supported jaxlib accepts, and otherwise fails naming the headers it found
(CMakeLists.txt; ``-C cmake.define.JAX_MSCCLPP_NEWER_FFI_HEADERS=ON`` takes the environment's newer ones instead).
"""

from __future__ import annotations

import glob
import os

from scikit_build_core import build as _scikit_build
from scikit_build_core.build import *  # noqa: F403  (the PEP 517 hooks)

HEADERS_JAXLIB = "0.10.2"  # the oldest supported release (pyproject.toml's dependencies)

# Written by CMakeLists.txt beside the staged headers: the jaxlib release they were copied from.
_STAGED_FROM = os.path.join("build", "*", "staged", "jaxlib_include", "jaxlib_version.txt")


def _staged_release(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def _jaxlib() -> list[str]:
    if any(_staged_release(path) == HEADERS_JAXLIB for path in glob.glob(_STAGED_FROM)):
        return []
    return [f"jaxlib=={HEADERS_JAXLIB}"]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return [*_scikit_build.get_requires_for_build_wheel(config_settings), *_jaxlib()]


def get_requires_for_build_editable(config_settings=None) -> list[str]:
    return [*_scikit_build.get_requires_for_build_editable(config_settings), *_jaxlib()]
