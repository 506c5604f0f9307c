"""Offsets simplified with the ranges of the loops around them, and nests of rows made one
loop over the rows (`collapse_row_nests`).

Fusion composes index maps: a transpose read through a reshape becomes quotients and
remainders of a flat index, `rem(div(((i * 4 + j) * 64 + k) * 64 + l, 64), 64)`, which a
compiler that does not know `l < 64` must compute with divisions at every element (an
attention's softmax spent most of its time so). Each offset is written as a sum of terms
`coefficient * atom` plus a constant (atoms: loop indices, and what is not a sum: a select,
a quotient left standing); a quotient or remainder by `c` of a sum whose parts are not
negative then splits it into `c * Q + R`, the terms whose coefficients `c` divides and the
rest: `div = Q + div(R, c)` and `rem = rem(R, c)`, and where the rest stays below `c`,
`div = Q` and `rem = R`. Nothing is rewritten where a part may be negative (C's quotients
truncate toward zero) or an atom's range is not known. `c * div(x, c) + rem(x, c)` is `x`
again, whatever x.
"""

from __future__ import annotations

import dataclasses
import math

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.parallel import (
    MIN_TILED_RESULTS,
    body_replaced,
    body_work,
    expressions,
    linear,
    linear_terms,
    parallel_loop,
    perfect_nest,
    product_nest,
    replaced_in,
    statements_in,
)


def simplify_offsets(kernel: K.Kernel) -> None:
    """Rewrites the offsets of the kernel's loads and stores in place."""
    kernel.body[:] = _statements(kernel.body, {})


# The fewest iterations of a row's work for which a CPU's nest is made one loop of rows: a
# row's quotients cost a few multiplications, small beside this much work. Rows of less are
# still made one loop while the outer loop has fewer than ENOUGH_ROWS iterations, too few to
# spread over the threads evenly.
CPU_ROW_WORK = 16
ENOUGH_ROWS = 64


def collapse_row_nests(kernel: K.Kernel, min_row_work: int = 1) -> None:
    """`for i: for j: <rows' work>` as one loop over the rows, `for r: <work with i = r / J,
    j = r % J>`, wherever the kernel is such a nest, the work holds loops of its own (so the
    quotients are made once a row, not once an element) of at least `min_row_work`
    iterations in all (or the outer loop has fewer than ENOUGH_ROWS iterations), and the
    rows of the one loop may run on different threads
    (`parallel.parallel_loop`, which then reads plain offsets in r: a row's coordinates
    joined again, `_rejoined`). A GPU then gives each row a block, or a thread, where it gave
    the outer loop's few iterations one each (an attention's batch of heads of queries: 32
    of 8,192 rows). A CPU asks rows of some work: a convolution's gathered windows of one
    input feature, rows of (batch, height, width, window row, window column) around a loop
    over the one feature, became one loop with five quotients an element (1.8 ms for
    64x28x28 3x3 windows, 0.2 ms as rows of an image row)."""
    while len(kernel.body) == 1 and isinstance(kernel.body[0], K.Loop):
        outer = kernel.body[0]
        if len(outer.body) != 1 or not isinstance(outer.body[0], K.Loop):
            return
        inner = outer.body[0]
        if not any(isinstance(s, K.Loop) for s in inner.body) or product_nest(kernel):
            return  # (a product's nest is the renderer's tiles)
        if body_work(inner.body) < min_row_work and outer.stop - outer.start >= ENOUGH_ROWS:
            return
        if not _merged_in_parallel(kernel, outer, inner):
            return


# A nest of folds is made one loop, its folds then split, below `threads` / FEW_FOLDS of
# them, each of at least LONG_FOLD terms.
FEW_FOLDS = 4
LONG_FOLD = 1024


