"""Mixture-of-experts dispatch and combine, expert-parallel over a mesh axis, on ``ragged_all_to_all``.

Inside ``jax.shard_map`` each device holds ``T`` tokens and the top-k routing of each (``expert_ids [T, k]``, router
weights ``[T, k]``). The ``num_experts`` experts lie contiguously over the axis of ``n`` devices: device ``j`` holds
experts ``j*L .. j*L + L - 1``, ``L = num_experts // n``.

``dispatch`` sends every (token, slot) row to the device of its expert and returns the rows each device received,
grouped by its local expert, with a ``Routing`` (a pytree of the layout) that ``combine`` uses to send the expert
outputs back and sum each token's k of them weighted by its router weights.

Layout, all of it computed on the devices with jnp ops (jit-able, inside shard_map, no host round trip):

1. Every device counts its rows per (slot, expert) and one ``all_gather`` of those ``[k, num_experts]`` counts gives
   every device every device's counts: from them each computes the same rows-kept per expert, the
   ``[n, n]`` matrix of rows device i sends device j, and so every offset and size both ragged exchanges need (a
   sender gives the receiver's offsets, as lax's ``ragged_all_to_all`` takes them).
2. Each device sorts its rows by destination expert (stable: within an expert, slot-major then token order), keeps
   the rows within capacity, and one ``ragged_all_to_all`` sends each device its chunk. A device receives its rows
   sender by sender (within a sender, by local expert) and regroups them by local expert (within an expert, sender
   by sender, each sender's in slot-major then token order) with one gather.
3. ``combine`` inverts each step: a gather back to sender order, the reverse ``ragged_all_to_all``, a gather of each
   (token, slot) row, the weighted sum over k.

Capacity (``capacity=C``): each expert takes at most ``C`` rows over the whole axis; rows are kept in the order
GShard's top-2 gating gives: all first choices before any second choice, then along the axis (device 0's tokens
first) and in token order; the rest are dropped (they contribute zero to ``combine``; ``Routing.dropped`` counts
them per device; ``Routing.kept`` marks them). The received rows are dense: ``[L, C, ...]``, expert ``l``'s rows
first in ``[l]``, zeros after. Without capacity (``capacity=None``) nothing is dropped: the receive buffer has the
worst case's ``n * T * k`` rows (every device sending every row to one device), the groups packed one after the
other from row 0 (``Routing.group_sizes`` long each, zeros after), the layout of ``lax.ragged_dot``.

An expert id outside ``[0, num_experts)`` routes its row nowhere (not sent, not counted as dropped, zero in
``combine``): padding tokens can be masked so.

Gradients flow to ``tokens`` (through ``dispatch``), to the expert outputs and the router weights (through
``combine``); each exchange's VJP is the reverse ``ragged_all_to_all`` (``jax.custom_vjp``), so it holds for any
``ragged_all_to_all`` underneath, with or without a transpose rule. ``vmap`` over the body works.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from . import _compat, collectives
from .ragged import ragged_all_to_all

_INDEX = jnp.int32


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=("positions", "sizes", "inverse", "group_sizes", "dropped"),
                   meta_fields=("axis_name", "num_experts", "capacity", "algorithm"))
@dataclasses.dataclass(frozen=True)
class Routing:
    """What ``combine`` needs to send the expert outputs back (a pytree; its arrays are per device).

    - ``positions [T, k]``: the row of the send buffer of each (token, slot); ``T * k`` where the row was not sent
      (dropped over capacity, or an expert id out of range);
    - ``sizes [n, n]``: the rows device i sent device j (the same on every device);
    - ``inverse [R]``: for each row received (in sender order), its row in the flattened ``dispatch`` output;
    - ``group_sizes [L]``: the rows each local expert received;
    - ``dropped []``: this device's rows dropped over capacity (``psum`` it for the axis's total).
    """

    positions: jax.Array
    sizes: jax.Array
    inverse: jax.Array
    group_sizes: jax.Array
    dropped: jax.Array
    axis_name: object
    num_experts: int
    capacity: int | None
    algorithm: str | None

    @property
    def kept(self) -> jax.Array:
        """``[T, k]`` bool: whether each (token, slot) row reached its expert."""
        return self.positions < self.positions.size


def _exclusive_cumsum(x, axis=0):
    return jnp.cumsum(x, axis=axis) - x


def _ragged_sizes(sizes, me, reverse: bool):
    """(input_offsets, send_sizes, output_offsets, recv_sizes) of this device from ``sizes[i, j]``, the rows device
    i sends device j in the forward exchange; ``reverse``: those of the exchange back (j sends i the rows it got)."""
    if not reverse:
        send = sizes[me]
        return (_exclusive_cumsum(send), send, _exclusive_cumsum(sizes, 0)[me], sizes[:, me])
    back = sizes[:, me]  # the rows I received from each device, in my receive buffer in device order
    return (_exclusive_cumsum(back), back, _exclusive_cumsum(sizes, 1)[:, me], sizes[me])


def _exchange(rows, sizes, out_rows: int, reverse: bool, axis_name, algorithm):
    """One ragged exchange of ``rows`` into a zeroed buffer of ``out_rows`` rows: ``sizes``' forward exchange, or
    with ``reverse`` the one back."""
    return _typed_exchange(rows, sizes, out_rows, reverse, axis_name, algorithm,
                           tuple(sorted(_compat.varying_axes(_compat.typeof(rows)), key=repr)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6))
def _typed_exchange(rows, sizes, out_rows: int, reverse: bool, axis_name, algorithm, rows_axes: tuple):
    """``_exchange``; ``rows_axes``: the mesh axes ``rows`` varies over, which the cotangent of ``rows`` must vary
    over too (the exchange back may type its result over fewer: a ragged exchange of a cotangent that varies over
    none)."""
    me = lax.axis_index(axis_name)
    output = jnp.zeros((out_rows,) + rows.shape[1:], rows.dtype)
    return ragged_all_to_all(rows, output, *_ragged_sizes(sizes, me, reverse), axis_name=axis_name,
                             algorithm=algorithm)


def _exchange_fwd(rows, sizes, out_rows, reverse, axis_name, algorithm, rows_axes):
    return _typed_exchange(rows, sizes, out_rows, reverse, axis_name, algorithm, rows_axes), (sizes, rows.shape[0])


def _exchange_bwd(out_rows, reverse, axis_name, algorithm, rows_axes, residuals, cotangent):
    # Each row sent receives the cotangent of the row it landed in: the exchange the other way.
    sizes, in_rows = residuals
    back = _exchange(cotangent, sizes, in_rows, not reverse, axis_name, algorithm)
    return _compat.make_varying(back, rows_axes), None


_typed_exchange.defvjp(_exchange_fwd, _exchange_bwd)


def _gather_counts(counts, axis_name, algorithm):
    """Every device's ``counts``, stacked in axis order."""
    if algorithm == "lax":
        return lax.all_gather(counts, axis_name)
    return collectives.all_gather(counts, axis_name)


