"""Random flag values for simulate, compare, tune and synth, and damaged algorithm files
for simulate, show and verify, run in process (``main(argv)``): every command ends in
exit 0 with output, or in one line on stderr and exit 2 (exit 1 where a command answers
"this algorithm is wrong": verify's INCORRECT, synth's failed check) - never a
traceback or another exception.

The values mix valid ones (small machines and allocations, so a valid request costs
milliseconds) with the careless and hostile ones of their kind. Few examples per
command (``deadline=None``, derandomized under CI by tests/conftest.py); a hang guard
stops the whole file. ``ARBORCC_FUZZ_EXAMPLES`` raises the count for a long local run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.cli.main import main
from arborcc.ir.json_io import algorithm_to_json
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library.nccl_ring import ring_allreduce_algorithm

EXAMPLES = int(os.environ.get("ARBORCC_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
pytestmark = pytest.mark.timeout(300)  # a hang guard for the whole file, not a performance check

RING = ring_allreduce_algorithm([[0, 1, 2, 3]])
RING_XML = write_msccl_xml(RING, "legacy")
RING_JSON = algorithm_to_json(RING)

HOSTILE = ["", "-1", "0", "x", "nan", "inf", "-inf", "1e400", "1e30", "9" * 25, "0x10", "3.5", " ", "\u00e9"]


def mostly(valid: list, hostile: list | st.SearchStrategy) -> st.SearchStrategy:
    """A valid value nine times in ten (shrinking towards one), else a hostile one: most
    examples then reach the command's work with one or two bad values, not none."""
    bad = hostile if isinstance(hostile, st.SearchStrategy) else st.sampled_from(hostile)
    return st.integers(0, 9).flatmap(lambda k: st.sampled_from(valid) if k < 9 else bad)


MACHINES = mostly(["dgx1v", "dgx1p", "dgx-a100", "hierarchy:2@10,2@1"],
                  st.one_of(st.sampled_from(["dgx2", "hierarchy:", "hierarchy:0@1", "hierarchy:2@inf",
                                             "hierarchy:2@-1,x", "hierarchy:2@1e400", "hierarchy:1@1", "nope", "",
                                             *HOSTILE]), st.text(max_size=8)))
GPUS = mostly(["0,1", "0,1,2,3", "1,0,3,2", "0,2", "n0.gpu1,n1.gpu1"],
              ["1,4,5,6", "", "0,0", "99", "-1", "a", "0,,1", "1e3", "0", *HOSTILE])
NODES = mostly([None, None, "2"], ["1", "0", "-1", "x", "1e9", "99999999999999999999", *HOSTILE])
COLLECTIVES = mostly(["allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter",
                      "alltoall"], ["bogus", "", "ALLREDUCE"])
PROTOCOLS = mostly([None, "auto", "LL", "LL128", "Simple"], ["ll", "", "x"])
ROOTS = mostly([None, "0", "1", "3"], ["4", "-1", "99", "x", "1e3", "", *HOSTILE])
STRATEGY_LISTS = mostly(["ring", "nccl-ring", "trees", "ring,trees", " ring ", "direct,two-step"],
                        [",", "nope", "ring,nope", ""])
SYNTH_STRATEGIES = mostly(["auto", "ring", "trees", "nccl-ring", "binary-trees", "direct", "two-step"], ["nope", ""])
INSTANCES = mostly([None, "1", "2", "32"], ["33", "0", "-1", "x", *HOSTILE])
TUNE_INSTANCES = mostly(["1", "1,2", "2,1", "32"], ["", ",", "0", "33", "1,x", "-1", "1e3", *HOSTILE])
FIDELITIES = mostly([None, "ideal", "v100", "a100"], ["nope", "", *HOSTILE])
FACTORS = ["", "2", "4", "1.5", "1", "0", "-2", "inf", "nan", "x", "1e400"]
SIZE_CHARS = "0123456789.eEKMGTkmgtiIbB+-_ "

size_text = mostly(["1K", "1M", "64M", "1G", "1GB", "8", "1.5K", "64MiB"],
                   st.one_of(st.sampled_from(["inf", "nan", "1e400", "", "0", "-1", "9223372036854775807",
                                              "9223372036854775808", "1.3", *HOSTILE]),
                             st.text(SIZE_CHARS, max_size=6)))
