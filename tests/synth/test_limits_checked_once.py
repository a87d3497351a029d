"""Each algorithm's runtime limits are checked once per synthesis: the version search of a
lowering (lower_search.within_limits) hands its verdict to the strategy cascade, which
checks only the algorithms no search judged."""

from arborcc.ir.limits import check_dialect_limits
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine

#: algorithms the tree strategies build through within_limits
SEARCHED = ("trees-allreduce", "binary-trees-allreduce", "double-binary-tree-allreduce")


def test_the_cascade_reads_the_version_search_verdict_instead_of_checking_again(monkeypatch):
    import arborcc.synth.synthesis as S

    asked = []

    def counted(algo, dialect, *args, **kwargs):
        asked.append(algo.name)
        return check_dialect_limits(algo, dialect, *args, **kwargs)

    monkeypatch.setattr(S, "check_dialect_limits", counted)
    result = S.synthesize(induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"]), "allreduce")
    assert asked, "the candidates without a search verdict (rings, stages) are checked by the cascade"
    assert len(asked) == len(set(asked)), f"an algorithm checked twice: {asked}"
    assert not set(asked) & set(SEARCHED), f"searched algorithms checked again: {asked}"
    assert result.limits == ("executor", not check_dialect_limits(result.algorithm, "executor"))


def test_a_version_search_verdict_is_the_limits_check_of_the_version_it_returns():
    from arborcc.synth.bounds import collective_bound
    from arborcc.synth.registry import BY_NAME
    from arborcc.synth.result import SynthesisRequest

    topology = build_machine("dgx1v")
    request = SynthesisRequest(topology, "allgather", collective_bound(topology, "allgather", 0, "all"))
    result = BY_NAME["trees"].function(request)
    assert result.limits == ("executor", not check_dialect_limits(result.algorithm, "executor"))
