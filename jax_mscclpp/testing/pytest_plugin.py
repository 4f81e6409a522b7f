"""The pytest plugin, by its name inside the package: ``-p jax_mscclpp.testing.pytest_plugin`` loads it as
``-p pytest_jax_mscclpp`` does (the module the ``pytest11`` entry point names, beside the package so that loading it
imports nothing of jax_mscclpp: pytest_jax_mscclpp's docstring has the fixtures, markers and options)."""

from pytest_jax_mscclpp import *  # noqa: F403
from pytest_jax_mscclpp import __all__  # noqa: F401
