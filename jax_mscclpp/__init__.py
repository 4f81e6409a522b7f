"""jax_mscclpp: MSCCL++-style collectives for JAX, as drop-in replacements for the lax collectives.

Use them inside ``jax.shard_map`` under ``jax.jit``::

    y = jax_mscclpp.psum(x, "tp")
"""

from ._jax_versions import require_supported_jax as _require_supported_jax

_require_supported_jax()  # an ImportError naming the supported range, before anything reaches JAX's internals

from .settings import check_environment as _check_environment

_check_environment()  # a value of a JAX_MSCCLPP_* variable that is not understood is an error, before any use

from ._native import CUDA_BUILT as _CUDA_BUILT  # registers the FFI targets
from .collectives import (
    all_gather,
    all_reduce,
    all_to_all,
    pmax,
    pmean,
    pmin,
    psum,
    psum_scatter,
    reduce_scatter,
)
from .permute import pbroadcast, ppermute, pshuffle
from .ragged import ragged_all_to_all
from . import fused
from . import moe
from .communicator import Communicator
from .explain import explain
from .info import info
# Bound as the package's attribute here: JAX_MSCCLPP_NCCL=1's start-up hook may have loaded the module before
# the package (jax_plugins/jax_mscclpp_nccl.py), and then no import of it sets that attribute.
from . import nccl_backend
from .nccl_backend import enable_nccl_backend
from .overlap import psum_done, psum_start, value_and_psum_grad
from .plans import register_algorithm, unregister_algorithm
from .recovery import reset
from .rewrite import rewrite

__version__ = "0.1.0"

__all__ = [
    "Communicator",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "enable_nccl_backend",
    "explain",
    "info",
    "pbroadcast",
    "pmax",
    "pmean",
    "register_algorithm",
    "unregister_algorithm",
    "pmin",
    "ppermute",
    "psum",
    "psum_done",
    "psum_start",
    "psum_scatter",
    "pshuffle",
    "ragged_all_to_all",
    "reduce_scatter",
    "reset",
    "rewrite",
    "value_and_psum_grad",
]
