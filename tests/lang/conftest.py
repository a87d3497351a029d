"""The DSL tests run algorithms on the numpy IR interpreter of tests/compiler."""

import sys
from pathlib import Path

COMPILER_TESTS = str(Path(__file__).parents[1] / "compiler")
if COMPILER_TESTS not in sys.path:
    sys.path.insert(0, COMPILER_TESTS)