def coalesce_loops(kernel: K.Kernel, threads: int) -> None:
    """For a GPU, whose threads share a kernel's outer loop: each perfect nest `for i: for j:`
    whose offsets come out plain in one index (`r = i * J + j`: no quotient or remainder by
    it left) made one loop, wherever it stands (a bias gradient's rows of (batch, height,
    width) one loop over rows, which `parallel.columns_outer` then reads as a reduction over
    a leading axis). Then, where the kernel is a perfect nest around straight-line work, the
    nest is made one loop whose iterations run on different threads, quotients or not: its
    loops ordered as the stores walk memory (`_store_order`) so that neighbouring threads
    store neighbouring elements (a gathered convolution's input gradient ran a thread per
    image; a bias added to a batch of images ran a thread per pixel, each walking its 16
    channels, so that a warp's loads touched 32 lines at once), kept only where the one
    loop's iterations may run on different threads (`parallel.parallel_loop`: which also
    shows the reordering sound, every iteration being independent of the others). A nest of
    folds is made one loop so only where it has so few iterations that each fold had better
    be split (a convolution's weight gradient summing the batch's windows), and never a
    product's (`parallel.split_products` splits those as products)."""
    kernel.body[:] = _coalesced(kernel.body, {})
    _merge_column_rows(kernel)
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return
    nest = perfect_nest(kernel.body[0])
    work = nest[-1].body
    if len(nest) < 2 or any(n.stop <= n.start for n in nest):
        return
    if any(isinstance(s, K.Loop) for s in work):
        # Rows of work are the GPU renderer's, unless so few that their folds had better be
        # split (`parallel.columns_outer`): a weight gradient's. (A product's are split as a
        # product, `parallel.split_products`, unless too few to fill its tiles.)
        results = math.prod(n.stop - n.start for n in nest)
        if product_nest(kernel) is not None and results >= MIN_TILED_RESULTS:
            return
        folds = [s.stop - s.start for s in work if isinstance(s, K.Loop)]
        if results * FEW_FOLDS > threads or max(folds) < LONG_FOLD:
            return
        ordered = nest
    else:
        ordered = _store_order(nest, work)
    flat = _one_loop(ordered, list(work))
    collapsed = K.Kernel(kernel.name, kernel.inputs, kernel.outputs, [flat], kernel.scratch)
    if parallel_loop(collapsed, scattered=True) is not None:
        kernel.body[:] = collapsed.body


def _merge_column_rows(kernel: K.Kernel) -> None:
    """A reduction over several leading axes, as the scheduler writes it

        for j: out[j] = init(j)
        for a: for b: for j: out[j] = f(out[j], a, b, j)

    whose rows did not come out plain in one index (a sum over axes 0 and 2 of a (A, J, B)
    array, read through a transpose), gets its rows made one loop all the same (quotients
    and remainders of r), so that `parallel.columns_outer` reads it as a reduction over a
    leading axis: else it ran on one thread. The order of the rows is kept."""
    if len(kernel.body) != 2 or not all(isinstance(s, K.Loop) for s in kernel.body):
        return
    init, rows = kernel.body
    nest = perfect_nest(rows)
    columns = nest[-1]
    if len(nest) < 3 or (init.start, init.stop) != (columns.start, columns.stop):
        return
    if len(columns.body) != 1 or not isinstance(columns.body[0], K.Store):
        return
    if any(loop.stop <= loop.start for loop in nest):
        return
    kernel.body[1] = _one_loop(nest[:-1], [columns])


def _one_loop(loops: list, body: list) -> K.Loop:
    """`for l1: ... for lk: body` (`loops` outermost first) as one loop over their
    iterations in order, each index a quotient and remainder of its (`_merged`, outward)."""
    flat = K.Loop(loops[-1].index, loops[-1].start, loops[-1].stop, body)
    for loop in reversed(loops[:-1]):
        flat = _merged(K.Loop(loop.index, loop.start, loop.stop, [flat]), flat, {})
    return flat


