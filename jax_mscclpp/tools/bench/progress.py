"""A one-line progress bar on a terminal, that lets finished rows scroll above it.

On a terminal the bar is redrawn in place (``\\r``); elsewhere (a pipe, a log, CI) there is no bar, only the rows.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, *, stream: TextIO | None = None, enabled: bool | None = None, width: int = 28):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = max(0, total)
        self.done = 0
        self.label = ""
        self.width = width
        self.start = time.monotonic()
        self._drawn = False

    def update(self, done: int, label: str = "") -> None:
        self.done, self.label = min(done, self.total), label
        self._draw()

    def write(self, line: str, out: TextIO | None = None) -> None:
        """Prints ``line`` (to ``out``, stdout by default) above the bar."""
        out = out if out is not None else sys.stdout
        self._clear()
        out.write(line + "\n")
        out.flush()
        self._draw()

    def close(self) -> None:
        self._clear()

    def _clear(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def _draw(self) -> None:
        if not self.enabled or not self.total:
            return
        filled = int(self.width * self.done / self.total)
        elapsed = time.monotonic() - self.start
        eta = ""
        if 0 < self.done < self.total:
            eta = f" eta {elapsed / self.done * (self.total - self.done):.0f}s"
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r\033[K[{bar}] {self.done}/{self.total} {elapsed:.0f}s{eta} {self.label}")
        self.stream.flush()
        self._drawn = True
