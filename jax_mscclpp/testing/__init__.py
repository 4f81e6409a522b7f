"""Test support: fault injection, fixtures and harnesses for jax_mscclpp and its users."""
