"""Rewrite the golden plans in tests/dsl/golden from the DSL library.

Run from the repository root after an intended change to the library, lowering or plan format, then review
the diff of the JSON files (one operation per line):

    python -m tests.dsl.regen
"""

import pathlib

from jax_mscclpp.dsl import library, plan_to_json

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
WORLD_SIZES = (2, 4, 8)


def golden_path(name: str, world_size: int) -> pathlib.Path:
    return GOLDEN_DIR / f"{name}_n{world_size}.json"


def main() -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    for name, program in library.PROGRAMS.items():
        for world_size in WORLD_SIZES:
            golden_path(name, world_size).write_text(plan_to_json(program(world_size).lower()))
            print("wrote", golden_path(name, world_size))


if __name__ == "__main__":
    main()
