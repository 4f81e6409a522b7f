"""The jax releases this package supports, checked when it is imported, before anything touches JAX's internals.

The range is the one pyproject.toml's dependencies state and CI tests (README.md, "Versions"): the internal APIs
``_compat.py`` reaches move between releases, and the native module is compiled against the oldest supported
jaxlib's XLA FFI headers (tools/build_backend.py), which an older jaxlib refuses when its backends start.
"""

from __future__ import annotations

import importlib.metadata
import re

# [lowest, highest): (major, minor) of jax and of jaxlib.
SUPPORTED_JAX = ((0, 10), (0, 13))
TESTED_JAX = ("0.10.2", "0.11.2", "0.12.0.1")


def supported_range() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_JAX
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def release_of(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string ("0.12.0.1" -> (0, 12); "0.13.0.dev20260101" -> (0, 13)), or None."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def unsupported(versions: dict) -> list[str]:
    """The entries of ``versions`` ({distribution: version string}) outside the supported range, as "name version"."""
    lowest, highest = SUPPORTED_JAX
    return [f"{name} {version}" for name, version in versions.items()
            if (release := release_of(version)) is None or not lowest <= release < highest]


def installed_versions() -> dict:
    """{"jax": version, "jaxlib": version} of the copies this Python imports."""
    import jaxlib  # its package module holds the version only; JAX's backends stay unstarted

    try:
        jax_version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        import jax

        jax_version = jax.__version__
    return {"jax": jax_version, "jaxlib": jaxlib.__version__}


def require_supported_jax(versions: dict | None = None) -> None:
    """Raises ImportError naming the supported range when the installed jax or jaxlib is outside it."""
    outside = unsupported(installed_versions() if versions is None else versions)
    if outside:
        wanted = supported_range()
        raise ImportError(
            f"jax_mscclpp supports jax and jaxlib {wanted} (tested: {', '.join(TESTED_JAX)}); this Python has "
            f"{' and '.join(outside)}. Install a supported release: python -m pip install 'jax{wanted}' "
            f"'jaxlib{wanted}' (with the jax-cuda plugin of the same release on GPUs).")
