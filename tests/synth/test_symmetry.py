"""Orbits of the automorphism group of capacitated graphs (bliss through igraph)."""

import numpy as np

from arborcc.synth.symmetry import graph_orbits


def orbits(arcs, caps=None, ranks=None, n=None, fixed=None):
    src = np.array([a for a, _ in arcs])
    dst = np.array([b for _, b in arcs])
    n = n or int(max(src.max(), dst.max())) + 1
    caps = np.ones(len(arcs)) if caps is None else np.array(caps, dtype=float)
    return graph_orbits(n, src, dst, caps, list(range(n)) if ranks is None else ranks, fixed)


def both_ways(edges):
    return [a for u, v in edges for a in ((u, v), (v, u))]


def test_a_ring_is_vertex_transitive_and_a_path_pairs_its_ends():
    ring = orbits(both_ways([(i, (i + 1) % 5) for i in range(5)]))
    assert set(ring.node.tolist()) == {0}
    path = orbits(both_ways([(0, 1), (1, 2), (2, 3)]))
    assert path.node.tolist() == [0, 1, 1, 0]
    assert path.representatives(range(4)) == [0, 1]


def test_capacities_relays_and_a_fixed_vertex_break_symmetry():
    square = both_ways([(0, 1), (1, 2), (2, 3), (3, 0)])
    assert len(set(orbits(square).node.tolist())) == 1
    heavier = [2.0 if {a, b} == {0, 1} else 1.0 for a, b in square]
    assert orbits(square, heavier).node.tolist() == [0, 0, 2, 2]
    assert orbits(square, ranks=[0, 1, 2]).node.tolist() == [0, 1, 0, 3]  # node 3 is a relay
    fixed = orbits(square, fixed=0)
    assert fixed.node.tolist() == [0, 1, 2, 1]
    # arcs: 0->1 and 0->3 are one orbit once 0 is fixed, 1->2 and 3->2 another
    arc = dict(zip(square, fixed.arc.tolist()))
    assert arc[(0, 1)] == arc[(0, 3)] and arc[(1, 2)] == arc[(3, 2)] and arc[(0, 1)] != arc[(1, 2)]


def test_direction_matters():
    # a directed 3-cycle: rotations only; with one reversed arc nothing is symmetric
    assert set(orbits([(0, 1), (1, 2), (2, 0)]).node.tolist()) == {0}
    assert len(set(orbits([(0, 1), (1, 2), (0, 2)]).node.tolist())) == 3


def test_orbit_labels_are_the_smallest_member_of_each_class():
    # random permutations (as igraph returns them: lists) against classes found by search
    import arborcc.synth.native as native

    rng = np.random.default_rng(7)
    for size in (1, 2, 5, 30):
        for gens in range(4):
            perms = []
            for _ in range(gens):  # permutations that move a few points
                perm = np.arange(size)
                moved = rng.choice(size, size=min(size, 3), replace=False)
                perm[moved] = rng.permutation(moved)
                perms.append(perm.tolist())
            seen = {}
            for start in range(size):
                if start in seen:
                    continue
                todo, members = [start], {start}
                while todo:
                    v = todo.pop()
                    for w in [p[v] for p in perms] + [p.index(v) for p in perms]:
                        if w not in members:
                            members.add(w)
                            todo.append(w)
                for v in members:
                    seen[v] = min(members)
            assert native.orbit_labels(size, perms).tolist() == [seen[v] for v in range(size)]
    assert native.orbit_labels(3, [np.array([1, 0, 2])]).tolist() == [0, 0, 2]  # arrays too
