"""Execution plans written by other tools, translated into DSL programs and lowered to our plans.

``load_plan`` (``jax_mscclpp/dsl/load_plan.py``) recognizes the format and calls one of the translators:
``msccl_ir`` (the MSCCL-IR XML that MSCCL interpreters run) and ``mscclpp_json`` (MSCCL++ JSON execution plans).
Each records one DSL operation per effect of a foreign instruction, so lowering places barriers, fuses and
verifies as for a hand-written program. What our executors cannot run is refused with a ``PlanImportError``
naming the element, the attribute and the reason.
"""
