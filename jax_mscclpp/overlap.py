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

from . import _compat, _native, primitives, routing
from ._types import Collective
from .collectives import (_groups_of, _lax_route, bucketed, grouped_reduce, has_own_call, reduce_over_one_rank,
                          reduce_tree, reduction_leaves, unbucketed)

_call_ids = itertools.count(1)


# Typed and lowered as the all_reduce primitive; its call_id makes the lowering a started call.
all_reduce_start_p = primitives._make_primitive(Collective.ALL_REDUCE, "mscclpp_all_reduce_start")


def _outside_jit(*args, **params):
    raise RuntimeError("psum_done runs only inside jax.shard_map under jax.jit")


# done(*operands, *results) -> results: joins started calls (one custom call for all the starts it is given).
done_p = Primitive("mscclpp_done")
done_p.multiple_results = True
done_p.def_impl(_outside_jit)


def _done_abstract_eval(*args, axes, call_ids):
    # A sum is invariant over the summed axes, whatever a barrier between start and done made of its type.
    return [_compat.with_varying_axes(r, _compat.varying_axes(r) - frozenset(axes)) for r in args[len(call_ids):]]


done_p.def_abstract_eval(_done_abstract_eval)


def _lower_done(ctx, *args, axes, call_ids):
    """One custom call joins every start that lowered to a kernel on the side stream; a start that lowered to a
    complete collective passes its result through."""
    n = len(call_ids)
    operands, results = args[:n], list(args[n:])
    on_side = primitives._started_on_side_stream(ctx)
    joined = [i for i, call_id in enumerate(call_ids) if call_id in on_side]
    if joined:
        k = len(joined)
        target = jax.ffi.ffi_lowering(_native.native.DONE_TARGET, has_side_effect=True,
                                      operand_output_aliases={k + j: j for j in range(k)})
        sub = ctx.replace(avals_in=[ctx.avals_in[i] for i in joined] + [ctx.avals_in[n + i] for i in joined],
                          avals_out=[ctx.avals_out[i] for i in joined])
        out = target(sub, *[operands[i] for i in joined], *[results[i] for i in joined],
                     call_ids=np.asarray([call_ids[i] for i in joined], np.int64))
        for i, value in zip(joined, out):
            results[i] = value
    return results


mlir.register_lowering(done_p, lambda ctx, *args, axes, call_ids: list(args[len(call_ids):]))
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


def psum_start(x, axis_name, *, algorithm: str | None = None, axis_index_groups=None) -> Started:
    """Starts summing ``x`` (a pytree) over ``axis_name``; ``psum_done`` of the result returns what
    ``psum(x, axis_name)`` would. Small leaves share a call, as in ``psum``. Between the two, independent work may
    run beside the sum; nothing may read the sum before its done. Contract: every start is joined by
    ``psum_done`` in the same jitted function; a start left unjoined leaves a kernel reading and writing buffers
    that XLA may free or reuse once the function returns. A sum ours cannot run (``routing``: vmap axes,
    constants, ...) is lax's psum, complete at the start (logged), as ``psum`` runs it; so is, with ours, a sum with
    ``axis_index_groups`` over one axis (``psum``'s grouped sum)."""
    leaves, treedef, axes, world = reduction_leaves(x, "sum", "psum_start", axis_name, algorithm)
    shapes = tuple(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves)
    if _lax_route("psum_start", axis_name, jax.tree_util.tree_leaves(x), axis_index_groups, "sum") is not None:
        with routing.lax_scope("psum_start"):
            summed = lax.psum(leaves, axis_name, axis_index_groups=axis_index_groups)
        return Started(treedef, shapes, tuple((i,) for i in range(len(leaves))), axes, (), [], summed)
    checked = _groups_of("psum_start", axis_name, axis_index_groups, equal_sizes=False)
    if checked is not None:  # complete at the start
        return Started(treedef, shapes, tuple((i,) for i in range(len(leaves))), axes, (), [],
                       grouped_reduce(leaves, axis_name, "sum", "psum_start", checked))
    if world == 1:  # nothing to exchange: complete at the start, typed as lax's psum
        return Started(treedef, shapes, tuple((i,) for i in range(len(leaves))), axes, (), [],
                       reduce_over_one_rank(leaves, axes, "sum", "psum_start"))
    calls = bucketed(leaves, axes)
    call_ids = tuple(next(_call_ids) for _ in calls)
    operands = [operand for _, operand in calls]
    results = [all_reduce_start_p.bind(operand, axes=axes, world=world, op="sum", algorithm=algorithm,
                                       call_id=call_id)
               for operand, call_id in zip(operands, call_ids)]
    return Started(treedef, shapes, tuple(tuple(call) for call, _ in calls), axes, call_ids, operands, results)


