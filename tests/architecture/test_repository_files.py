"""The repository holds the project, not the history of its making: no merge leftovers
(``*.orig``, ``*.rej``, conflict markers' backups) and no file named after an issue number
(a name must say what the file is; history belongs in git log); and no two test modules
with one name (the suite's folders are not packages: pytest refuses the second module of
a name at collection, and the whole run stops)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("src", "tests", "benchmarks", "docs", "examples")
LEFTOVER = re.compile(r"\.(orig|rej|BACKUP\.\d+|BASE\.\d+|LOCAL\.\d+|REMOTE\.\d+)$|~$")
ISSUE_NAME = re.compile(r"issue[_-]?\d+", re.IGNORECASE)


def _files() -> list[Path]:
    return [p for folder in FOLDERS if (ROOT / folder).is_dir()
            for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_no_merge_leftovers_in_the_repository():
    found = [str(p.relative_to(ROOT)) for p in _files() if LEFTOVER.search(p.name)]
    assert not found, f"merge leftovers: {found}"


def test_no_file_is_named_after_an_issue_number():
    found = [str(p.relative_to(ROOT)) for p in _files() if ISSUE_NAME.search(p.name)]
    assert not found, f"files named after an issue: {found}"


def repeated_names(paths: list[Path]) -> dict[str, list[str]]:
    """Module names that more than one of the test modules ``paths`` has, with their paths."""
    by_name: dict[str, list[str]] = {}
    for p in paths:
        by_name.setdefault(p.name, []).append(str(p))
    return {name: found for name, found in by_name.items() if len(found) > 1}


def test_no_two_test_modules_share_a_name():
    modules = [p.relative_to(ROOT) for p in (ROOT / "tests").rglob("test_*.py") if "__pycache__" not in p.parts]
    assert not repeated_names(modules), f"test modules with one name: {repeated_names(modules)}"


def test_the_rules_see_what_they_look_for():
    assert repeated_names([Path("tests/a/test_x.py"), Path("tests/b/test_x.py"), Path("tests/b/test_y.py")]) == {
        "test_x.py": ["tests/a/test_x.py", "tests/b/test_x.py"]}
    assert LEFTOVER.search("plan.py.orig") and LEFTOVER.search("x.rej") and not LEFTOVER.search("origin.py")
    assert ISSUE_NAME.search("test_issue11_cases.py") and not ISSUE_NAME.search("test_issues_reader.py")
