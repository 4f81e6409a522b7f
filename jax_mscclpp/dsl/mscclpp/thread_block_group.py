"""``mscclpp.language.thread_block_group``: thread blocks that share one operation, and how a call names its
thread blocks."""

from __future__ import annotations

from .errors import mistake
from .trace import member_shares

__all__ = ["ThreadBlockGroup"]


class ThreadBlockGroup:
    """Thread blocks that perform one operation together, each on an equal, contiguous share of its chunks
    (chunk granularity, as our ThreadBlockGroup; MSCCL++ shares elements)."""

    def __init__(self, tb_list: list[int]):
        if len(set(tb_list)) != len(tb_list):
            raise ValueError(f"ThreadBlockGroup: duplicate thread block in {tb_list}")
        self.tb_list = list(tb_list)

    def get_internal_id(self, tb: int) -> int:
        if tb not in self.tb_list:
            raise ValueError(f"thread block {tb} not found in thread block group")
        return self.tb_list.index(tb)

    def numtb(self) -> int:
        return len(self.tb_list)


def shares(call: str, tb: int | None, tb_group: ThreadBlockGroup | None, size: int):
    """(thread block, start, stop) for each thread block of a call given ``tb`` or ``tb_group`` over ``size``
    chunks."""
    if tb is not None:
        return [(tb, 0, size)]
    if tb_group is not None:
        return list(member_shares(tb_group.tb_list, size))
    raise mistake(f"{call}: either 'tb' (thread block ID) or 'tb_group' (ThreadBlockGroup) must be provided")
