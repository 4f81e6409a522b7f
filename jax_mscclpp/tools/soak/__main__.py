"""``python -m jax_mscclpp.tools.soak``: see ``jax_mscclpp.tools.soak.cli`` and docs/reliability.md."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
