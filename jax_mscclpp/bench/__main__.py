"""``python -m jax_mscclpp.bench``: see ``jax_mscclpp.bench.cli`` and docs/benchmarking.md."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
