"""Collectives that run beside compute: a sum started now and joined later, and gradients summed during the
backward pass (docs/architecture.md, "Overlap").

``psum_start(x, axis)`` starts the sum of ``x``; ``psum_done(started)`` returns it. On GPUs our kernel runs between
the two on a side stream of the device, over a communicator of its own (its scratch and epochs never meet those of
the calls on XLA's stream), with at most ``primitives.OVERLAP_MAX_BLOCKS`` thread blocks; XLA's compute stream waits
for it only at the done. The done takes the start's operand and result, so XLA keeps both alive until then. Where
the selection picks lax, or on CPU devices, the start is a complete collective and the done returns it.

XLA schedules a start and its done as it likes, usually side by side; ``value_and_psum_grad`` places them for the
common case, a model that is a sequence of layers: each layer's gradient sum starts as soon as its backward step
has produced it, and every sum is joined after the whole backward pass, so that the sums of later layers run
beside the backward steps of earlier ones, as XLA's own asynchronous all-reduces do.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from . import _compat, _native, primitives
from ._types import Collective
from .collectives import bucketed, psum, reduction_leaves, unbucketed

_call_ids = itertools.count(1)


# Typed and lowered as the all_reduce primitive; its call_id makes the lowering a started call.
all_reduce_start_p = primitives._make_primitive(Collective.ALL_REDUCE, "mscclpp_all_reduce_start")


def _outside_jit(*args, **params):
    raise RuntimeError("psum_done runs only inside jax.shard_map under jax.jit")


done_p = Primitive("mscclpp_done")
done_p.def_impl(_outside_jit)
# The sum is invariant over the summed axes, whatever a barrier between start and done made of its type.
done_p.def_abstract_eval(lambda operand, started, *, axes, call_id: _compat.with_varying_axes(
    started, _compat.varying_axes(started) - frozenset(axes)))


def _lower_done(ctx, operand, started, *, axes, call_id):
    if call_id not in primitives._started_on_side_stream(ctx):
        return [started]  # the start lowered to a complete collective
    target = jax.ffi.ffi_lowering(_native.native.DONE_TARGET, has_side_effect=True, operand_output_aliases={1: 0})
    return target(ctx, operand, started, call_id=np.int64(call_id))


mlir.register_lowering(done_p, lambda ctx, operand, started, **params: [started])
if _native.CUDA_BUILT:
    mlir.register_lowering(done_p, _lower_done, platform="cuda", cacheable=False)


class Started:
    """Sums started by ``psum_start``, to be joined by ``psum_done``. A pytree (it may cross
    ``lax.optimization_barrier`` and control flow inside one traced function); not a value to compute with.
    ``shapes``: the summed leaves' types; ``calls``: the leaves each call sums (``collectives.bucketed``)."""

    def __init__(self, treedef, shapes, calls, axes, call_ids, operands, results):
        self.treedef, self.shapes, self.calls, self.axes, self.call_ids = treedef, shapes, calls, axes, call_ids
        self.operands, self.results = list(operands), list(results)


jax.tree_util.register_pytree_node(
    Started,
    lambda s: ((s.operands, s.results), (s.treedef, s.shapes, s.calls, s.axes, s.call_ids)),
    lambda aux, children: Started(*aux, *children))


def psum_start(x, axis_name, *, algorithm: str | None = None) -> Started:
    """Starts summing ``x`` (a pytree) over ``axis_name``; ``psum_done`` of the result returns what
    ``psum(x, axis_name)`` would. Small leaves share a call, as in ``psum``. Between the two, independent work may
    run beside the sum; nothing may read the sum before its done. Contract: every start is joined by
    ``psum_done`` in the same jitted function; a start left unjoined leaves a kernel reading and writing buffers
    that XLA may free or reuse once the function returns."""
    leaves, treedef, axes, world = reduction_leaves(x, "sum", "psum_start", axis_name, algorithm)
    shapes = tuple(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves)
    if world == 1:  # nothing to sum: the leaves are the result
        return Started(treedef, shapes, tuple((i,) for i in range(len(leaves))), axes, (), [], leaves)
    calls = bucketed(leaves, axes)
    call_ids = tuple(next(_call_ids) for _ in calls)
    operands = [operand for _, operand in calls]
    results = [all_reduce_start_p.bind(operand, axes=axes, world=world, op="sum", algorithm=algorithm,
                                       call_id=call_id)
               for operand, call_id in zip(operands, call_ids)]
    return Started(treedef, shapes, tuple(tuple(call) for call, _ in calls), axes, call_ids, operands, results)


def psum_done(started: Started):
    """The sums ``started`` holds (``psum_start``), once they are complete."""
    if not isinstance(started, Started):
        raise TypeError(f"psum_done takes what psum_start returned, got {type(started).__name__}")
    joined = [done_p.bind(operand, result, axes=started.axes, call_id=call_id)
              for operand, result, call_id in zip(started.operands, started.results, started.call_ids)]
    if not started.call_ids:  # a world of one: the leaves themselves
        joined = started.results
    calls = [(list(call), None) for call in started.calls]
    return jax.tree_util.tree_unflatten(started.treedef, unbucketed(list(started.shapes), calls, joined))


def value_and_psum_grad(layers: Sequence[Callable], loss: Callable, axis_name, *, algorithm: str | None = None):
    """``f(params, x, *loss_args) -> (loss value, gradients summed over axis_name)`` for a model that is a sequence
    of layers: ``h = layers[i](params[i], h)`` from ``h = x``, then ``loss(h, *loss_args)`` (a scalar).

    The backward pass runs layer by layer from the last; each layer's parameter gradients are started with
    ``psum_start`` as soon as they exist, and the next backward step is ordered after that start; every sum is
    joined after the last backward step. The sums run beside the backward steps of the layers before theirs; the
    first layer's, which has nothing left to run beside, is a plain ``psum``. The result equals
    ``(loss(...), psum(jax.grad(...), axis_name))``."""
    layers = tuple(layers)
    if not layers:
        raise ValueError("value_and_psum_grad: layers is empty")
    if not all(callable(f) for f in layers) or not callable(loss):
        raise TypeError("value_and_psum_grad: layers must be callables f(params, h) -> h and loss a callable")

    def run(params, x, *loss_args):
        params = list(params)
        if len(params) != len(layers):
            raise ValueError(f"value_and_psum_grad: {len(layers)} layers but {len(params)} parameter entries")
        h, first_vjp = jax.vjp(lambda p: layers[0](p, x), params[0])  # no cotangent for x
        vjps = [first_vjp]
        for f, p in zip(layers[1:], params[1:]):
            h, vjp = jax.vjp(f, p, h)
            vjps.append(vjp)
        value, loss_vjp = jax.vjp(lambda out: loss(out, *loss_args), h)
        (cotangent,) = loss_vjp(jnp.ones_like(value))
        started = []
        for i in reversed(range(1, len(layers))):
            grads, cotangent = vjps[i](cotangent)
            pending = psum_start(grads, axis_name, algorithm=algorithm)
            # The next backward step waits for this start, not the other way round.
            pending, cotangent = lax.optimization_barrier((pending, cotangent))
            started.append(pending)
        (grads,) = vjps[0](cotangent)
        grads, started = lax.optimization_barrier((grads, started))  # every done after the last backward step
        # Nothing is left to run beside the first layer's sum: a plain psum, with every thread block it wants.
        return value, [psum(grads, axis_name, algorithm=algorithm)] + [psum_done(s) for s in reversed(started)]

    return run


__all__ = ["Started", "psum_done", "psum_start", "value_and_psum_grad"]
