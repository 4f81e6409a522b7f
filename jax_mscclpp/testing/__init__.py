"""What users of jax_mscclpp test with: the pytest plugin (``pytest_plugin``: fixtures and markers; its module,
``pytest_jax_mscclpp``, lies beside the package so that loading it imports nothing of it) and what its fixtures are
made of, usable without pytest (``fixtures``)."""
