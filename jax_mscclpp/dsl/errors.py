"""The one exception of the DSL, and the way it names the operation at fault."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class OpLocation:
    """Where an operation sits in a plan, and the DSL line that created it (None when unknown)."""

    rank: int
    threadblock: int
    index: int
    op: str
    src_line: str | None = None

    def __str__(self) -> str:
        text = f"rank {self.rank}, threadblock {self.threadblock}, op {self.index} ({self.op})"
        return f"{text} at {self.src_line}" if self.src_line else text


class VerificationError(ValueError):
    """A DSL program or execution plan is wrong.

    ``kind`` names the check that failed (the list is in PLAN.md, section "Verification"). When one operation
    is at fault, ``rank``, ``threadblock``, ``op_index``, ``op`` and ``src_line`` locate it; they are None
    otherwise (``src_line`` alone is set for mistakes caught while the DSL program is being written).
    """

    def __init__(self, kind: str, detail: str, at: OpLocation | None = None, *, src_line: str | None = None):
        self.kind = kind
        self.detail = detail
        self.location = at
        self.rank = at.rank if at else None
        self.threadblock = at.threadblock if at else None
        self.op_index = at.index if at else None
        self.op = at.op if at else None
        self.src_line = at.src_line if at else src_line
        if at:
            where = f"{at}: "
        elif src_line:
            where = f"at {src_line}: "
        else:
            where = ""
        super().__init__(f"[{kind}] {where}{detail}")