def _store_order(nest: list, work: list) -> list:
    """The nest's loops, outermost first, by how far each moves the first store (largest
    step outermost); as they stand where a loop does not move it linearly."""
    store = next((s for s in work if isinstance(s, K.Store)), None)
    if store is None:
        return nest
    ranges = {loop.index: (loop.start, loop.stop - 1) for loop in nest}
    steps = []
    for loop in nest:
        form = linear(
            store.offset, loop.index, {k: v for k, v in ranges.items() if k is not loop.index}
        )
        if form is None:
            return nest
        steps.append(form[0])
    return [loop for _, loop in sorted(zip(steps, nest), key=lambda pair: -pair[0])]


def _merged_in_parallel(kernel: K.Kernel, outer: K.Loop, inner: K.Loop) -> bool:
    """Makes the kernel's nest `outer` (around `inner` alone) one loop where that loop's
    iterations may run on different threads and its stores come out plain; whether it did."""
    if inner.stop <= inner.start or outer.stop <= outer.start:
        return False
    rows = _merged(outer, inner, {})
    collapsed = K.Kernel(kernel.name, kernel.inputs, kernel.outputs, [rows], kernel.scratch)
    if parallel_loop(collapsed) is None:  # (a CPU's test: every store linear in r)
        return False
    kernel.body[:] = collapsed.body
    return True


def _merged(outer: K.Loop, inner: K.Loop, ranges: dict) -> K.Loop:
    """`for i: for j: body` (`inner` the one statement of `outer`) as `for r: body` with
    i = r / J and j = r % J, its offsets simplified (`ranges`: those of the loops around)."""
    count = inner.stop - inner.start
    row = K.fresh_index("r")
    coordinates = {
        id(outer.index): K.binary("div", row, K.const(count, K.INDEX))
        + K.const(outer.start, K.INDEX),
        id(inner.index): K.binary("rem", row, K.const(count, K.INDEX))
        + K.const(inner.start, K.INDEX),
    }
    stop = (outer.stop - outer.start) * count
    body = _statements(body_replaced(inner.body, coordinates), {**ranges, row: (0, stop - 1)})
    return K.Loop(row, 0, stop, body)


def _coalesced(body: list, ranges: dict) -> list:
    """The statements with each perfect nest whose offsets come out plain made one loop."""
    rewritten = []
    for statement in body:
        while (
            isinstance(statement, K.Loop)
            and len(statement.body) == 1
            and isinstance(statement.body[0], K.Loop)
            and statement.stop > statement.start
            and statement.body[0].stop > statement.body[0].start
        ):
            merged = _merged(statement, statement.body[0], ranges)
            if _splits(merged.body, merged.index):
                break
            statement = merged
        if isinstance(statement, K.Loop):
            inner = {**ranges, statement.index: (statement.start, statement.stop - 1)}
            statement.body[:] = _coalesced(statement.body, inner)
        rewritten.append(statement)
    return rewritten


def merge_fold_nests(kernel: K.Kernel) -> None:
    """For a CPU: each perfect nest of a fold (`for i: for j: acc = f(acc, x[...])`) whose
    offsets come out plain in one index made one loop, which the renderer splits into
    running sums along memory at full vector width (a mean over 56x56 images folded each
    image row of 56 apart, 0.83 ms for 2048 images, 0.62 ms as rows of 3136)."""
    kernel.body[:] = _fold_nests_merged(kernel.body, {})


def _fold_nests_merged(body: list, ranges: dict) -> list:
    rewritten = []
    for statement in body:
        if isinstance(statement, K.Loop) and _is_fold_nest(statement):
            statement = _coalesced([statement], ranges)[0]
        elif isinstance(statement, K.Loop):
            inner = {**ranges, statement.index: (statement.start, statement.stop - 1)}
            statement = K.Loop(
                statement.index,
                statement.start,
                statement.stop,
                _fold_nests_merged(statement.body, inner),
            )
        rewritten.append(statement)
    return rewritten


