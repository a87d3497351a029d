"""MSCCL XML: both dialects, round trips, samples written by hand, and malformed input."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.algorithms import allpairs_allreduce, direct_alltoall, ring_allreduce, ring_reducescatter, tree_broadcast
from arborcc.errors import IRFormatError
from arborcc.ir.limits import DIALECTS
from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, Protocol, RankProgram, Step, ThreadBlock
from arborcc.ir.msccl_xml import read_msccl_xml, write_msccl_xml
from arborcc.verify import verify_algorithm

SAMPLES = Path(__file__).parent / "samples"
SAMPLE_FILES = sorted(SAMPLES.glob("*.xml"))


# ---------------------------------------------------------------- samples in the real format
def test_there_are_samples_of_both_dialects():
    names = {p.name for p in SAMPLE_FILES}
    assert {"ring4_allreduce_legacy.xml", "ring4_allreduce_executor.xml",
            "allgather8_legacy.xml", "allgather8_executor.xml"} <= names


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_samples_read_and_verify(path):
    algo = read_msccl_xml(path)
    dialect = "legacy" if "legacy" in path.name else "executor"
    assert read_msccl_xml(path, dialect=dialect) == algo  # has every attribute its dialect requires
    report = verify_algorithm(algo, dialect)
    assert report.ok, [str(v) for v in report.violations]
    assert report.postcondition_checked


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_samples_are_written_back_byte_for_byte(path):
    text = path.read_text()
    dialect = "legacy" if "legacy" in path.name else "executor"
    assert write_msccl_xml(read_msccl_xml(text), dialect) == text


def test_sample_contents():
    legacy = read_msccl_xml(SAMPLES / "ring4_allreduce_legacy.xml")
    assert (legacy.collective, legacy.num_ranks, legacy.chunks_per_loop) == ("allreduce", 4, 4)
    assert legacy.protocol is Protocol.LL and legacy.inplace and not legacy.outofplace
    tb = legacy.ranks[1].threadblocks[0]
    assert (tb.send, tb.recv, tb.channel, len(tb.steps)) == (2, 0, 0, 7)
    assert tb.steps[3] == Step(Op.RECV_REDUCE_COPY_SEND, Buffer.OUTPUT, 2, Buffer.OUTPUT, 2, 1, None, False)
    ag = read_msccl_xml(SAMPLES / "allgather8_executor.xml")
    assert (ag.min_bytes, ag.max_bytes, ag.protocol) == (1024, 1048576, Protocol.LL128)
    assert ag.ranks[3].threadblocks[2].steps[0].dep == Dependency(0, 1)


# ---------------------------------------------------------------- round trips
BUILT = [ring_allreduce(4), ring_allreduce(3, inplace=True), allpairs_allreduce(3), tree_broadcast(5, 2, root=1),
         direct_alltoall(3, 2), ring_reducescatter(3, 2)]


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("algo", BUILT, ids=lambda a: a.name)
def test_round_trip_of_built_algorithms(algo, dialect):
    text = write_msccl_xml(algo, dialect)
    assert read_msccl_xml(text) == algo
    assert write_msccl_xml(read_msccl_xml(text), dialect) == text


def _steps():
    buffers = st.one_of(st.tuples(st.none(), st.just(-1)),
                        st.tuples(st.sampled_from(list(Buffer)), st.integers(0, 9)))
    deps = st.one_of(st.none(), st.builds(Dependency, st.integers(0, 3), st.integers(0, 6)))
    return st.builds(lambda op, s, d, cnt, dep, hd: Step(op, s[0], s[1], d[0], d[1], cnt, dep, hd),
                     st.sampled_from(list(Op)), buffers, buffers, st.integers(0, 5), deps, st.booleans())


def _algorithms(dialect):
    colls = sorted(DIALECTS[dialect].collective_names)
    tbs = st.builds(ThreadBlock, st.integers(0, 5), st.integers(-1, 4), st.integers(-1, 4), st.integers(-1, 3),
                    st.lists(_steps(), max_size=4))
    ranks = st.builds(RankProgram, st.integers(0, 5), st.integers(0, 9), st.integers(0, 9), st.integers(0, 9),
                      st.lists(tbs, max_size=3))
    names = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cn")), max_size=12) | st.sampled_from(
        ['a"b', "x&y<z>", "tab\there", "line\nbreak", "  spaces  "])
    # (minBytes, maxBytes): maxBytes 0 (no limit) or at least minBytes, as the reader requires
    byte_ranges = st.integers(0, 2**40).flatmap(
        lambda low: st.tuples(st.just(low), st.just(0) | st.integers(low, 2**63 - 1)))
    return byte_ranges.flatmap(lambda sizes: st.builds(
        Algorithm, names, st.sampled_from(colls), st.integers(1, 6), st.integers(1, 16),
        st.lists(ranks, max_size=3), st.sampled_from(list(Protocol)), st.booleans(), st.booleans(),
        st.just(sizes[0]), st.just(sizes[1]), st.none() | st.integers(0, 5)))


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_round_trip_of_any_algorithm(dialect):
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_algorithms(dialect))
    def check(algo):
        assert read_msccl_xml(write_msccl_xml(algo, dialect)) == algo

    check()


# ---------------------------------------------------------------- dialect differences
def _algo(collective):
    return Algorithm("x", collective, 2, 2, [RankProgram(0, 2, 2), RankProgram(1, 2, 2)])


def test_reduce_scatter_spelling_per_dialect():
    algo = _algo("reducescatter")
    assert 'coll="reduce_scatter"' in write_msccl_xml(algo, "legacy")
    assert 'coll="reducescatter"' in write_msccl_xml(algo, "executor")
    assert read_msccl_xml(write_msccl_xml(algo, "legacy")).collective == "reducescatter"


def test_executor_writes_all_required_attributes_legacy_the_old_set():
    algo = _algo("allreduce")
    ex = write_msccl_xml(algo, "executor").splitlines()[0]
    assert ex == ('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" '
                  'inplace="0" outofplace="1" minBytes="0" maxBytes="0">')
    assert write_msccl_xml(algo, "legacy").splitlines()[0] == (
        '<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="0">')
    algo.max_bytes, algo.min_bytes, algo.inplace = 4096, 16, True
    leg = write_msccl_xml(algo, "legacy").splitlines()[0]
    assert 'outofplace="1"' in leg and 'minBytes="16"' in leg and 'maxBytes="4096"' in leg


@pytest.mark.parametrize("collective,dialect", [("custom", "executor"), ("gather", "legacy"), ("scatter", "legacy")])
def test_collectives_a_dialect_cannot_name(collective, dialect):
    with pytest.raises(IRFormatError) as e:
        write_msccl_xml(_algo(collective), dialect)
    assert "attribute coll" in str(e.value) and dialect in str(e.value)


def test_unknown_dialect_is_a_programming_error():
    with pytest.raises(ValueError):
        write_msccl_xml(_algo("allreduce"), "nccl")


def test_root_is_kept_as_an_extra_attribute():
    algo = _algo("broadcast")
    algo.root = 1
    text = write_msccl_xml(algo)
    assert 'root="1"' in text and read_msccl_xml(text).root == 1


# ---------------------------------------------------------------- XML from other tools
OTHER_TOOL = """<?xml version="1.0"?>
<!-- a hand-made file with the optional attributes left out -->
<algo name="few" nchunksperloop="2" ngpus="2" coll="allgather" redop="sum">
  <gpu id="0" i_chunks="1" o_chunks="2">
    <tb id="0" send="1" recv="1">
      <step type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"/>
      <step type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0"/>
      <step type="r" dstbuf="o" dstoff="1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2">
    <tb id="0" send="0" recv="0">
      <step type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1"/>
      <step type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1"/>
      <step type="r" dstbuf="o" dstoff="0"/>
    </tb>
  </gpu>
