"""The top level of the ``arborcc`` command: which subcommand a line invokes (only its
module is loaded), and that each subcommand's parser is whole when it is invoked."""

from __future__ import annotations

import contextlib
import io

import pytest

from arborcc.cli.main import COMMANDS, invoked_command, main


@pytest.mark.parametrize("argv, command", [
    ([], None),
    (["--help"], None),
    (["--version"], None),
    (["synth", "--help"], "synth"),
    (["--limit", "ranks=5", "show", "a.xml"], "show"),
    (["--limit=ranks=5", "verify"], "verify"),
    (["--lim", "ranks=5", "tune"], "tune"),  # argparse takes the abbreviation
    (["--limit"], None),
    (["nosuch", "--help"], "*"),
    (["--limit", "ranks=5", "ranks=6"], "*"),
])
def test_the_invoked_command_is_the_first_word_that_is_no_option(argv, command):
    assert invoked_command(argv) == command


@pytest.mark.parametrize("name", [name for name, _ in COMMANDS])
def test_each_command_s_help_is_its_own(name):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main([name, "--help"])
    assert stop.value.code == 0
    assert out.getvalue().startswith(f"usage: arborcc {name}")
    assert "-h, --help" in out.getvalue()


def test_an_unknown_command_is_named_in_one_line(capsys):
    assert main(["nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'nosuch'" in err and "\n" not in err
