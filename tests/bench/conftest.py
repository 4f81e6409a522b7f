"""Loads the jax_mscclpp pytest plugin when its entry point is not installed yet (an editable install made
before the entry point existed): the fixtures below this directory come from it."""

import importlib


def pytest_configure(config):
    plugin = importlib.import_module("jax_mscclpp.testing.pytest_plugin")
    if not config.pluginmanager.is_registered(plugin) and not config.pluginmanager.has_plugin("jax_mscclpp"):
        config.pluginmanager.register(plugin, "jax_mscclpp")
