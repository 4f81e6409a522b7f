"""The command-line tools, built on the package and never imported by it (tests/test_import_graph.py):

- ``python -m jax_mscclpp.tools.bench``: ours against lax over collectives, sizes, dtypes, algorithms and modes
  (``bench/``; docs/benchmarking.md), with ``.model`` and ``.kernel_record``;
- ``python -m jax_mscclpp.tools.tune``: measures this machine and writes the selection file the runtime reads
  (``jax_mscclpp/tuning_file.py``);
- ``python -m jax_mscclpp.tools.soak``: random collectives against lax, with ``.churn`` and ``.faults``
  (``soak/``; docs/reliability.md).
"""