def _is_fold_nest(loop: K.Loop) -> bool:
    """Whether `loop` is a perfect nest of at least two loops around accumulator updates."""
    depth = 0
    while len(loop.body) == 1 and isinstance(loop.body[0], K.Loop):
        loop, depth = loop.body[0], depth + 1
    return depth >= 1 and bool(loop.body) and all(isinstance(s, K.SetAcc) for s in loop.body)


def _splits(body: list, index: K.Index) -> bool:
    """Whether a quotient or remainder of `index` is left in the statements."""
    for statement in statements_in(body):
        for node in expressions(statement):
            if isinstance(node, K.Binary) and node.op in ("div", "rem"):
                if any(n is index for n in K.nodes(node.a)):
                    return True
    return False


def _statements(body: list, ranges: dict) -> list:
    rewritten = []
    for statement in body:
        if isinstance(statement, K.Loop):  # (loops keep their identity: others key on them)
            inner = {**ranges, statement.index: (statement.start, statement.stop - 1)}
            statement.body[:] = _statements(statement.body, inner)
            rewritten.append(statement)
        elif isinstance(statement, K.Store):
            offset = simplified(statement.offset, ranges)
            value = _with_loads_simplified(statement.value, ranges)
            if offset is statement.offset and value is statement.value:
                rewritten.append(statement)
            else:
                rewritten.append(dataclasses.replace(statement, offset=offset, value=value))
        else:
            value = _with_loads_simplified(statement.value, ranges)
            same = value is statement.value
            rewritten.append(statement if same else K.SetAcc(statement.acc, value))
    return rewritten


def _with_loads_simplified(value: K.Expr, ranges: dict) -> K.Expr:
    replacements = {}
    for node in K.nodes(value):
        if isinstance(node, K.Load):
            offset = simplified(node.offset, ranges)
            if offset is not node.offset:
                replacements[id(node)] = K.Load(node.buffer, offset)
    return replaced_in(value, replacements) if replacements else value


def simplified(e: K.Expr, ranges: dict, memo: dict | None = None) -> K.Expr:
    """`e` with its quotients and remainders by constants simplified where `ranges` (each
    loop index's first and last value) shows how; `e` itself where nothing changes."""
    memo = {} if memo is None else memo
    if id(e) in memo:
        return memo[id(e)]
    result = e
    if isinstance(e, K.Binary) and e.dtype == K.INDEX and e.op in _ARITHMETIC:
        a, b = simplified(e.a, ranges, memo), simplified(e.b, ranges, memo)
        if e.op in ("div", "rem") and isinstance(b, K.Const) and int(b.value) > 0:
            result = _divided(e.op, a, int(b.value), ranges)
        elif a is not e.a or b is not e.b:
            result = K.binary(e.op, a, b)
        if e.op in ("add", "sub"):  # (a row's coordinates joined again)
            terms, constant = linear_terms(result)
            joined = _rejoined(dict(terms), constant)
            if joined[0].keys() != terms.keys():
                result = _sum(*joined)
    elif isinstance(e, K.Select) and e.dtype == K.INDEX:
        picked = simplified(e.on_true, ranges, memo), simplified(e.on_false, ranges, memo)
        if picked[0] is not e.on_true or picked[1] is not e.on_false:
            result = K.select(e.pred, *picked)
    memo[id(e)] = result
    return result


_ARITHMETIC = ("add", "sub", "mul", "div", "rem")


