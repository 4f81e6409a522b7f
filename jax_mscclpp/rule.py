"""One rule of the selection tables (``selection.DEFAULT_TABLE`` and the tuning files, ``tuning_file.py``): the
algorithm that runs a collective's calls on a platform up to a size."""

from __future__ import annotations

import dataclasses

from ._codes import Collective


@dataclasses.dataclass(frozen=True)
class Rule:
    collective: Collective
    platform: str
    max_bytes: int | None  # per-rank input bytes, inclusive; None = no limit
    algorithm: str
    world: int | None = None  # the world size the rule was measured at; None = any

    def matches(self, collective: Collective, platform: str, nbytes: int, world: int | None) -> bool:
        return (self.collective == collective and self.platform == platform
                and (self.world is None or world is None or self.world == world)
                and (self.max_bytes is None or nbytes <= self.max_bytes))
