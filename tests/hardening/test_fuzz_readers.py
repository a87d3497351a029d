"""Fuzzing every reader: random mutations of valid files end in a result or
in one line naming the input - never another exception, a hang or gigabytes.

Each example mutates a valid sample (hostile numbers, aliases, brackets, deleted and
repeated slices, stray characters), writes it to a file and reads it the way the
command line does (``read_topology``, ``load_algorithm`` and the verifier). A reading
that takes longer than :data:`EXAMPLE_SECONDS` is stopped by an alarm (a hang guard),
and the process's address space is capped at its size plus :data:`MEMORY_BUDGET` while
the readers run, so a reader that tries to allocate gigabytes fails the test with a
MemoryError instead of taking the machine. Under CI the examples are derandomized.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import ArborccError

TESTS = Path(__file__).resolve().parents[1]
EXAMPLE_SECONDS = 20  # per reading: a hang guard, far above what any reading takes
MEMORY_BUDGET = 2**30  # bytes the readers may add to the process
#: per reader: the six readers run in well under a minute; ARBORCC_FUZZ_EXAMPLES=5000 for a long local run
EXAMPLES = int(os.environ.get("ARBORCC_FUZZ_EXAMPLES", "300"))

#: values a careless or hostile writer puts where a number or a name belongs
HOSTILE = ["-1", "0", "-4", "1e400", "NaN", ".nan", "Infinity", "1000000000000", "9" * 30, "3.5", "0x10", "",
           "null", "true", "[]", "{}", "&a [1, 2]", "*a", '"', "'", "<", "&amp;", "&#0;", "]]>", "\u00e9", "\x00"]
STRUCTURE = "[]{}<>:,\"'&*-#!|>\n \t0123456789e."


def sample_texts() -> dict[str, tuple[str, str]]:
    """reader name -> (file suffix, valid text)."""
    from arborcc.ir.json_io import algorithm_to_json
    from arborcc.ir.msccl_xml import read_msccl_xml

    topo = TESTS / "topology" / "samples"
    ring = (TESTS / "ir" / "samples" / "ring4_allreduce_executor.xml").read_text()
    return {
        "topology-yaml": (".yaml", (topo / "small_box.yaml").read_text()),
        "topology-json": (".json", (topo / "small_box.json").read_text()),
        "nccl-xml": (".xml", (topo / "dgx1v_nccl.xml").read_text()),
        "nvidia-smi": (".txt", (topo / "dgx1v_topo.txt").read_text()),
        "msccl-xml": (".xml", ring),
        "algorithm-json": (".json", algorithm_to_json(read_msccl_xml(ring))),
    }


SAMPLES = sample_texts()


@st.composite
def mutated(draw, text: str) -> str:
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["number", "delete", "repeat", "insert", "hostile"]))
        n = len(text)
        at = draw(st.integers(0, max(n - 1, 0)))
        if kind == "number":
            numbers = list(re.finditer(r"-?\d+(\.\d+)?", text))
            if numbers:
                m = draw(st.sampled_from(numbers))
                text = text[:m.start()] + draw(st.sampled_from(HOSTILE)) + text[m.end():]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        elif kind == "repeat":
            piece = text[at:at + draw(st.integers(1, 300))]
            text = text[:at] + piece * draw(st.integers(2, 50)) + text[at:]
        elif kind == "insert":
            text = text[:at] + draw(st.text(alphabet=STRUCTURE, min_size=1, max_size=12)) + text[at:]
        else:
            text = text[:at] + draw(st.sampled_from(HOSTILE)) + text[at:]
    return text


@contextmanager
def budget():
    """Cap the address space (current size + MEMORY_BUDGET) and the time of one reading."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = _address_space()
    cap = size + MEMORY_BUDGET if size else soft
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)

    def timeout(signum, frame):
        raise TimeoutError(f"a reading took more than {EXAMPLE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, timeout)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.alarm(EXAMPLE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, old)


def _address_space() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def read_as_the_cli_does(reader: str, path: Path):
    if reader in ("msccl-xml", "algorithm-json"):
        from arborcc.ir.load import load_algorithm
        from arborcc.verify import verify_algorithm

        return verify_algorithm(load_algorithm(path))
    from arborcc.topology.readers import read_topology

    topo = read_topology(path)
    return topo.gpus


@pytest.mark.parametrize("reader", list(SAMPLES))
def test_mutated_files_end_in_a_result_or_one_line(reader, tmp_path_factory):
    suffix, valid = SAMPLES[reader]
    folder = tmp_path_factory.mktemp(f"fuzz_{reader}")
    path = folder / f"input{suffix}"
    path.write_text(valid)
    read_as_the_cli_does(reader, path)  # the unmutated sample reads

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(text=mutated(valid))
    def check(text: str) -> None:
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            with budget():
                read_as_the_cli_does(reader, path)
        except ArborccError as e:
            message = str(e)
            assert "\n" not in message and message.strip(), repr(message)
            assert len(getattr(e, "problem", message)) < 600, message[:300]

    check()


def test_the_budget_stops_a_reader_that_allocates_too_much():
    """The guard itself: an allocation over the budget fails inside it (so a memory bomb
    fails the fuzz test instead of taking the machine)."""
    with pytest.raises(MemoryError):
        with budget():
            bytearray(2 * MEMORY_BUDGET)
    json.dumps(list(range(10)))  # and the process is usable afterwards


def test_a_very_long_unknown_key_is_quoted_by_its_ends():
    # found by the fuzz test above (random run): a mutation turned a device's text into one
    # 600-character key, and the message quoted it twice, whole
    from arborcc.topology.machines import build_machine
    from arborcc.topology.topofile import dump_topology, parse_topology

    text = dump_topology(build_machine("dgx1v"), "yaml").replace("kind: cpu", "kind" + "x" * 700 + ": cpu", 1)
    with pytest.raises(ArborccError) as info:
        parse_topology(text, "yaml", "f.yaml")
    message = str(info.value)
    assert "unknown key 'kindxxx" in message and "..." in message and len(message) < 300, message


@pytest.mark.parametrize("key, line", [("host", "host: 0"), ("kind", "kind: cpu"),
                                       ("arborcc_topology", "arborcc_topology: 1")])
def test_a_very_long_wrong_value_is_quoted_by_its_ends(key, line):
    # found by the fuzz test above (random run): a mutation turned a device's host into a
    # 750-character string of many words, and "expected an integer" quoted it whole
    from arborcc.topology.machines import build_machine
    from arborcc.topology.topofile import dump_topology, parse_topology

    text = dump_topology(build_machine("dgx1v"), "yaml")
    assert line in text
    text = text.replace(line, f"{key}: '{'yy ' * 250}'", 1)
    with pytest.raises(ArborccError) as info:
        parse_topology(text, "yaml", "f.yaml")
    message = str(info.value)
    assert "yy yy" in message and "..." in message and len(message) < 400, message
