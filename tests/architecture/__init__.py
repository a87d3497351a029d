"""Tests of the package's shape rather than its behaviour: the import graph (no cycles,
no private names across modules, lazy exports) and a light start-up."""
