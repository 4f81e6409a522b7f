"""Golden plans: every library program, lowered for 2, 4 and 8 ranks, matches its committed JSON.

The files live in tests/dsl/golden/<program>_n<ranks>.json. After an intended change to the library, the
lowering or the plan format, regenerate them from the repository root and review the diff:

    python -m tests.dsl.regen
"""

import pathlib

import pytest

from jax_mscclpp.dsl import library, plan_from_json, plan_to_json, verify

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
WORLD_SIZES = (2, 4, 8)
CASES = [(name, n) for name in library.PROGRAMS for n in WORLD_SIZES]


@pytest.mark.parametrize("name,world_size", CASES, ids=[f"{name}-n{n}" for name, n in CASES])
def test_library_plan_matches_golden(name, world_size):
    plan = library.PROGRAMS[name](world_size).lower()
    path = GOLDEN_DIR / f"{name}_n{world_size}.json"
    assert path.exists(), f"missing {path}: run python -m tests.dsl.regen"
    golden = path.read_text()
    assert plan_to_json(plan) == golden, f"{path} is stale: run python -m tests.dsl.regen and review the diff"
    assert plan_from_json(golden) == plan
    verify(plan_from_json(golden))


def test_every_golden_file_belongs_to_a_library_program():
    expected = {f"{name}_n{n}.json" for name, n in CASES}
    assert {path.name for path in GOLDEN_DIR.glob("*.json")} == expected
