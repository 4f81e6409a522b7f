"""``axis_index_groups=`` of the collectives over one mesh axis: checked groups and the local half of their
composition.

Groups are lists of indices of the axis that partition it (lax's contract); each rank's collective runs over the
ranks of its group, in the order the group lists them. Ours composes a grouped call of our all_gather over the whole
axis (every rank receives every rank's operand, ``collectives.py`` binds it) and a local step here that picks the
members of the rank's group out of what was gathered, by static tables indexed by ``lax.axis_index``:

- psum / pmax / pmin: the members reduced (the sum accumulated in group order); pmean: that sum over the group size;
- all_gather: the members stacked in group order;
- psum_scatter: the members' sum, then the block of the rank's position in its group;
- all_to_all: from each member in group order, its block for the rank's position.

Gradients and ``vmap`` follow from the pieces (our all_gather's transpose, indexing's). It moves ``world`` operands
per rank where a collective over the group moves ``group size``.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

# The reason ``explain`` gives a grouped call that ours runs.
REASON = "axis_index_groups: composed of our all_gather and a local reduction"


class Groups(NamedTuple):
    """Checked groups of an axis of ``world`` ranks: ``groups`` in the caller's order; per rank,
    ``members[rank]`` the indices of its group in group order (padded with the group's first index up to the
    largest group), ``valid[rank]`` which of those are members, ``position[rank]`` its place in its group."""

    groups: tuple[tuple[int, ...], ...]
    members: np.ndarray   # int32 [world, largest group]
    valid: np.ndarray     # bool [world, largest group]
    position: np.ndarray  # int32 [world]

    @property
    def size(self) -> int:
        """The group size (of the largest group, where sizes differ)."""
        return self.members.shape[1]

    @property
    def equal(self) -> bool:
        return bool(self.valid.all())


def check(api_name: str, axis_index_groups, world: int, *, equal_sizes: bool) -> Groups | None:
    """``axis_index_groups`` checked for an axis of ``world`` ranks, or None where they are the whole axis as one
    group in axis order (the plain call). ``equal_sizes``: whether the collective needs every group the same size
    (lax's contract for pmean, all_gather, psum_scatter and all_to_all). A clear error at trace time otherwise:
    TypeError for what is not a list of lists of integers; ValueError for an index out of range, an empty group,
    groups that are not a partition of the axis (an index twice or none) or of unequal sizes where they must be
    equal."""
    try:
        groups = tuple(tuple(operator.index(i) for i in group) for group in axis_index_groups)
    except TypeError:
        raise TypeError(f"{api_name}: axis_index_groups must be a list of lists of axis indices (integers); got "
                        f"{axis_index_groups!r}") from None
    if not groups:
        raise ValueError(f"{api_name}: axis_index_groups is empty; it must partition the axis of size {world}")
    for group in groups:
        if not group:
            raise ValueError(f"{api_name}: axis_index_groups {axis_index_groups!r} has an empty group")
        for i in group:
            if not 0 <= i < world:
                raise ValueError(f"{api_name}: axis_index_groups {axis_index_groups!r}: index {i} is out of range "
                                 f"for the axis of size {world}")
    seen = [i for group in groups for i in group]
    if len(seen) != len(set(seen)) or len(seen) != world:
        twice = sorted({i for i in seen if seen.count(i) > 1})
        missing = sorted(set(range(world)) - set(seen))
        problem = f"index {twice[0]} is in more than one place" if twice else f"index {missing[0]} is in no group"
        raise ValueError(f"{api_name}: axis_index_groups {axis_index_groups!r} is not a partition of the axis of "
                         f"size {world} ({problem}); every index must be in exactly one group")
    sizes = sorted({len(group) for group in groups})
    if equal_sizes and len(sizes) > 1:
        raise ValueError(f"{api_name}: axis_index_groups {axis_index_groups!r} has groups of unequal sizes "
                         f"{sizes}; {api_name} needs every group the same size")
    if groups == (tuple(range(world)),):
        return None
    largest = sizes[-1]
    members = np.zeros((world, largest), np.int32)
    valid = np.zeros((world, largest), bool)
    position = np.zeros((world,), np.int32)
    for group in groups:
        padded = list(group) + [group[0]] * (largest - len(group))
        for p, rank in enumerate(group):
            members[rank] = padded
            valid[rank, : len(group)] = True
            position[rank] = p
    return Groups(groups, members, valid, position)


def _me(axis_name):
    return lax.axis_index(axis_name)


def members(gathered, groups: Groups, axis_name):
    """The members' rows of ``gathered`` (every rank's operand, stacked by rank along axis 0) for this rank: its
    group's, in group order ([group size, ...]; padded rows where sizes differ, ``valid`` says which)."""
    return gathered[jnp.asarray(groups.members)[_me(axis_name)]]


def position(groups: Groups, axis_name):
    """This rank's place in its group (traced)."""
    return jnp.asarray(groups.position)[_me(axis_name)]


_COMBINE = {"sum": operator.add, "max": jnp.maximum, "min": jnp.minimum}


def reduce(gathered, groups: Groups, axis_name, op: str):
    """The reduction ``op`` ("sum", "max", "min") over this rank's group of ``gathered`` (every rank's operand,
    stacked by rank): the members combined one by one in group order."""
    rows = members(gathered, groups, axis_name)
    valid = None if groups.equal else jnp.asarray(groups.valid)[_me(axis_name)]
    combine = _COMBINE[op]
    total = rows[0]
    for j in range(1, groups.size):
        step = combine(total, rows[j])
        total = step if valid is None else jnp.where(valid[j], step, total)
    return total


__all__ = ["Groups", "REASON", "check", "members", "position", "reduce"]
