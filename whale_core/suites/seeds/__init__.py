"""Seed harness texts (YAML), one per built-in suite, read with ``importlib.resources``."""