sizes_text = mostly(
    ["1K:1M", "8:1G:1024", "1M", "4K,1M", "1K:1G:32", "64M:64M"],
    st.one_of(st.sampled_from(["1K:inf", "1:1e400", "1G:1K", "1:2:3:4", ":", ",", "8:8T:1.0001", *HOSTILE]),
              size_text,
              st.builds(lambda a, b: f"{a}:{b}", size_text, size_text),
              st.builds(lambda a, b, f: f"{a}:{b}:{f}", size_text, size_text, st.sampled_from(FACTORS)),
              st.builds(lambda items: ",".join(items), st.lists(size_text, max_size=4))))


def flag(name: str, value: str | None) -> list[str]:
    """``--name=value`` (so a value starting with '-' stays the flag's), nothing for None."""
    return [] if value is None else [f"{name}={value}"]


@st.composite
def topology_flags(draw) -> list[str]:
    machine = draw(MACHINES)
    return [*flag("--machine", machine), *flag("--nodes", draw(NODES)), *flag("--gpus", draw(GPUS))]


def run(capsys, argv: list[str], wrong_code: int | None = None) -> None:
    """Exit 0 with output, or one line on stderr and exit 2 (``wrong_code``: the command's
    "the algorithm is wrong" answer, one line too)."""
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, (argv, captured.err)
    if code == 0:  # a report, on stderr where the output itself went to standard output or a device
        assert captured.out.strip() or captured.err.strip(), argv
        return
    lines = [line for line in captured.err.splitlines() if line.strip()]
    if code == wrong_code and not lines:
        lines = [line for line in captured.out.splitlines() if line.strip()]
    assert code in (2, wrong_code), (argv, code, captured.err[-2000:])
    assert len(lines) == 1, (argv, captured.err[-2000:])


@pytest.fixture(scope="module")
def ring_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "ring.xml"
    path.write_text(RING_XML)
    return str(path)


@FUZZ
@given(topology=topology_flags(), sizes=sizes_text, protocol=PROTOCOLS, instances=INSTANCES, fidelity=FIDELITIES,
       details=st.lists(st.sampled_from(["--critical-path", "--links", "--json"]), unique=True, max_size=3))
def test_simulate_with_random_flags_is_a_result_or_one_line(capsys, ring_file, topology, sizes, protocol,
                                                            instances, fidelity, details):
    run(capsys, ["simulate", ring_file, *topology, *flag("--sizes", sizes), *flag("--protocol", protocol),
                 *flag("--instances", instances), *flag("--fidelity", fidelity), *details])


@FUZZ
@given(topology=topology_flags(), sizes=sizes_text, protocol=PROTOCOLS, collective=COLLECTIVES, root=ROOTS,
       strategies=STRATEGY_LISTS)
def test_compare_with_random_flags_is_a_result_or_one_line(capsys, topology, sizes, protocol, collective, root,
                                                           strategies):
    run(capsys, ["compare", *topology, *flag("--sizes", sizes), *flag("--protocol", protocol),
                 *flag("--collective", collective), *flag("--root", root), *flag("--strategies", strategies)])


@FUZZ
@given(topology=topology_flags(), sizes=sizes_text, protocol=PROTOCOLS, collective=COLLECTIVES, root=ROOTS,
       strategies=STRATEGY_LISTS, instances=TUNE_INSTANCES)
def test_tune_with_random_flags_is_a_result_or_one_line(capsys, topology, sizes, protocol, collective, root,
                                                        strategies, instances):
    run(capsys, ["tune", *topology, *flag("--sizes", sizes), *flag("--protocol", protocol),
                 *flag("--collective", collective), *flag("--root", root),
                 *flag("--strategies", strategies), *flag("--instances", instances)])


@FUZZ
@given(topology=topology_flags(), size=st.one_of(st.none(), size_text), collective=COLLECTIVES, root=ROOTS,
       strategy=SYNTH_STRATEGIES)
