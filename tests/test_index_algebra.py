"""Offsets simplified with their loops' ranges (`compiler/index_algebra.py`) take the values
the original expressions take at every point of those ranges (C's quotients truncating
toward zero), and a transpose read through a reshape loses its divisions."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.index_algebra import simplified, value_at

INDICES = [K.Index(name) for name in "ijk"]


def c(value: int) -> K.Expr:
    return K.const(value, K.INDEX)


def expressions(depth: int):
    leaves = st.one_of(st.sampled_from(INDICES), st.integers(-3, 70).map(c))
    if depth == 0:
        return leaves
    inner = expressions(depth - 1)
    return st.one_of(
        leaves,
        st.tuples(st.sampled_from(["add", "sub"]), inner, inner).map(lambda t: K.binary(*t)),
        st.tuples(inner, st.integers(-2, 70)).map(lambda t: K.binary("mul", t[0], c(t[1]))),
        st.tuples(st.sampled_from(["div", "rem"]), inner, st.integers(1, 70)).map(
            lambda t: K.binary(t[0], t[1], c(t[2]))
        ),
        st.tuples(inner, inner, inner, inner).map(
            lambda t: K.select(K.binary("lt", t[0], t[1]), t[2], t[3])
        ),
    )


@given(
    expressions(4),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), min_size=3, max_size=3),
)
def test_simplified_offsets_take_the_same_values_over_their_ranges(e, bounds):
    ranges = {index: (start, start + size - 1) for index, (start, size) in zip(INDICES, bounds)}
    simple = simplified(e, ranges)
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
        at = dict(zip(INDICES, point))
        assert value_at(simple, at) == value_at(e, at)


def test_a_transpose_read_through_a_reshape_loses_its_divisions():
    i, j, k, l = (K.Index(name) for name in "ijkl")
    b = K.binary
    flat = b(
        "add", b("mul", b("add", b("mul", b("add", b("mul", i, c(4)), j), c(64)), k), c(64)), l
    )
    rows = b("div", flat, c(64))
    # (i, j, k, l) of a (32, 4, 64, 64) array read as (i, k, j, l): the flat index split again
    offset = b(
        "add",
        b(
            "mul",
            b("add", b("mul", b("add", b("mul", b("div", b("div", rows, c(64)), c(4)), c(64)),
              b("rem", rows, c(64))), c(4)), b("rem", b("div", rows, c(64)), c(4))),
            c(64),
        ),
        b("rem", flat, c(64)),
    )  # fmt: skip
    ranges = {i: (0, 31), j: (0, 3), k: (0, 63), l: (0, 63)}
    simple = simplified(offset, ranges)
    assert not [n for n in K.nodes(simple) if isinstance(n, K.Binary) and n.op in ("div", "rem")]
    for point in [(0, 0, 0, 0), (31, 3, 63, 63), (5, 2, 17, 40)]:
        at = dict(zip((i, j, k, l), point))
        p, q, r, s = point
        expected = ((p * 64 + r) * 4 + q) * 64 + s
        assert value_at(simple, at) == value_at(offset, at) == expected


@given(
    st.sampled_from(["div", "rem"]),
    st.integers(1, 8),
    st.integers(0, 3),
    st.integers(-2, 3),
    st.integers(-1, 9),
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9)), min_size=3, max_size=3),
)
def test_quotients_of_sums_split_exactly_at_their_edges(
    op, divisor, multiple, scale, shift, bounds
):
    """`op(i * m * c + j * s + rem(k, c) + shift, c)`: the rest `j * s + rem(k, c) + shift`
    just below `c`, at it, above it, or negative."""
    i, j, k = INDICES
    ranges = {index: (start, start + size - 1) for index, (start, size) in zip(INDICES, bounds)}
    wrapped = K.binary("rem", k, c(divisor))
    rest = K.binary("add", K.binary("add", K.binary("mul", j, c(scale)), wrapped), c(shift))
    e = K.binary(op, K.binary("add", K.binary("mul", i, c(multiple * divisor)), rest), c(divisor))
    simple = simplified(e, ranges)
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
        at = dict(zip(INDICES, point))
        assert value_at(simple, at) == value_at(e, at)


@given(st.integers(1, 9), st.integers(-3, 3), st.integers(-4, 4), st.integers(0, 2))
def test_a_row_split_into_its_coordinates_is_the_row_again(count, scale, shift, start):
    """`(div(r, c) * c + rem(r, c)) * s + shift` is `r * s + shift`: no division left."""
    (r,) = INDICES[:1]
    rows = K.binary("add", r, c(shift))
    split = K.binary(
        "add",
        K.binary("mul", K.binary("div", rows, c(count)), c(count)),
        K.binary("rem", rows, c(count)),
    )
    e = K.binary("add", K.binary("mul", split, c(scale)), c(3))
    ranges = {r: (start, start + 20)}
    simple = simplified(K.binary("add", e, c(0)), ranges)
    assert not [n for n in K.nodes(simple) if isinstance(n, K.Binary) and n.op in ("div", "rem")]
    for point in range(start, start + 21):
        assert value_at(simple, {r: point}) == value_at(e, {r: point})
