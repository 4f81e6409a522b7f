"""The build backend: scikit-build-core's, asking for jaxlib (whose XLA FFI headers the build needs) only while no
earlier build in build/ has staged those headers. pip installs the build requirements into a new environment for
every install; without jaxlib (and the numpy and scipy it brings) that takes a second or two instead of most of a
rebuild's time. `rm -rf build` starts over with the headers of the newest jaxlib.
"""

from __future__ import annotations

import glob
import os

from scikit_build_core import build as _scikit_build
from scikit_build_core.build import *  # noqa: F403  (the PEP 517 hooks)

_STAGED = os.path.join("build", "*", "staged", "jaxlib_include", "xla", "ffi", "api", "ffi.h")


def _jaxlib() -> list[str]:
    return [] if glob.glob(_STAGED) else ["jaxlib>=0.5"]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return [*_scikit_build.get_requires_for_build_wheel(config_settings), *_jaxlib()]


def get_requires_for_build_editable(config_settings=None) -> list[str]:
    return [*_scikit_build.get_requires_for_build_editable(config_settings), *_jaxlib()]
