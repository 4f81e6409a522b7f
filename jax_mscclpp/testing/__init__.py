"""What users of jax_mscclpp test with: the pytest plugin (``pytest_plugin``: fixtures and markers) and what its
fixtures are made of, usable without pytest (``fixtures``)."""
