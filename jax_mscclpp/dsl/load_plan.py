"""``load_plan``: an execution plan from a path or a text, in our format or another tool's.

Formats, recognized by content:

* MSCCL-IR XML (an ``<algo>`` document, as msccl-tools' ``XML()`` writes it): ``imports/msccl_ir.py``;
* MSCCL++ JSON execution plans (a ``"gpus"`` list, as ``mscclpp.language``'s ``Json()`` writes it):
  ``imports/mscclpp_json.py``;
* our own plans (a ``"version"`` and ``"ranks"``, PLAN.md).

Foreign plans are translated into a DSL program and lowered, so the result is verified like any plan of ours,
and then have each rank's thread blocks that only order each other merged (``thread_block_merge``); what our
executors cannot run is refused with a ``PlanImportError`` (a ValueError) naming the element, the attribute and the
reason.
"""

from __future__ import annotations

import json
import os

from .imports import msccl_ir, mscclpp_json
from .imports.errors import PlanImportError
from .plan_format import plan_from_json
from .thread_block_merge import merge_thread_blocks
from .verify import verify_plan


def load_plan(path_or_text, *, permutation=None) -> dict:
    """The verified plan in ``path_or_text``: a path (str or ``os.PathLike``) of a file, or the text itself.

    ``permutation``: for the MSCCL-IR of a custom collective (``coll="custom"``, such as AllToNext), the
    (source, destination) pairs of ranks it implements, which the document does not state; the plan is a plan of
    the permutation (PLAN.md), verified against them. Refused for any other plan.

    Register it with ``jax_mscclpp.register_algorithm(load_plan(...), min_bytes=..., max_bytes=...)``.
    """
    text = _text(path_or_text)
    stripped = text.lstrip()
    if stripped.startswith("<"):
        return merge_thread_blocks(msccl_ir.from_xml(text, permutation))
    if permutation is not None:
        raise PlanImportError("plan", None, 'permutation= names the pairs of an MSCCL-IR custom collective '
                                            '(coll="custom"); a JSON plan states its own collective')
    if stripped.startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise PlanImportError("JSON document", None, f"malformed JSON: {error}") from None
        if isinstance(document, dict) and "version" in document and "ranks" in document:
            return verify_plan(plan_from_json(text))
        return merge_thread_blocks(mscclpp_json.from_json(document))
    raise PlanImportError("plan", None, "neither an MSCCL-IR XML document (starting with '<') nor a JSON object "
                                        "(starting with '{'), nor the path of a file holding one")


def _text(path_or_text) -> str:
    if isinstance(path_or_text, os.PathLike):
        with open(path_or_text, encoding="utf-8") as file:
            return file.read()
    if not isinstance(path_or_text, str):
        raise TypeError(f"load_plan takes a path or the text of a plan, got {type(path_or_text).__name__}")
    if path_or_text.lstrip()[:1] not in ("<", "{") and os.path.isfile(path_or_text):
        with open(path_or_text, encoding="utf-8") as file:
            return file.read()
    return path_or_text