def _divided(op: str, a: K.Expr, c: int, ranges: dict) -> K.Expr:
    """`op(a, c)` (div or rem by a positive constant), split as the module says."""
    standing = K.binary(op, a, K.const(c, K.INDEX))
    terms, constant = _terms(a)
    whole, rest = {}, {}
    for key, (atom, coefficient) in terms.items():
        (whole if coefficient % c == 0 else rest)[key] = (atom, coefficient)
    carried, left = divmod(constant, c)
    quotient = {key: (atom, coefficient // c) for key, (atom, coefficient) in whole.items()}
    q_range, r_range = _range(quotient, carried, ranges), _range(rest, left, ranges)
    if q_range is None or r_range is None or q_range[0] < 0 or r_range[0] < 0:
        return standing
    remainder = _sum(rest, left)
    below = r_range[1] < c
    if op == "rem":
        return remainder if below else K.binary("rem", remainder, K.const(c, K.INDEX))
    quotient_sum = _sum(quotient, carried)
    if below:
        return quotient_sum
    return K.binary("add", quotient_sum, K.binary("div", remainder, K.const(c, K.INDEX)))


def _terms(e: K.Expr):
    """`e` as ({id(atom): (atom, coefficient)}, constant); what is not a sum, a difference or
    a product by a constant is an atom. `c * div(x, c) + rem(x, c)` is `x` (terms `k * c` and
    `k` of one x), so that a row split into its coordinates is the row again."""
    terms, constant = linear_terms(e)
    return _rejoined(terms, constant)


def _rejoined(terms: dict, constant: int) -> tuple[dict, int]:
    """The terms with each pair `k * c * div(x, c)` and `k * rem(x, c)` replaced by `k * x`
    (x's own terms)."""
    while True:
        splits = {key: (_split_of(atom), coefficient) for key, (atom, coefficient) in terms.items()}
        pair = next(
            (
                (key, other)
                for key, (split, coefficient) in splits.items()
                if split is not None and split[0] == "rem"
                for other, (twin, factor) in splits.items()
                if twin is not None
                and twin[0] == "div"
                and twin[2] == split[2]
                and factor == coefficient * split[2]
                and K.same(twin[1], split[1])
            ),
            None,
        )
        if pair is None:
            return terms, constant
        key, other = pair
        (_, x, _), coefficient = splits[key]
        del terms[key], terms[other]
        inside, offset = linear_terms(x)
        for k, (part, f) in inside.items():
            terms[k] = (part, terms.get(k, (part, 0))[1] + coefficient * f)
        terms = {k: v for k, v in terms.items() if v[1]}
        constant += coefficient * offset


def _split_of(atom: K.Expr):
    """("div" or "rem", x, c) for a quotient or remainder of x by a positive constant c."""
    if isinstance(atom, K.Binary) and atom.op in ("div", "rem") and isinstance(atom.b, K.Const):
        c = int(atom.b.value)
        if c > 0:
            return atom.op, atom.a, c
    return None


def _sum(terms: dict, constant: int) -> K.Expr:
    total: K.Expr = K.const(constant, K.INDEX)
    for atom, coefficient in terms.values():
        total = K.binary("add", total, K.binary("mul", atom, K.const(coefficient, K.INDEX)))
    return total


def _range(terms: dict, constant: int, ranges: dict):
    """(least, greatest) of a sum of terms, or None where an atom's range is not known."""
    low = high = constant
    for atom, coefficient in terms.values():
        bounds = _atom_range(atom, ranges)
        if bounds is None:
            return None
        ends = (coefficient * bounds[0], coefficient * bounds[1])
        low, high = low + min(ends), high + max(ends)
    return low, high


def _atom_range(atom: K.Expr, ranges: dict):
    if isinstance(atom, K.Index):
        return ranges.get(atom)
    if isinstance(atom, K.Select) and atom.dtype == K.INDEX:
        picked = [expression_range(x, ranges) for x in (atom.on_true, atom.on_false)]
        if None in picked:
            return None
        return min(p[0] for p in picked), max(p[1] for p in picked)
    if isinstance(atom, K.Binary) and atom.op in ("div", "rem") and isinstance(atom.b, K.Const):
        c, inner = int(atom.b.value), expression_range(atom.a, ranges)
        if inner is None or inner[0] < 0 or c <= 0:
            return None
        return (0, min(inner[1], c - 1)) if atom.op == "rem" else (inner[0] // c, inner[1] // c)
    return None


def expression_range(e: K.Expr, ranges: dict):
    """(least, greatest) of an index expression over `ranges` (each loop index's first and
    last value), or None where that is not known."""
    terms, constant = _terms(e)
    return _range(terms, constant, ranges)