def _check_dispatch(tokens, expert_ids, num_experts, capacity, world):
    if tokens.ndim < 1:
        raise ValueError(f"dispatch: tokens must have a leading (token) axis; got shape {tokens.shape}")
    if expert_ids.ndim != 2 or expert_ids.shape[0] != tokens.shape[0]:
        raise ValueError(f"dispatch: expert_ids must be [tokens, k] = [{tokens.shape[0]}, k] for tokens of shape "
                         f"{tokens.shape} (top-1 routing: expert_ids[:, None]); got shape {expert_ids.shape}")
    if not jnp.issubdtype(expert_ids.dtype, jnp.integer):
        raise TypeError(f"dispatch: expert_ids must be integers; got {expert_ids.dtype}")
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"dispatch: num_experts must be a positive int; got {num_experts!r}")
    if num_experts % world:
        raise ValueError(f"dispatch: num_experts={num_experts} does not divide over the axis of {world} devices "
                         "(each device holds num_experts / axis size experts)")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"dispatch: capacity must be None (dropless) or a positive int; got {capacity!r}")


def dispatch(tokens, expert_ids, *, num_experts: int, axis_name, capacity: int | None = None,
             algorithm: str | None = None):
    """Sends each token's rows to its top-k experts' devices: ``(expert_inputs, routing)``.

    ``tokens [T, ...]`` and ``expert_ids [T, k]`` (integers) are this device's, inside ``shard_map``;
    ``num_experts`` must divide by the size of ``axis_name``. ``expert_inputs`` is the rows this device's
    ``L = num_experts // n`` experts received: ``[L, capacity, ...]`` with ``capacity`` (expert ``l``'s
    ``routing.group_sizes[l]`` rows first in ``[l]``, zeros after), ``[n * T * k, ...]`` without (the groups packed
    from row 0, zeros after: ``lax.ragged_dot(expert_inputs, w, routing.group_sizes)`` applies each expert's
    ``w[l]``). ``routing`` (a ``Routing``) is for ``combine``; ``routing.dropped`` counts this device's rows dropped
    over capacity. ``algorithm`` is ``ragged_all_to_all``'s (``"lax"``: lax's exchanges, the counts by
    ``lax.all_gather``). See the module docstring for the order of rows and which are dropped.

    Example (top-2 of 2 experts per device, an identity expert: ``combine`` gives back each token times the sum of
    its weights)::

        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, PartitionSpec as P
        import jax_mscclpp as jm

        n = jax.device_count()
        mesh = Mesh(np.array(jax.devices()), ("ep",))

        def body(x, ids, w):
            rows, routing = jm.moe.dispatch(x, ids, num_experts=2 * n, axis_name="ep")
            return jm.moe.combine(rows, routing, w)

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("ep"), out_specs=P("ep")))
        x = jnp.arange(n * 4 * 3, dtype=jnp.float32).reshape(n * 4, 3)
        ids = jnp.stack([jnp.arange(n * 4) % (2 * n), (jnp.arange(n * 4) + 1) % (2 * n)], axis=1)
        w = jnp.full((n * 4, 2), 0.5)
        np.testing.assert_allclose(f(x, ids, w), x)
    """
    tokens, expert_ids = jnp.asarray(tokens), jnp.asarray(expert_ids)
    _, world = collectives._axes_and_world(axis_name, "moe.dispatch")
    _check_dispatch(tokens, expert_ids, num_experts, capacity, world)
    n, num_tokens, k = world, tokens.shape[0], expert_ids.shape[1]
    local = num_experts // n
    send_rows = num_tokens * k
    recv_rows = local * capacity if capacity is not None else n * send_rows
    me = lax.axis_index(axis_name)

    # Rows in slot-major order: row r is (slot r // T, token r % T).
    expert = expert_ids.T.reshape(-1).astype(_INDEX)
    routed = (expert >= 0) & (expert < num_experts)
    slot = jnp.repeat(jnp.arange(k, dtype=_INDEX), num_tokens)
    counts = jnp.zeros((k, num_experts), _INDEX).at[slot, jnp.where(routed, expert, 0)].add(routed.astype(_INDEX))
    every = _gather_counts(counts, axis_name, algorithm)  # [n, k, E]
    if capacity is None:
        kept_counts = every.sum(1)  # [n, E]
    else:  # rows before (s, i) in the keeping order: every slot before s, then slot s of the devices before i
        before = _exclusive_cumsum(every.sum(0), 0)[None] + _exclusive_cumsum(every, 0)
        kept_counts = jnp.clip(capacity - before, 0, every).sum(1)
    sizes = kept_counts.reshape(n, n, local).sum(2)  # [i, j]: rows device i sends device j
    mine = kept_counts[me]  # [E]: my rows kept per expert

    # Send side: sort my rows by expert (stable, unrouted last); the kept rows of an expert are a prefix of its
    # group in that order (a row is dropped only once its expert is full, and stays so for every later row).
    order = jnp.argsort(jnp.where(routed, expert, num_experts), stable=True).astype(_INDEX)
    group_start = _exclusive_cumsum(counts.sum(0))
    sorted_expert = jnp.where(routed, expert, num_experts)[order]
    rank_sorted = jnp.arange(send_rows, dtype=_INDEX) - jnp.take(group_start, sorted_expert, mode="clip")
    rank = jnp.zeros(send_rows, _INDEX).at[order].set(rank_sorted)
    send_start = _exclusive_cumsum(mine)
    safe_expert = jnp.where(routed, expert, 0)
    kept = routed & (rank < mine[safe_expert])
    positions = jnp.where(kept, send_start[safe_expert] + rank, send_rows)
    # The send buffer: row p is the within-group rank of some kept row of expert e (send_start[e] <= p).
    p = jnp.arange(send_rows, dtype=_INDEX)
    p_expert = jnp.searchsorted(jnp.cumsum(mine), p, side="right").astype(_INDEX)
    p_expert_safe = jnp.minimum(p_expert, num_experts - 1)
    source_row = order[jnp.clip(group_start[p_expert_safe] + p - send_start[p_expert_safe], 0, send_rows - 1)]
    send = jnp.take(tokens, source_row % num_tokens, axis=0)
    received = _exchange(send, sizes, recv_rows, False, axis_name, algorithm)

    # Receive side: cells (sender i, local expert l) of cell[i, l] rows, in sender order as received.
    cell = jax.lax.dynamic_slice_in_dim(kept_counts, me * local, local, axis=1)  # [n, L]
    group_sizes = cell.sum(0)
    received_start = _exclusive_cumsum(cell.reshape(-1)).reshape(n, local)
    group_base = jnp.arange(local, dtype=_INDEX) * capacity if capacity is not None else _exclusive_cumsum(group_sizes)
    grouped_start = group_base[None] + _exclusive_cumsum(cell, 0)  # [n, L]: the cell's first row in the output
    # Each output row's source in the received buffer, through the cells in expert order (l, then i).
    out = jnp.arange(recv_rows, dtype=_INDEX)
    if capacity is None:
        packed, valid = out, out < group_sizes.sum()
    else:
        l_of, q_of = out // capacity, out % capacity
        packed, valid = _exclusive_cumsum(group_sizes)[l_of] + q_of, q_of < group_sizes[l_of]
    by_expert = cell.T.reshape(-1)
    c = jnp.minimum(jnp.searchsorted(jnp.cumsum(by_expert), packed, side="right"), n * local - 1).astype(_INDEX)
    within = packed - _exclusive_cumsum(by_expert)[c]
    source = jnp.where(valid, received_start[c % n, c // n] + within, recv_rows)
    expert_inputs = jnp.take(received, source, axis=0, mode="fill", fill_value=0)
    # And each received row's place in the output (for combine), through the cells in sender order.
    by_sender = cell.reshape(-1)
    r = jnp.arange(recv_rows, dtype=_INDEX)
    c = jnp.minimum(jnp.searchsorted(jnp.cumsum(by_sender), r, side="right"), n * local - 1).astype(_INDEX)
    inverse = jnp.where(r < by_sender.sum(), grouped_start[c // local, c % local] + r - received_start.reshape(-1)[c],
                        recv_rows)
    if capacity is not None:
        expert_inputs = expert_inputs.reshape((local, capacity) + tokens.shape[1:])
    routing = Routing(positions=positions.reshape(k, num_tokens).T, sizes=sizes, inverse=inverse,
                      group_sizes=group_sizes, dropped=routed.sum(dtype=_INDEX) - mine.sum(),
                      axis_name=axis_name, num_experts=num_experts, capacity=capacity, algorithm=algorithm)
    return expert_inputs, routing


def combine(expert_outputs, routing: Routing, weights):
    """Sends the expert outputs back and sums each token's: ``y[t] = sum_s weights[t, s] * out(t, s)``.

    ``expert_outputs`` has ``dispatch``'s output layout in its leading axes (``[L, capacity]`` or ``[n * T * k]``;
    any trailing shape: an expert may change the width); rows that held no token are ignored. ``routing`` is
    ``dispatch``'s, ``weights [T, k]`` the router weights; a (token, slot) row dropped over capacity or not routed
    contributes zero. The sum is in float32 (or wider) and the result has ``expert_outputs``' dtype; it
    differentiates in ``expert_outputs`` and ``weights``.

    Example (top-1 with capacity, each expert doubling its rows: every token comes back times 2 x 0.25)::

        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, PartitionSpec as P
        import jax_mscclpp as jm

        n = jax.device_count()
        mesh = Mesh(np.array(jax.devices()), ("ep",))

        def body(x, ids, w):
            rows, routing = jm.moe.dispatch(x, ids, num_experts=n, axis_name="ep", capacity=8)
            return jm.moe.combine(2 * rows, routing, w), routing.dropped[None]

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("ep"), out_specs=P("ep")))
        x = jnp.ones((n * 4, 3))
        ids = (jnp.arange(n * 4) % n)[:, None]            # top-1
        w = jnp.full((n * 4, 1), 0.25)
        y, dropped = f(x, ids, w)
        np.testing.assert_allclose(y, 0.5 * x)
        assert int(dropped.sum()) == 0
    """
    expert_outputs, weights = jnp.asarray(expert_outputs), jnp.asarray(weights)
    positions = routing.positions
    num_tokens, k = positions.shape
    n = routing.sizes.shape[0]
    local = routing.num_experts // n
    lead = (local, routing.capacity) if routing.capacity is not None else (n * num_tokens * k,)
    if expert_outputs.shape[:len(lead)] != lead:
        raise ValueError(f"combine: expert_outputs must have dispatch's output layout {list(lead)} in its leading "
                         f"axes; got shape {expert_outputs.shape}")
    if weights.shape != (num_tokens, k):
        raise ValueError(f"combine: weights must be [tokens, k] = {[num_tokens, k]}, as dispatch's expert_ids; "
                         f"got shape {weights.shape}")
    if not jnp.issubdtype(weights.dtype, jnp.inexact):
        raise TypeError(f"combine: weights must be floating; got {weights.dtype}")
    row_shape = expert_outputs.shape[len(lead):]
    flat = expert_outputs.reshape((-1,) + row_shape)
    in_sender_order = jnp.take(flat, routing.inverse, axis=0, mode="fill", fill_value=0)
    back = _exchange(in_sender_order, routing.sizes, num_tokens * k, True, routing.axis_name, routing.algorithm)
    rows = jnp.take(back, positions, axis=0, mode="fill", fill_value=0)  # [T, k, ...]; not sent: zeros
    acc = functools.reduce(jnp.promote_types, (expert_outputs.dtype, weights.dtype, jnp.float32))
    w = jnp.where(routing.kept, weights, 0).astype(acc).reshape((num_tokens, k) + (1,) * len(row_shape))
    return (rows.astype(acc) * w).sum(1).astype(expert_outputs.dtype)


__all__ = ["Routing", "combine", "dispatch"]
