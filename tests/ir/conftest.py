"""The IR tests reuse the verifier tests' algorithm builders (tests/verify/algorithms.py)."""

import sys
from pathlib import Path

VERIFY_TESTS = str(Path(__file__).parents[1] / "verify")
if VERIFY_TESTS not in sys.path:
    sys.path.insert(0, VERIFY_TESTS)
