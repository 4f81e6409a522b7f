"""Reliability tools: a soak of random collectives against lax, communicator churn, and faults mid-collective.

- ``python -m jax_mscclpp.tools.soak``: N random collectives (op, size, dtype, algorithm, mesh, single or chained)
  through ``jit`` + ``shard_map``, each compared with lax on fresh random data (``runner.py``);
- ``python -m jax_mscclpp.tools.soak.churn``: create / use / destroy cycles of communicators, watching host
  threads, memory and the native side's live communicators (``churn.py``);
- ``python -m jax_mscclpp.tools.soak.faults``: a lost peer, a peer stopped mid-call, mismatched calls: the error
  each ends in, on which ranks, and how long it took (``faults.py``).

See docs/reliability.md.
"""
