"""The error of a foreign plan that cannot be translated faithfully."""

from __future__ import annotations


class PlanImportError(ValueError):
    """A foreign plan (MSCCL-IR XML, MSCCL++ JSON) that ``load_plan`` refuses.

    ``element`` names the part of the plan at fault (``<step s="3">`` of a thread block of a gpu, a JSON op),
    ``attribute`` the attribute or key (None when the element as a whole is at fault), ``reason`` why it
    cannot be run as written.
    """

    def __init__(self, element: str, attribute: str | None, reason: str):
        self.element = element
        self.attribute = attribute
        self.reason = reason
        where = element if attribute is None else f"{element}, attribute {attribute!r}"
        super().__init__(f"{where}: {reason}")
