"""Test-wide settings: property tests are derandomized under CI (CI=true), so a CI run
is repeatable; locally they keep exploring new examples."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
