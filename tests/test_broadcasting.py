"""XLA's client-level broadcasting rules, against every example of the broadcasting document."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.shapes.broadcasting import BroadcastError, broadcast_shape, explicit_broadcast, promote, suggest

# (lhs dims, rhs dims, broadcast_dimensions, result) — the document's examples, in its order
DOC_EXAMPLES = [
    ((2, 3), (), None, (2, 3)),                  # matrix + scalar
    ((2, 3), (3,), (1,), (2, 3)),                # matrix + vector along dimension 1
    ((3, 3), (3,), (1,), (3, 3)),                # 3x3 + vector: each element a column...
    ((3, 3), (3,), (0,), (3, 3)),                # ...or a row
    ((2, 3, 4), (3, 4), (1, 2), (2, 3, 4)),      # cuboid + matrix on dims 1 and 2
    ((2, 1), (2, 3), None, (2, 3)),              # degenerate examples 1-3
    ((1, 2, 5), (7, 2, 5), None, (7, 2, 5)),
    ((7, 2, 5), (7, 1, 5), None, (7, 2, 5)),
    ((2, 1), (1, 3), None, (2, 3)),              # outer operation
    ((4,), (1, 2), (0,), (4, 2)),                # composition: vector + 1x2 with (0)
    ((4, 3, 1), (1, 2), (1, 2), (4, 3, 2)),      # 4x3x1 + 1x2 with (1, 2)
]


@pytest.mark.parametrize("lhs,rhs,bd,want", DOC_EXAMPLES)
def test_document_examples(lhs, rhs, bd, want):
    assert broadcast_shape(lhs, rhs, bd) == want
    assert broadcast_shape(rhs, lhs, bd) == want


def test_document_incompatible_example():
    with pytest.raises(BroadcastError, match="dimension 2 has sizes 5 and 6"):
        broadcast_shape((7, 2, 5), (7, 2, 6))


@pytest.mark.parametrize("bd,fragment", [
    ((2, 1), "strictly increasing"),            # V matched to N, T to P: illegal order
    ((1, 1), "strictly increasing"),
    ((0,), "one dimension for each"),
    ((1, 4), "rank-4"),
])
def test_illegal_broadcast_dimensions(bd, fragment):
    with pytest.raises(BroadcastError, match=fragment):
        broadcast_shape((2, 3, 4, 5), (3, 4), bd)


def test_rank_mismatch_needs_broadcast_dimensions():
    with pytest.raises(BroadcastError, match="need broadcast_dimensions"):
        broadcast_shape((2, 3), (3,))


def test_promote_places_dims():
    assert promote((3, 4), 4, (1, 3)) == (1, 3, 1, 4)


def test_explicit_broadcast_drops_degenerate_dims():
    plan = explicit_broadcast((2, 1), (2, 3))
    assert plan.reshaped == (2,) and plan.dimensions == (0,)
    assert "reshape" in plan.hlo("f32", "%x") and "dimensions={0}" in plan.hlo("f32", "%x")


def test_suggest():
    plans = suggest([(2, 3), (3,)])
    assert plans[0] is None and plans[1].dimensions == (1,)
    assert suggest([(2, 3), (4,)]) is None


dims = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


@settings(max_examples=200, deadline=None)
@given(dims, st.data())
def test_degenerate_rule_matches_numpy(a, data):
    # same rank: XLA's degenerate rule is NumPy's rule
    b = tuple(data.draw(st.sampled_from([d, 1])) for d in a)
    assert broadcast_shape(a, b) == np.broadcast_shapes(a, b)
    assert broadcast_shape(b, a) == np.broadcast_shapes(a, b)


@settings(max_examples=200, deadline=None)
@given(dims, st.data())
def test_explicit_plan_reproduces_values(result, data):
    """Applying the suggested reshape + broadcast(dimensions) with NumPy gives the broadcast value."""
    rank = len(result)
    k = data.draw(st.integers(0, rank))
    positions = sorted(data.draw(st.permutations(range(rank)))[:k])
    operand = tuple(data.draw(st.sampled_from([result[p], 1])) for p in positions)
    plan = explicit_broadcast(operand, result, positions if k < rank else None)
    x = np.arange(int(np.prod(operand)) if operand else 1).reshape(operand)
    y = x.reshape(plan.reshaped) if plan.reshaped is not None else x
    # broadcast(y, dimensions): y's dim j lands on result dim plan.dimensions[j]
    shape = [1] * rank
    for j, d in enumerate(plan.dimensions):
        shape[d] = y.shape[j]
    got = np.broadcast_to(y.reshape(shape), result)
    want = np.broadcast_to(x.reshape(promote(operand, rank, positions) if k < rank else operand), result)
    assert np.array_equal(got, want)


def test_an_operand_of_higher_rank_than_the_result_has_no_plan():
    with pytest.raises(BroadcastError, match="rank 1 cannot become rank 0"):
        explicit_broadcast((4,), ())
    assert suggest([(), (4,)], ()) is None
