"""Offsets simplified with their loops' ranges (`compiler/index_algebra.py`) take the values
the original expressions take at every point of those ranges (C's quotients truncating
toward zero), and a transpose read through a reshape loses its divisions."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.index_algebra import (
    CPU_ROW_WORK,
    ENOUGH_ROWS,
    coalesce_loops,
    collapse_row_nests,
    merge_fold_nests,
    simplified,
)
from funcgrad.compiler.parallel import parallel_loop, value_at

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


def _accesses(body: list, at: dict) -> list:
    """(store offset, load offsets) of every store the statements make, in order, with the
    loop indices walking their ranges (a tiny interpreter of index arithmetic)."""
    done = []
    for statement in body:
        if isinstance(statement, K.Loop):
            for value in range(statement.start, statement.stop):
                done += _accesses(statement.body, {**at, statement.index: value})
        elif isinstance(statement, K.Store):
            loads = [
                value_at(n.offset, at) for n in K.nodes(statement.value) if isinstance(n, K.Load)
            ]
            done.append((value_at(statement.offset, at), tuple(loads)))
    return done


@given(
    st.lists(st.integers(1, 5), min_size=2, max_size=3),
    st.permutations(range(3)),
)
def test_a_small_nest_is_one_loop_walking_its_stores_in_order(sizes, layout):
    """A perfect nest around an elementwise store whose layout is a transpose of the nest's
    order is one loop (its iterations independent), ordered as the stores walk memory: the
    same stores of the same loads, the k-th iteration storing element k."""
    loops = [K.Loop(K.fresh_index("i"), 0, n, []) for n in sizes]
    order = [d for d in layout if d < len(sizes)]
    store = c(0)
    for d in order:  # (the output's dims in `order`)
        store = K.binary("add", K.binary("mul", store, c(sizes[d])), loops[d].index)
    load = c(0)
    for loop, n in zip(loops, sizes):
        load = K.binary("add", K.binary("mul", load, c(n)), loop.index)
    total = math.prod(sizes)
    x, out = (
        K.Buffer("x", np.dtype(np.float32), total),
        K.Buffer("out", np.dtype(np.float32), total),
    )
    body = [K.Store(out, store, K.Load(x, load))]
    for loop in reversed(loops):
        loop.body[:] = body
        body = [loop]
    kernel = K.Kernel("k", [x], [out], body)
    before = sorted(_accesses(kernel.body, {}))
    coalesce_loops(kernel, threads=2)  # (however many iterations its outer loop has)
    [flat] = kernel.body
    assert isinstance(flat, K.Loop) and not any(isinstance(s, K.Loop) for s in flat.body)
    after = _accesses(kernel.body, {})
    assert sorted(after) == before
    assert [stored for stored, _ in after] == list(range(total))


def test_a_nest_folding_into_one_element_a_row_stays_a_nest():
    """`for i: for j: out[i] = out[i] + x[i, j]`: its inner iterations share a store, so the
    nest is not one loop of independent iterations."""
    i, j = K.fresh_index("i"), K.fresh_index("j")
    x, out = K.Buffer("x", np.dtype(np.float32), 12), K.Buffer("out", np.dtype(np.float32), 3)
    total = K.binary("add", K.Load(out, i), K.Load(x, K.binary("add", K.binary("mul", i, c(4)), j)))
    kernel = K.Kernel(
        "k", [x], [out], [K.Loop(i, 0, 3, [K.Loop(j, 0, 4, [K.Store(out, i, total)])])]
    )
    coalesce_loops(kernel, threads=1 << 16)
    assert isinstance(kernel.body[0].body[0], K.Loop)


def _image_means(rows: int, height: int, width: int) -> tuple:
    """`for r: acc = 0; for i: for j: acc += x[r, i, j]; out[r] = acc`, and its buffers."""
    f32 = np.dtype(np.float32)
    x, out = K.Buffer("x", f32, rows * height * width), K.Buffer("out", f32, rows)
    r, i, j, acc = K.fresh_index("r"), K.fresh_index("i"), K.fresh_index("j"), K.Acc("acc", f32)
    offset = (r * c(height) + i) * c(width) + j
    fold = K.Loop(
        i, 0, height, [K.Loop(j, 0, width, [K.SetAcc(acc, acc.read() + K.Load(x, offset))])]
    )
    body = [K.Loop(r, 0, rows, [K.SetAcc(acc, K.const(0, f32)), fold, K.Store(out, r, acc.read())])]
    return K.Kernel("k", [x], [out], body), x, out


def test_a_fold_over_a_nest_becomes_one_loop_reading_the_same_elements():
    kernel, x, out = _image_means(3, 4, 5)
    merge_fold_nests(kernel)
    (row_loop,) = kernel.body
    folds = [s for s in row_loop.body if isinstance(s, K.Loop)]
    assert len(folds) == 1 and folds[0].stop == 20
    assert all(not isinstance(s, K.Loop) for s in folds[0].body)
    (update,) = folds[0].body
    read = next(n for n in K.nodes(update.value) if isinstance(n, K.Load))
    for row in range(3):
        places = [
            value_at(read.offset, {row_loop.index: row, folds[0].index: e}) for e in range(20)
        ]
        assert places == list(range(row * 20, row * 20 + 20))


def test_nests_that_are_not_folds_stay_nests():
    """A store inside the inner loop (the i-k-j running sums of a product) is not a fold."""
    i, j = K.fresh_index("i"), K.fresh_index("j")
    x, out = K.Buffer("x", np.dtype(np.float32), 12), K.Buffer("out", np.dtype(np.float32), 3)
    total = K.binary("add", K.Load(out, i), K.Load(x, K.binary("add", K.binary("mul", i, c(4)), j)))
    kernel = K.Kernel(
        "k", [x], [out], [K.Loop(i, 0, 3, [K.Loop(j, 0, 4, [K.Store(out, i, total)])])]
    )
    merge_fold_nests(kernel)
    assert isinstance(kernel.body[0].body[0], K.Loop)


@pytest.mark.parametrize(
    "outer, row, min_row_work",
    [
        (ENOUGH_ROWS, 1, CPU_ROW_WORK),
        (ENOUGH_ROWS, 16, CPU_ROW_WORK),
        (ENOUGH_ROWS, 1, 1),
        (4, 1, CPU_ROW_WORK),
    ],
)
def test_rows_of_a_nest_are_one_loop_where_each_row_has_work_enough(outer, row, min_row_work):
    """`for a: for b: for c: out[a, b, c] = x[a, b, c]` around rows of `row` elements: one
    loop over the rows (quotients of the row index for a and b) only where a row has at
    least `min_row_work` elements (a CPU's rows of one element paid the quotients at every
    element) or the outer loop has too few iterations to spread over threads; the same
    stores of the same loads either way."""
    a, b, r = K.fresh_index("a"), K.fresh_index("b"), K.fresh_index("c")
    offset = K.binary(
        "add", K.binary("mul", K.binary("add", K.binary("mul", a, c(5)), b), c(row)), r
    )
    x, out = (K.Buffer(name, np.dtype(np.float32), outer * 5 * row) for name in ("x", "out"))
    inner = K.Loop(r, 0, row, [K.Store(out, offset, K.Load(x, offset))])
    kernel = K.Kernel("k", [x], [out], [K.Loop(a, 0, outer, [K.Loop(b, 0, 5, [inner])])])
    before = sorted(_accesses(kernel.body, {}))
    collapse_row_nests(kernel, min_row_work)
    [loop] = kernel.body
    merged = row >= min_row_work or outer < ENOUGH_ROWS
    assert loop.stop == (outer * 5 if merged else outer)
    assert sorted(_accesses(kernel.body, {})) == before


def test_a_store_through_quotients_is_parallel_where_each_iteration_has_its_own():
    """`parallel_loop` takes, for a GPU, a store at an offset not linear in the loop's index
    where the offset differs at every iteration (a transpose written through r / 4 and
    r % 4), and not where two iterations share one (r / 2)."""
    r = K.fresh_index("r")
    x, out = K.Buffer("x", np.dtype(np.float32), 12), K.Buffer("out", np.dtype(np.float32), 12)
    transposed = K.binary(
        "add", K.binary("mul", K.binary("rem", r, c(4)), c(3)), K.binary("div", r, c(4))
    )
    kernel = K.Kernel("k", [x], [out], [K.Loop(r, 0, 12, [K.Store(out, transposed, K.Load(x, r))])])
    assert parallel_loop(kernel, scattered=True) is not None
    assert parallel_loop(kernel) is None  # (a CPU's threads take runs of iterations)
    shared = K.binary("div", r, c(2))
    kernel = K.Kernel("k", [x], [out], [K.Loop(r, 0, 12, [K.Store(out, shared, K.Load(x, r))])])
    assert parallel_loop(kernel, scattered=True) is None


def test_stores_interleaving_in_memory_are_parallel_where_iterations_never_meet():
    """A cumulative sum down columns, `for i < 8: for r < 6: out[r * 8 + i] = ...`: column i
    writes rows 8 apart, so no two columns meet and a GPU's threads take one column each (a
    CPU's, taking runs of iterations, keep to stores whose iterations do not interleave).
    Columns of 8 rows 4 apart (`r * 4 + i`) meet: column 4's row 0 is column 0's row 1."""
    i, r = K.fresh_index("i"), K.fresh_index("r")
    x, out = K.Buffer("x", np.dtype(np.float32), 48), K.Buffer("out", np.dtype(np.float32), 48)
    acc = K.fresh_acc(np.dtype(np.float32))

    def column(stride: int, columns: int) -> K.Kernel:
        offset = K.binary("add", K.binary("mul", r, c(stride)), i)
        body = [
            K.SetAcc(acc, K.const(0, np.dtype(np.float32))),
            K.Loop(
                r,
                0,
                6,
                [
                    K.SetAcc(acc, K.binary("add", acc.read(), K.Load(x, offset))),
                    K.Store(out, offset, acc.read()),
                ],
            ),
        ]
        return K.Kernel("k", [x], [out], [K.Loop(i, 0, columns, body)])

    assert parallel_loop(column(8, 8), scattered=True) is not None
    assert parallel_loop(column(8, 8)) is None
    assert parallel_loop(column(4, 8), scattered=True) is None
    assert parallel_loop(column(4, 4), scattered=True) is not None


def test_stores_walking_down_memory_are_parallel_where_iterations_keep_apart():
    """`for p < 8: for s < 5: out[39 - (p * 5 + s)] = ...` (a reverse scan's parts): each
    iteration writes its own five elements, walking down memory; a GPU's threads take one
    each (a CPU's keep to ascending stores). With parts of 5 stepping 4 apart they overlap."""
    p, s = K.fresh_index("p"), K.fresh_index("s")
    x, out = K.Buffer("x", np.dtype(np.float32), 40), K.Buffer("out", np.dtype(np.float32), 40)

    def parts(step: int) -> K.Kernel:
        offset = K.binary("sub", c(39), K.binary("add", K.binary("mul", p, c(step)), s))
        inner = K.Loop(s, 0, 5, [K.Store(out, offset, K.Load(x, offset))])
        return K.Kernel("k", [x], [out], [K.Loop(p, 0, 8, [inner])])

    assert parallel_loop(parts(5), scattered=True) is not None
    assert parallel_loop(parts(5)) is None
    assert parallel_loop(parts(4), scattered=True) is None