def _join(started: Sequence[Started]) -> list[list]:
    """The results of every Started in ``started``, each a list of its calls' results, joined by one done."""
    axes = {s.axes for s in started if s.call_ids}
    if len(axes) > 1:
        raise ValueError(f"psum_done: sums over different axes {sorted(axes)} are joined separately")
    call_ids = tuple(c for s in started for c in s.call_ids)
    if not call_ids:
        return [list(s.results) for s in started]
    operands = [o for s in started if s.call_ids for o in s.operands]
    results = [r for s in started if s.call_ids for r in s.results]
    joined = iter(done_p.bind(*operands, *results, axes=next(iter(axes)), call_ids=call_ids))
    return [[next(joined) for _ in s.results] if s.call_ids else list(s.results) for s in started]


def psum_done(started: Started):
    """The sums ``started`` holds (``psum_start``), once they are complete."""
    if not isinstance(started, Started):
        raise TypeError(f"psum_done takes what psum_start returned, got {type(started).__name__}")
    calls = [(list(call), None) for call in started.calls]
    return jax.tree_util.tree_unflatten(started.treedef, unbucketed(list(started.shapes), calls, _join([started])[0]))


def value_and_psum_grad(layers: Sequence[Callable], loss: Callable, axis_name, *, algorithm: str | None = None):
    """``f(params, x, *loss_args) -> (loss value, gradients summed over axis_name)`` for a model that is a sequence
    of layers: ``h = layers[i](params[i], h)`` from ``h = x``, then ``loss(h, *loss_args)`` (a scalar).

    The backward pass runs layer by layer from the last. Each layer's large parameter gradients (those that get a
    call of their own in ``psum``) are started with ``psum_start`` as soon as they exist, and the next backward
    step is ordered after that start; their sums run beside the backward steps of the layers before theirs. The
    small gradients of every layer and the first layer's gradients, which have nothing left to run beside, are
    summed by one plain ``psum`` (bucketed) after the last backward step, and one done joins every started sum:
    each start and done is a thunk outside XLA's command buffers, so there are as few as the model allows. The
    result equals ``(loss(...), psum(jax.grad(...), axis_name))``."""
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
        treedefs, grad_leaves = [None] * len(layers), [None] * len(layers)  # started leaves become None
        started = {}  # layer -> (indices of its started leaves, Started)
        for i in reversed(range(1, len(layers))):
            grads, cotangent = vjps[i](cotangent)
            leaves, treedefs[i] = jax.tree_util.tree_flatten(grads)
            large = [j for j, leaf in enumerate(leaves) if has_own_call(leaf)]
            if large:
                pending = psum_start([leaves[j] for j in large], axis_name, algorithm=algorithm)
                # The next backward step waits for this start, not the other way round.
                pending, cotangent = lax.optimization_barrier((pending, cotangent))
                started[i] = (large, pending)
                leaves = [None if j in large else leaf for j, leaf in enumerate(leaves)]
            grad_leaves[i] = leaves
        (grads,) = vjps[0](cotangent)
        grad_leaves[0], treedefs[0] = jax.tree_util.tree_flatten(grads)
        # Every done after the last backward step: the started sums pass this barrier with the last gradients.
        grad_leaves, pending = lax.optimization_barrier((grad_leaves, [p for _, p in started.values()]))
        # Ours whatever the tree looks like: nothing is left to overlap this sum with.
        summed = reduce_tree([[leaf for leaf in leaves if leaf is not None] for leaves in grad_leaves], axis_name,
                             "sum", algorithm, gradient_rule=False)
        joined = dict(zip(started, _join(pending)))
        out = []
        for i, leaves in enumerate(grad_leaves):
            rest, done = iter(summed[i]), iter(joined.get(i, ()))
            out.append(jax.tree_util.tree_unflatten(
                treedefs[i], [next(rest) if leaf is not None else next(done) for leaf in leaves]))
        return value, out

    return run


__all__ = ["Started", "psum_done", "psum_start", "value_and_psum_grad"]