</algo>
"""


def test_missing_optional_attributes_get_defaults():
    algo = read_msccl_xml(OTHER_TOOL)
    assert algo.protocol is Protocol.SIMPLE and not algo.inplace and algo.outofplace
    assert (algo.min_bytes, algo.max_bytes) == (0, 0)
    assert algo.ranks[0].scratch_chunks == 0 and algo.ranks[0].threadblocks[0].channel == 0
    r = algo.ranks[0].threadblocks[0].steps[2]
    assert (r.src_buf, r.src_off, r.count, r.dep, r.has_dep) == (None, -1, 1, None, False)
    assert verify_algorithm(algo).ok


def test_required_attributes_are_enforced_when_a_dialect_is_named():
    with pytest.raises(IRFormatError) as e:
        read_msccl_xml(OTHER_TOOL, dialect="executor")
    assert "<algo>: attribute proto" in str(e.value) and "executor" in str(e.value)


def test_legacy_file_without_outofplace_means_out_of_place_is_not_in_place():
    text = OTHER_TOOL.replace('coll="allgather"', 'coll="allgather" inplace="1"')
    algo = read_msccl_xml(text)
    assert algo.inplace and not algo.outofplace


def test_nop_steps_and_dependencies_are_kept():
    text = write_msccl_xml(allpairs_allreduce(3), "legacy")
    assert 'type="nop"' in text
    algo = read_msccl_xml(text)
    nops = [s for p in algo.ranks for tb in p.threadblocks for s in tb.steps if s.op is Op.NOP]
    assert nops and all(s.dep is not None for s in nops)
    assert write_msccl_xml(algo, "legacy") == text


def test_nop_written_by_msccl_tools_with_zero_count():
    line = '<step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="1" deps="2" hasdep="0"/>'
    text = (f'<algo name="n" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="custom" inplace="0">'
            f'<gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="-1" chan="0">{line}'
            '</tb></gpu></algo>')
    st_ = read_msccl_xml(text).ranks[0].threadblocks[0].steps[0]
    assert st_ == Step(Op.NOP, None, -1, None, -1, 0, Dependency(1, 2), False)
    assert line in write_msccl_xml(read_msccl_xml(text), "legacy")


def test_old_residual_add_spelling_is_accepted():
    text = OTHER_TOOL.replace('type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"',
                              'type="res" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"')
    assert read_msccl_xml(text).ranks[0].threadblocks[0].steps[0].op is Op.RESIDUAL_ADD


def test_reads_from_a_path(tmp_path):
    path = tmp_path / "a.xml"
    path.write_text(write_msccl_xml(ring_allreduce(3)))
    assert read_msccl_xml(path) == ring_allreduce(3)
    assert read_msccl_xml(str(path)) == ring_allreduce(3)


# ---------------------------------------------------------------- malformed input
GOOD_ALGO = '<algo name="m" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="1" coll="allreduce" inplace="0">'
GOOD_GPU = '<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0">'
GOOD_TB = '<tb id="0" send="-1" recv="-1" chan="0">'
GOOD_STEP = '<step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>'


def doc(algo=GOOD_ALGO, gpu=GOOD_GPU, tb=GOOD_TB, step=GOOD_STEP):
    return f"{algo}\n  {gpu}\n    {tb}\n      {step}\n    </tb>\n  </gpu>\n</algo>\n"


def test_the_well_formed_document_reads():
    assert read_msccl_xml(doc()).ranks[0].threadblocks[0].steps[0].op is Op.COPY


@pytest.mark.parametrize("text,place", [
    (doc(algo=GOOD_ALGO.replace(' nchunksperloop="2"', "")), "<algo>: attribute nchunksperloop"),
    (doc(algo=GOOD_ALGO.replace('coll="allreduce"', 'coll="allsum"')), "<algo>: attribute coll"),
    (doc(algo=GOOD_ALGO.replace(' coll="allreduce"', "")), "<algo>: attribute coll"),
    (doc(algo=GOOD_ALGO.replace('proto="Simple"', 'proto="LL64"')), "<algo>: attribute proto"),
    (doc(algo=GOOD_ALGO.replace('ngpus="1"', 'ngpus="one"')), "<algo>: attribute ngpus"),
    (doc(algo=GOOD_ALGO.replace('inplace="0"', 'inplace="0" maxBytes="-5"')), "<algo>: attribute maxBytes"),
    (doc(algo=GOOD_ALGO.replace('inplace="0"', 'inplace="0" redop="avg"')), "<algo>: attribute redop"),
    (doc(algo=GOOD_ALGO.replace('nchannels="1"', 'nchannels="0"')), "<algo>: attribute nchannels"),
    (doc(gpu=GOOD_GPU.replace(' id="0"', "")), "<gpu> #0: attribute id"),
    (doc(gpu=GOOD_GPU.replace('o_chunks="2"', 'o_chunks="2.5"')), "<gpu> 0: attribute o_chunks"),
    (doc(gpu=GOOD_GPU.replace('s_chunks="0"', 's_chunks="-1"')), "<gpu> 0: attribute s_chunks"),
    (doc(tb=GOOD_TB.replace(' id="0"', "")), "<tb> of gpu 0 #0: attribute id"),
    (doc(tb=GOOD_TB.replace('send="-1"', 'send="x"')), "<tb> of gpu 0 tb 0: attribute send"),
    (doc(step=GOOD_STEP.replace('cnt="1"', 'cnt="many"')), "<step> of gpu 0 tb 0 step 0: attribute cnt"),
    (doc(step=GOOD_STEP.replace('cnt="1"', 'cnt="-2"')), "<step> of gpu 0 tb 0 step 0: attribute cnt"),
    (doc(step=GOOD_STEP.replace('type="cpy"', 'type="copy"')), "<step> of gpu 0 tb 0 step 0: attribute type"),
    (doc(step=GOOD_STEP.replace(' type="cpy"', "")), "<step> of gpu 0 tb 0 step 0: attribute type"),
    (doc(step=GOOD_STEP.replace('srcbuf="i"', 'srcbuf="x"')), "<step> of gpu 0 tb 0 step 0: attribute srcbuf"),
    (doc(step=GOOD_STEP.replace(' dstbuf="o"', "")), "<step> of gpu 0 tb 0 step 0: attribute dstbuf"),
    (doc(step=GOOD_STEP.replace('srcoff="0"', 'srcoff="-4"')), "<step> of gpu 0 tb 0 step 0: attribute srcoff"),
    (doc(step=GOOD_STEP.replace('hasdep="0"', 'hasdep="2"')), "<step> of gpu 0 tb 0 step 0: attribute hasdep"),
    (doc(step=GOOD_STEP.replace('s="0"', 's="1"')), "<step> of gpu 0 tb 0 step 0: attribute s"),
    (doc(step=GOOD_STEP.replace('depid="-1"', 'depid="1"')), "<step> of gpu 0 tb 0 step 0: attribute deps"),
    (doc(step='<copy i_off="0" o_off="0" cnt="1"/>'), "<copy> in <tb>"),
    (GOOD_ALGO + GOOD_STEP + "</algo>", "<step>"),
    ("<algorithm/>", "<algorithm> in document"),
])
def test_malformed_files_name_element_and_attribute(text, place):
    with pytest.raises(IRFormatError) as e:
        read_msccl_xml(text, source="bad.xml")
    msg = str(e.value)
    assert msg.startswith("bad.xml:") and place in msg and "\n" not in msg


@pytest.mark.parametrize("text,needle", [
    ("", "not well-formed XML"),
    (doc().replace("</tb>", ""), "not well-formed XML"),
    (doc() + "<algo/>", "not well-formed XML"),
    ("<?xml version='1.0'?><!-- empty -->", "not well-formed XML"),
])
def test_broken_xml_names_the_line(text, needle):
    with pytest.raises(IRFormatError) as e:
        read_msccl_xml(text, source="bad.xml")
    assert needle in str(e.value) and str(e.value).startswith("bad.xml:")


def test_dialect_spelling_is_enforced_when_named():
    text = write_msccl_xml(_algo("reducescatter"), "executor")
    assert read_msccl_xml(text, dialect="executor").collective == "reducescatter"
    with pytest.raises(IRFormatError) as e:
        read_msccl_xml(text, dialect="legacy")
    assert "attribute coll" in str(e.value)


def test_missing_file_is_an_ir_format_error(tmp_path):
    with pytest.raises(IRFormatError) as e:
        read_msccl_xml(tmp_path / "nope.xml")
    assert "nope.xml" in str(e.value)


def test_a_name_xml_cannot_hold_is_refused():
    algo = _algo("allreduce")
    algo.name = "bell\x07"
    with pytest.raises(IRFormatError) as e:
        write_msccl_xml(algo)
    assert "attribute name" in str(e.value)
