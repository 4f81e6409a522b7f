"""``python -m jax_mscclpp.tools.bench``: see ``jax_mscclpp.tools.bench.cli`` and docs/benchmarking.md."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
