"""The plan of a translated foreign program: its positions checked, lowered, its input read where it is, its
receives' copies forwarded, then fused, its scratch compacted and given its barriers again (both translators end
here)."""

from __future__ import annotations

from ..lowering import fuse_and_place_barriers, lower
from ..program import Program
from .copy_forwarding import forward_copies
from .input_places import InputPlaces
from .positions import check_positions


def lowered_plan(program: Program, inputs: InputPlaces) -> dict:
    """The verified plan of ``program``, whose input places ``inputs`` recorded. Positions are a property of the
    data flow, which fusion and the rewrites keep: they are checked on the plan whose operations are the foreign
    steps one for one, so that a refusal names the step that moves the data."""
    check_positions(program.lower(fuse=False, verify=False))
    # The rewrites find the input's places by the program's scratch indices: compacted only at the end.
    return fuse_and_place_barriers(forward_copies(inputs.without_prologues(lower(program, compact=False))))