def test_synth_with_random_flags_is_a_result_or_one_line(capsys, topology, size, collective, root, strategy):
    run(capsys, ["synth", *topology, *flag("--size", size), *flag("--collective", collective),
                 *flag("--root", root), *flag("--strategy", strategy)], wrong_code=1)


@st.composite
def damaged_algorithm(draw) -> tuple[str, str]:
    """(suffix, text): the 4-rank ring as XML or JSON with a value replaced, a slice cut
    out or repeated, or stray characters put in."""
    suffix, text = draw(st.sampled_from([(".xml", RING_XML), (".json", RING_JSON)]))
    how = draw(st.sampled_from(["value", "cut", "repeat", "insert"]))
    if how == "value":
        quote = '"'
        starts = [i for i, c in enumerate(text) if c == quote]
        i = draw(st.sampled_from(starts[:-1]))
        j = text.index(quote, i + 1)
        return suffix, text[:i + 1] + draw(st.sampled_from(HOSTILE)) + text[j:]
    a = draw(st.integers(0, len(text)))
    b = draw(st.integers(a, min(len(text), a + 200)))
    if how == "cut":
        return suffix, text[:a] + text[b:]
    if how == "repeat":
        return suffix, text[:b] + text[a:b] + text[b:]
    return suffix, text[:a] + draw(st.text("<>/=\"'{}[],:-0123456789 \n", max_size=8)) + text[a:]


@FUZZ
@given(damaged=damaged_algorithm(), command=st.sampled_from(["simulate", "show", "verify"]))
def test_damaged_algorithm_files_are_a_result_or_one_line(capsys, tmp_path_factory, damaged, command):
    suffix, text = damaged
    path = tmp_path_factory.mktemp("damaged") / f"algo{suffix}"
    path.write_text(text)
    extra = ["--machine=dgx1v", "--gpus=0,1,2,3", "--sizes=1M"] if command == "simulate" else []
    run(capsys, [command, str(path), *extra], wrong_code=1 if command == "verify" else None)


SLOTS = mostly([None, "1", "2", "8", "2147483647"], ["0", "-1", "2147483648", "1000000000000", "x", *HOSTILE])
DIALECTS = mostly([None, "legacy", "executor"], ["nope", "", "LEGACY"])
MAX_RANKS = mostly([None, "0", "1", "32"], ["-5", "99999999999999999999999", "x", *HOSTILE])


@FUZZ
@given(command=st.sampled_from(["verify", "show", "convert"]), slots=SLOTS, dialect=DIALECTS, max_ranks=MAX_RANKS,
       mode=st.sampled_from([None, "--inplace", "--outofplace"]),
       output=mostly([None, "out.xml", "out.json", "sub/out.xml", "-"], ["", ".", "out.xml/x", "/dev/null"]),
       suffix=st.sampled_from([".xml", ".json"]))
def test_verify_show_convert_with_random_flags_are_a_result_or_one_line(capsys, tmp_path_factory, command, slots,
                                                                       dialect, max_ranks, mode, output, suffix):
    folder = tmp_path_factory.mktemp("flags")
    path = folder / f"ring{suffix}"
    path.write_text(RING_XML if suffix == ".xml" else RING_JSON)
    (folder / "out.xml").mkdir(exist_ok=True) if output == "out.xml/x" else None
    argv = {"verify": ["verify", str(path), *flag("--slots", slots), *flag("--dialect", dialect)],
            "show": ["show", str(path), *flag("--max-ranks", max_ranks)],
            "convert": ["convert", str(path), *flag("--dialect", dialect), *([mode] if mode else []),
                        *flag("-o", output if output in (None, "-", "", "/dev/null") else str(folder / output))],
            }[command]
    run(capsys, argv, wrong_code=1 if command == "verify" else None)


def test_verify_slots_beyond_32_bits_are_one_line(tmp_path, capsys):
    (tmp_path / "ring.xml").write_text(RING_XML)
    assert main(["verify", str(tmp_path / "ring.xml"), "--slots", "1000000000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--slots" in err[0] and "2,147,483,647" in err[0], err
    assert main(["verify", str(tmp_path / "ring.xml"), "--slots", "2147483647"]) == 0
