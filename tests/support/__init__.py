"""Helpers shared by the test suite (importable as ``support.*``: pytest puts ``tests/``
on the path, see ``pythonpath`` in pyproject.toml)."""
