"""Which kernels may split their outermost loop across threads.

A kernel is parallel over its outer loop when its iterations are independent:

- the body is that one loop (nothing runs before or after it, so no value crosses iterations
  outside it);
- every accumulator is set afresh in each iteration before it is read;
- every store writes a range of its buffer that no other iteration writes: its offset is
  `c * i + rest` in the outer index `i`, with `c > 0` and `rest` spanning less than `c`, the
  same `c` for every store to the buffer and the stores' `rest` spanning less than `c` together
  (row-major offsets with the outer index leading, and flat element loops, are of this form);
- an iteration reads of a buffer the kernel writes only its own range, `c * i + rest` within
  the stores' span (a row reading back what it wrote to its own row); a kernel reading what
  other iterations write, such as a sort, orders its iterations;
- the kernel's scratch, which each thread gets a copy of, is written by every iteration before
  it is read (a row's intermediates), and it is small.

Renderers split such a loop into contiguous chunks, one per thread (a CPU thread pool; a
GPU's grid). `work` estimates the iterations of the innermost statements, to decide whether a
kernel is large enough to pay for threads.

A whole-array reduction (one accumulator folded over the whole nest) has no such loop:
`split_reductions` rewrites a large one into partial folds, which do have one, and a fold of
the partials (`whole_array_reduction` recognizes the pattern; the CUDA renderer also runs it
on one cooperating block).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.fusion import split_offset
from funcgrad.compiler.kernel_ir import linear_terms
from funcgrad.compiler.schedule import KernelStep, Program, inner_programs


def parallel_loop(kernel: K.Kernel, scattered: bool = False) -> K.Loop | None:
    """The kernel's outer loop if its iterations may run on different threads, else None.
    With `scattered` (a GPU's threads, which take iterations one each), a store at an offset
    not linear in the loop's index is taken where the offset differs at every iteration, one
    whose iterations interleave in memory where they never meet (`_apart`), and one walking
    down memory (`c * i + rest` with c < 0, rest spanning less than -c: a reverse scan's). (A
    CPU's threads, which take runs of iterations, keep to linear stores: threading such loops
    there gained nothing on a transformer's training step.)"""
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return None
    loop = kernel.body[0]
    if loop.stop - loop.start < 2:
        return None
    if kernel.independent_outer:
        return loop
    statements = list(statements_in(loop.body))
    scratch = set(kernel.scratch)
    if sum(b.size * b.dtype.itemsize for b in scratch) > SCRATCH_BYTES:
        return None
    if not _accumulators_are_private(loop.body) or not _written_first(statements, scratch):
        return None
    ranges = ranges_of(loop.body, {})
    slots: dict[K.Buffer, tuple[int, int, int]] = {}
    spread: dict[K.Buffer, K.Expr] = {}  # {buffer: the one offset an iteration writes there}
    owned = _owned(statements)
    for statement in statements:
        if isinstance(statement, K.Store) and statement.buffer not in scratch | owned.keys():
            form = linear(statement.offset, loop.index, ranges)
            if form is None:
                if not scattered:
                    return None
                known = spread.setdefault(statement.buffer, statement.offset)
                if not (K.same(known, statement.offset) and _one_to_one(known, loop)):
                    return None
                continue
            if statement.buffer in spread:
                return None
            coefficient, low, high = form
            if statement.buffer in slots:
                known, known_low, known_high = slots[statement.buffer]
                if known != coefficient:
                    return None
                low, high = min(low, known_low), max(high, known_high)
            descending = scattered and coefficient < 0 and high - low < -coefficient
            if (coefficient <= 0 or high - low >= coefficient) and not descending:
                if not scattered or statement.buffer in slots or not _apart(statement, loop):
                    return None
                known = spread.setdefault(statement.buffer, statement.offset)
                if not K.same(known, statement.offset):
                    return None
                continue
            slots[statement.buffer] = coefficient, low, high
    for statement in statements:
        for e in expressions(statement):
            if _reads_elsewhere(e, owned):
                return None
            if isinstance(e, K.Load) and e.buffer in slots:
                if not _within(slots[e.buffer], linear(e.offset, loop.index, ranges)):
                    return None
            if isinstance(e, K.Load) and e.buffer in spread:
                if not K.same(e.offset, spread[e.buffer]):
                    return None
    return loop


def _owned(statements: list) -> dict:
    """{buffer: offset} for each buffer that stores proven each iteration's own (`Store.own`)
    write, all at one offset (an iteration may read back only that element)."""
    stores = [s for s in statements if isinstance(s, K.Store)]
    owned = {s.buffer: s.offset for s in stores if s.own}
    for s in stores:
        if s.buffer in owned and not (s.own and K.same(s.offset, owned[s.buffer])):
            del owned[s.buffer]
    return owned


def _reads_elsewhere(e: K.Expr, owned: dict) -> bool:
    """Whether `e` loads an element of an owned buffer other than its iteration's own."""
    return isinstance(e, K.Load) and e.buffer in owned and not K.same(e.offset, owned[e.buffer])


def _apart(store: K.Store, loop: K.Loop) -> bool:
    """Whether the store's offset is `c * i + <multiples of g>` in the loop's index i, with
    0 < c * (count - 1) < g: iterations then store apart whatever the other terms hold (a
    cumulative sum down columns, column i writing rows g apart)."""
    terms, _ = linear_terms(store.offset)
    step, apart = 0, 0
    for atom, coefficient in terms.values():
        if atom is loop.index:
            step = coefficient
        elif any(node is loop.index for node in K.nodes(atom)):
            return False
        else:
            apart = math.gcd(apart, abs(coefficient))
    return step > 0 and step * (loop.stop - loop.start - 1) < apart


# Offsets of a store not linear in the loop's index are checked element by element up to
# this many iterations.
ONE_TO_ONE_CHECKED = 1 << 20


def _one_to_one(offset: K.Expr, loop: K.Loop) -> bool:
    """Whether `offset`, reading no index but the loop's, differs at every iteration: a
    store through quotients and remainders of the loop's index (a weight gradient written in
    its layout, its positions in another order) stays each iteration's own."""
    count = loop.stop - loop.start
    if count > ONE_TO_ONE_CHECKED:
        return False
    offsets = value_at(offset, {loop.index: np.arange(loop.start, loop.stop, dtype=np.int64)})
    return offsets is not None and len(np.unique(offsets)) == count


def value_at(e: K.Expr, at: dict):
    """The value of index arithmetic (offsets, their selects and bounds), as C computes it,
    where the indices take the values `at` gives: ints, or arrays of them (every point at
    once); None where it reads anything else (another index, a load, a float)."""
    value = _value_at(e, at, {})
    return (
        value.item() if isinstance(value, (np.ndarray, np.generic)) and value.ndim == 0 else value
    )


def _value_at(e: K.Expr, at: dict, memo: dict):
    if id(e) in memo:
        return memo[id(e)]
    if isinstance(e, K.Const):
        value = int(e.value) if e.dtype.kind in "iub" else None
    elif isinstance(e, K.Index):
        value = at.get(e)
    elif isinstance(e, K.Cast) and e.dtype.kind in "iub":
        value = _value_at(e.x, at, memo)
    elif isinstance(e, K.Select):
        parts = [_value_at(x, at, memo) for x in (e.pred, e.on_true, e.on_false)]
        value = None if any(p is None for p in parts) else np.where(*parts)
    elif isinstance(e, K.Binary) and e.op in _INDEX_OPS:
        a, b = (_value_at(x, at, memo) for x in (e.a, e.b))
        value = None if a is None or b is None else _INDEX_OPS[e.op](a, b)
    else:
        value = None
    memo[id(e)] = value
    return value


def _quotient(a, b):
    """C's integer quotient (toward zero); 0 where b is 0 (never reached by a valid offset)."""
    divisor = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.sign(a) * np.sign(divisor) * (np.abs(a) // np.abs(divisor)))


_INDEX_OPS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _quotient,
    "rem": lambda a, b: np.where(b == 0, 0, a - b * _quotient(a, b)),
    "max": np.maximum,
    "min": np.minimum,
    "and": np.logical_and,
    "or": np.logical_or,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def linear_in_loop(expr: K.Expr, loop: K.Loop, ranges: dict):
    """`linear` in the index of `loop`, for an expression inside it: the indices of enclosing
    loops, fixed while the loop runs, are held at one point (added to `ranges`, which holds
    the loops nested in it)."""
    for e in K.nodes(expr):
        if isinstance(e, K.Index) and e is not loop.index:
            ranges.setdefault(e, (0, 0))
    return linear(expr, loop.index, ranges)


def _within(slot: tuple[int, int, int], form) -> bool:
    """Whether a load's offset `form` stays inside the slot `c * i + [low, high]`."""
    return form is not None and form[0] == slot[0] and slot[1] <= form[1] and form[2] <= slot[2]


# Scratch each thread copies onto its stack: bounded well below a thread's stack size.
SCRATCH_BYTES = 1 << 18


def _written_first(statements: list, scratch: set) -> bool:
    """Each scratch buffer is first touched, in an iteration, by a store not reading it."""
    seen = set()
    for statement in statements:
        loads = {e.buffer for e in expressions(statement) if isinstance(e, K.Load)}
        if (loads & scratch) - seen:
            return False
        if isinstance(statement, K.Store) and statement.buffer in scratch:
            seen.add(statement.buffer)
    return True


def work(kernel: K.Kernel) -> int:
    """Iterations of the innermost statements, summed over the kernel's loop nests."""
    return body_work(kernel.body)


def body_work(body: list) -> int:
    """Iterations of the innermost statements of `body`, summed over its statements."""
    total = 0
    for statement in body:
        if isinstance(statement, K.Loop):
            total += max(statement.stop - statement.start, 0) * max(body_work(statement.body), 1)
        else:
            total += 1
    return total


def ranges_of(body: list, found: dict) -> dict:
    """{loop index: (first, last)} of the loops nested in `body`."""
    for statement in body:
        if isinstance(statement, K.Loop):
            found[statement.index] = (statement.start, statement.stop - 1)
            ranges_of(statement.body, found)
    return found


def statements_in(body: list):
    for statement in body:
        if isinstance(statement, K.Loop):
            yield from statements_in(statement.body)
        else:
            yield statement


def expressions(statement):
    """Every node of a statement's expressions (its value, and a store's offset)."""
    roots = [statement.value] + ([statement.offset] if isinstance(statement, K.Store) else [])
    for root in roots:
        yield from K.nodes(root)


def walks_by_one(loop: K.Loop, scratch: set) -> bool:
    """Whether the loop walks memory element by element: every access of a buffer (scratch
    aside) that moves with its index moves by one. Neighbouring threads of a block then touch
    neighbouring elements; a loop striding across rows (a column's fold) is better left to
    one thread per outer iteration, neighbours reading neighbouring columns (unless those
    are few: `render.FEW_STRIDED_ROWS`)."""
    ranges = ranges_of(loop.body, {})
    for statement in statements_in([loop]):
        accesses = [e for e in expressions(statement) if isinstance(e, K.Load)]
        accesses += [statement] if isinstance(statement, K.Store) else []
        for access in accesses:
            if access.buffer in scratch:
                continue
            form = linear_in_loop(access.offset, loop, ranges)
            if form is None or form[0] not in (0, 1):
                return False
    return True


def _accumulators_are_private(body: list) -> bool:
    """Each accumulator's first appearance in an iteration, in program order, is a SetAcc
    that does not read it and that every iteration makes: in the loop body, or in loops
    inside it that always run (a row's fold in a nest of rows), so no value flows between
    iterations."""
    seen: set = set()

    def made(statements: list, always: bool) -> bool:
        for statement in statements:
            if isinstance(statement, K.Loop):
                if not made(statement.body, always and statement.stop > statement.start):
                    return False
                continue
            reads = {e.acc for e in expressions(statement) if isinstance(e, K.AccRead)}
            if reads - seen:
                return False
            if isinstance(statement, K.SetAcc) and statement.acc not in seen:
                if not always:
                    return False
                seen.add(statement.acc)
        return True

    return made(body, True)


def linear(expr: K.Expr, index: K.Index, ranges: dict, memo: dict | None = None):
    """`expr` as (c, low, high): c * index + r with r in [low, high] for every value of the
    other loop indices; None when it is not of that form (or not provably)."""
    memo = {} if memo is None else memo
    if id(expr) not in memo:
        memo[id(expr)] = _linear_form(expr, index, ranges, memo)
    return memo[id(expr)]


def _linear_form(expr: K.Expr, index: K.Index, ranges: dict, memo: dict):
    if expr is index:
        return 1, 0, 0
    if isinstance(expr, K.Index):
        if expr not in ranges:
            return None
        first, last = ranges[expr]
        return 0, first, last
    if isinstance(expr, K.Const):
        value = int(expr.value)
        return 0, value, value
    if isinstance(expr, K.Cast) and expr.x.dtype.kind in "iu":
        return linear(expr.x, index, ranges, memo)
    if not isinstance(expr, K.Binary):
        return None
    a, b = linear(expr.a, index, ranges, memo), linear(expr.b, index, ranges, memo)
    if a is None or b is None:
        return None
    if expr.op == "add":
        return a[0] + b[0], a[1] + b[1], a[2] + b[2]
    if expr.op == "sub":
        return a[0] - b[0], a[1] - b[2], a[2] - b[1]
    if expr.op == "mul":
        for (c, low, high), (c2, k, k2) in ((a, b), (b, a)):
            if c2 == 0 and k == k2:  # times a constant
                bounds = (low * k, high * k)
                return c * k, min(bounds), max(bounds)
        if a[0] == 0 and b[0] == 0:
            products = [x * y for x in a[1:] for y in b[1:]]
            return 0, min(products), max(products)
        return None
    if a[0] == 0 and b[0] == 0 and b[1] == b[2] and b[1] > 0 and a[1] >= 0:
        if expr.op == "div":
            return 0, a[1] // b[1], a[2] // b[1]
        if expr.op == "rem":
            return 0, 0, min(a[2], b[1] - 1)
    return None


# -- loops shared by a block's threads ------------------------------------------------------------


def shared_loop_folds(loop: K.Loop) -> list[tuple[K.Acc, str]] | None:
    """The (accumulator, op) pairs `loop` folds, when its iterations may run on different
    threads that each fold a part and then combine their partial results; else None.

    That holds when every accumulator set in the loop is folded there, once, by an op of
    `FOLDS` (`acc = op(acc, term)`), and no other value in the loop reads a folded accumulator;
    when every store writes elements no other iteration writes (an offset `c * i + rest`, as
    `parallel_loop` asks of an outer loop); and when every load of a buffer the loop stores
    reads the element its own iteration stores. A GPU renderer spreads such loops, one after
    another, over the threads of the block that owns an outer iteration (a row)."""
    statements = list(statements_in(loop.body))
    folds: dict[K.Acc, tuple[str, K.Expr]] = {}
    for statement in statements:
        if isinstance(statement, K.SetAcc):
            found = _fold_of(statement)
            if found is None or statement.acc in folds:
                return None
            folds[statement.acc] = found
    values = [term for _, term in folds.values()]
    values += [s.value for s in statements if isinstance(s, K.Store)]
    if any(_reads(v, lambda e: isinstance(e, K.AccRead) and e.acc in folds) for v in values):
        return None
    ranges = ranges_of(loop.body, {})
    offsets: dict[K.Buffer, K.Expr] = {}
    owned = _owned(statements)
    for statement in statements:
        if isinstance(statement, K.Store) and statement.buffer not in owned:
            form = linear_in_loop(statement.offset, loop, ranges)
            if form is None or form[0] <= 0 or form[2] - form[1] >= form[0]:
                return None
            first = offsets.setdefault(statement.buffer, statement.offset)
            if not K.same(first, statement.offset):
                return None
    for statement in statements:
        for e in expressions(statement):
            if _reads_elsewhere(e, owned):
                return None
            if isinstance(e, K.Load) and e.buffer in offsets:
                if not K.same(e.offset, offsets[e.buffer]):
                    return None
    return [(acc, op) for acc, (op, _) in folds.items()]


def _fold_of(statement: K.SetAcc) -> tuple[str, K.Expr] | None:
    """(op, term) when the statement is `acc = op(acc, term)` with op in FOLDS."""
    fold, acc = statement.value, statement.acc
    if not (isinstance(fold, K.Binary) and fold.op in FOLDS):
        return None
    if isinstance(fold.a, K.AccRead) and fold.a.acc is acc:
        return fold.op, fold.b
    if isinstance(fold.b, K.AccRead) and fold.b.acc is acc:
        return fold.op, fold.a
    return None


# -- reductions over a leading axis, columns outermost -------------------------------------------


def columns_outer(program: Program, split: ReductionSplit) -> None:
    """Rewrites, in `program` and the programs its steps hold, each kernel of the form

        for j: out[j] = init(j)
        for i: for j: out[j] = f(out[j], i, j)

    (a reduction over a leading axis as the scheduler writes it, streaming rows as a CPU's
    caches want) as

        for j: acc = init(j); for i: acc = f(acc, i, j); out[j] = acc

    whose outer loop a GPU's threads share, one column each, neighbouring threads reading
    neighbouring elements. One of at least `split.min_work` iterations with fewer columns
    than `split.column_threads` then folds parts of its rows at once (`_split_columns`), as
    does a kernel the scheduler wrote in that form with a fold striding across memory
    (`_strided_fold`)."""

    def rewritten(step: KernelStep) -> list[K.Kernel] | None:
        kernel = step.kernel
        outer = _columns_outer(kernel)
        if outer is not None:
            kernel.body[:] = outer
        if (outer is not None or _strided_fold(kernel)) and work(kernel) >= split.min_work:
            return _split_columns(kernel, split.column_threads)
        return None

    _kernels_replaced(program, rewritten)


def _strided_fold(kernel: K.Kernel) -> bool:
    """Whether the kernel is already in `columns_outer`'s form, a fold per outer iteration,
    with a fold that strides across memory (a convolution's weight gradient: a thread per
    weight, each walking the batch's windows), which no block of threads shares."""
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return False
    body = kernel.body[0].body
    if len(body) < 2 or not isinstance(body[0], K.SetAcc) or not isinstance(body[1], K.Loop):
        return False
    return not walks_by_one(body[1], set(kernel.scratch))


def _columns_outer(kernel: K.Kernel) -> list | None:
    if len(kernel.body) != 2 or not all(isinstance(s, K.Loop) for s in kernel.body):
        return None
    init, rows = kernel.body
    if len(rows.body) != 1 or not isinstance(rows.body[0], K.Loop):
        return None
    columns = rows.body[0]
    if (init.start, init.stop) != (columns.start, columns.stop):
        return None
    if len(init.body) != 1 or not columns.body:
        return None
    # (before the fold, the stores of the map whose values it folds: `schedule`'s
    # `column_folds_with_maps`)
    first, (*stores, update) = init.body[0], columns.body
    if not (isinstance(first, K.Store) and isinstance(update, K.Store)):
        return None
    out, offset = update.buffer, update.offset
    if first.buffer is not out or not _pointwise(stores, kernel, rows, columns):
        return None
    if not K.same(substituted(first.offset, init.index, columns.index), offset):
        return None
    form = linear(offset, columns.index, {})
    if form is None or form[0] <= 0 or form[1] != form[2]:
        return None  # (an offset reading the row index, or not one element per column)
    if _reads(first.value, lambda e: isinstance(e, K.Load) and e.buffer is out):
        return None
    acc = K.fresh_acc(out.dtype)
    replacements = {}
    for e in K.nodes(update.value):
        if isinstance(e, K.Load) and e.buffer is out:
            if not K.same(e.offset, offset):
                return None
            replacements[id(e)] = acc.read()
    fold = K.SetAcc(acc, replaced_in(update.value, replacements))
    return [
        K.Loop(
            columns.index,
            columns.start,
            columns.stop,
            [
                K.SetAcc(acc, substituted(first.value, init.index, columns.index)),
                K.Loop(rows.index, rows.start, rows.stop, [*stores, fold]),
                K.Store(out, offset, acc.read()),
            ],
        )
    ]


def _pointwise(stores: list, kernel: K.Kernel, rows: K.Loop, columns: K.Loop) -> bool:
    """Whether `stores` (in a column fold's loop nest, before the fold's update) each write
    element `row * columns + column` of a buffer of its own that the kernel reads only there
    (the fold reading back what it folds): the map whose values the fold adds, one element
    per iteration."""
    count = columns.stop - columns.start
    if len({s.buffer for s in stores}) != len(stores) or (rows.start, columns.start) != (0, 0):
        return False
    for s in stores:
        if not isinstance(s, K.Store) or s.buffer.size != rows.stop * count:
            return False
        terms, constant = linear_terms(s.offset)
        if constant or sorted(terms.values(), key=lambda t: t[1]) != [
            (columns.index, 1),
            (rows.index, count),
        ]:
            return False
    owned = {s.buffer: s.offset for s in stores}
    loads = (e for s in statements_in(kernel.body) for e in expressions(s))
    return not any(_reads_elsewhere(e, owned) for e in loads)


# -- whole-array reductions ---------------------------------------------------------------------

# Operations a reduction may fold in any order (float sums and products are reassociated, as
# the renderers' vectorized reductions are).
FOLDS = ("add", "mul", "max", "min", "and", "or")


def whole_array_reduction(kernel: K.Kernel):
    """(acc, op, folds, rest) when the kernel is `acc = init; <fold nests>; <statements
    after>`, each fold nest `for ...: for ...: acc = op(acc, term)` with one op for all, a
    whole-array reduction whose terms read no buffer the kernel writes; else None. `folds`
    holds each nest's (term, loops), `rest` is [the init statement, *the statements after]."""
    body = kernel.body
    if len(body) < 2 or not isinstance(body[0], K.SetAcc):
        return None
    init, acc = body[0], body[0].acc
    ops, folds = set(), []
    count = 1
    while count < len(body) and isinstance(body[count], K.Loop):
        found = _fold(body[count], acc)
        if found is None:
            return None
        ops.add(found[0])
        folds.append(found[1:])
        count += 1
    after = body[count:]
    if not folds or len(ops) != 1 or any(isinstance(stmt, K.Loop) for stmt in after):
        return None
    if _reads(init.value, lambda e: True):
        return None
    written = {stmt.buffer for stmt in after if isinstance(stmt, K.Store)}
    for term, _ in folds:
        if _reads(
            term,
            lambda e: isinstance(e, K.AccRead) or (isinstance(e, K.Load) and e.buffer in written),
        ):
            return None
    return acc, ops.pop(), folds, [init, *after]


def perfect_nest(loop: K.Loop) -> list[K.Loop]:
    """`loop` and the loops nested in it, each the one statement of the one around it,
    outermost first."""
    loops = [loop]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], K.Loop):
        loops.append(loops[-1].body[0])
    return loops


def _fold(nest: K.Loop, acc: K.Acc):
    """(op, term, loops) when `nest` is perfectly nested loops around `acc = op(acc, term)`."""
    loops = perfect_nest(nest)
    if any(loop.stop <= loop.start for loop in loops):
        return None  # nothing to fold: the kernel runs as written
    inner = loops[-1].body
    if len(inner) != 1 or not isinstance(inner[0], K.SetAcc) or inner[0].acc is not acc:
        return None
    found = _fold_of(inner[0])
    return None if found is None else (*found, loops)


def _reads(expr: K.Expr, found) -> bool:
    """Whether a node of `expr` satisfying `found` is an accumulator read or a load."""
    return any(isinstance(e, (K.AccRead, K.Load)) and found(e) for e in K.nodes(expr))


def identity(op: str, dtype: np.dtype):
    """The value x with op(x, y) = y for every y of `dtype`."""
    if dtype == K.BOOL:
        return op in ("mul", "min", "and")
    if op in ("add", "or"):
        return 0
    if op == "mul":
        return 1
    if op == "and":
        return -1
    if dtype.kind == "f":
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if op == "max" else info.max


@dataclasses.dataclass(frozen=True)
class ReductionSplit:
    """How a backend splits whole-array reductions of at least `min_work` iterations: into
    `parts` partial folds, each over a contiguous share of the outer loop (CPU threads: each
    reads its own cache lines and vectorizes) or, `strided`, over every `parts`-th iteration
    (GPU threads: neighbouring threads read neighbouring elements at once). A fixed part
    count keeps the bits of a float sum independent of the number of threads.

    `column_threads`, for a GPU, puts the columns of reductions over a leading axis outermost
    (`columns_outer`: a thread per column) and, where there are fewer columns than that, has
    parts of the rows folded at once, so that about `column_threads` threads share the work;
    0 leaves such reductions streaming rows, as a CPU wants."""

    min_work: int
    parts: int
    strided: bool = False
    column_threads: int = 0


def _kernels_replaced(program: Program, rewritten) -> None:
    """Replaces, in `program` and the programs its steps hold, each kernel step for which
    `rewritten(step)` gives kernels (a split's) with steps of those kernels, in order."""
    steps = []
    for step in program.steps:
        for inner in inner_programs(step):
            _kernels_replaced(inner, rewritten)
        kernels = rewritten(step) if isinstance(step, KernelStep) else None
        if kernels is None:
            steps.append(step)
        else:
            steps += [KernelStep(k, step.eqns) for k in kernels]
    program.steps[:] = steps


def split_reductions(program: Program, split: ReductionSplit) -> None:
    """Replaces, in `program` and the programs its steps hold, each whole-array reduction of
    at least `split.min_work` iterations with two kernels: independent partial folds over
    parts of its outer loop, which may run on threads, then one fold of the partials (and of
    the iterations left over) with the init value and the statements after."""

    def rewritten(step: KernelStep) -> list[K.Kernel] | None:
        return _split(step.kernel, split) if work(step.kernel) >= split.min_work else None

    _kernels_replaced(program, rewritten)


def _split(kernel: K.Kernel, split: ReductionSplit) -> list[K.Kernel] | None:
    found = whole_array_reduction(kernel)
    if found is None or len(found[2]) != 1:
        return None
    acc, op, [(term, loops)], (init, *after) = found
    outer = loops[0]
    parts = min(split.parts, outer.stop - outer.start)
    if parts < 2:
        return None
    share = (outer.stop - outer.start) // parts
    partials = K.Buffer(f"partial_{kernel.name}", acc.dtype, parts)
    part, step = K.fresh_index("c"), K.fresh_index("i")
    if split.strided:
        position = step * K.const(parts, K.INDEX) + part
    else:
        position = part * K.const(share, K.INDEX) + step
    position = position + K.const(outer.start, K.INDEX)
    partial = K.fresh_acc(acc.dtype)
    fold = _fold_nest(loops[1:], partial, op, term, outer, position)
    first = _partial_folds(kernel, partials, partial, op, part, step, share, fold, part)
    each = K.fresh_index("c")
    body = [
        init,
        K.Loop(each, 0, parts, [K.SetAcc(acc, K.binary(op, acc.read(), K.Load(partials, each)))]),
    ]
    left = outer.start + parts * share
    if left < outer.stop:
        rest = K.fresh_index("i")
        body.append(
            K.Loop(rest, left, outer.stop, _fold_nest(loops[1:], acc, op, term, outer, rest))
        )
    second = K.Kernel(
        kernel.name, [*kernel.inputs, partials], kernel.outputs, body + after, kernel.scratch
    )
    return [first, second]


# -- products of few results with long sums (GPU) -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProductNest:
    """A kernel in a GEMM's form (a convolution's implicit GEMM: `schedule._conv_contraction`),

        [for p:] for r: for c: acc = init; for k: acc = acc + a * b; <store of acc>

    `parts`, the optional outer loop, is a split product's (`split_products`)."""

    parts: K.Loop | None
    rows: K.Loop
    columns: K.Loop
    terms: K.Loop
    acc: K.Acc
    init: K.Const
    a: K.Expr
    b: K.Expr
    store: K.Store


def product_nest(kernel: K.Kernel) -> ProductNest | None:
    """The kernel's nest as a `ProductNest` where it has that form (what each operand reads is
    the renderer's to check), else None."""
    if kernel.scratch or len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return None
    loops = [kernel.body[0]]
    while len(loops) < 3 and len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], K.Loop):
        loops.append(loops[-1].body[0])
    if len(loops) < 2 or len(loops[-1].body) != 3:
        return None
    parts = loops[0] if len(loops) == 3 else None
    rows, columns = loops[-2:]
    init, terms, store = columns.body
    if not (
        isinstance(init, K.SetAcc)
        and isinstance(init.value, K.Const)
        and isinstance(terms, K.Loop)
        and len(terms.body) == 1
        and isinstance(terms.body[0], K.SetAcc)
        and isinstance(store, K.Store)
    ):
        return None
    acc, fold = init.acc, terms.body[0].value
    if not (
        terms.body[0].acc is acc
        and isinstance(fold, K.Binary)
        and fold.op == "add"
        and isinstance(fold.a, K.AccRead)
        and fold.a.acc is acc
        and isinstance(fold.b, K.Binary)
        and fold.b.op == "mul"
    ):
        return None
    if any(loop.start != 0 for loop in (*loops, terms)):
        return None
    return ProductNest(parts, rows, columns, terms, acc, init.value, fold.b.a, fold.b.b, store)


# A product is split where it has fewer results than this and each part can sum at least
# MIN_PRODUCT_SHARE terms; its parts then compute about PRODUCT_RESULTS partial results.
PRODUCT_RESULTS = 1 << 20
MIN_PRODUCT_SHARE = 256
# A product of fewer results wastes most of a GPU's tile (4,096 results): it is no product
# to split, its sums are folds (`index_algebra.coalesce_loops`, then `columns_outer`).
MIN_TILED_RESULTS = 1024


def split_products(program: Program) -> None:
    """Replaces, in `program` and the programs its steps hold, each product (`product_nest`)
    of few results and long sums, whose tiles would be few blocks each summing all its terms
    (a convolution's weight gradient: 4,608 weights, each a sum over 50,176 places of a
    batch), with two kernels: P parts of the sum as a product with an outer loop over parts,
    `partial[p, r, c] = sum over k of a(r, p * S + k) * b(p * S + k, c)`, which a GPU renders
    as P times the tiles, then per result the sum of its P partials and of the terms left
    over, with the product's store. P depends on the shapes alone."""
    _kernels_replaced(program, lambda step: _split_product(step.kernel))


# -- scatters (GPU) ---------------------------------------------------------------------------


# A scatter whose window positions give fewer threads than OWNER_THREADS_BELOW, each walking
# several updates, takes a thread per element of the operand instead (owner computes) while
# every thread walking every one of its position's updates stays within OWNER_WORK steps: an
# embedding's gradient of 2,048 tokens into 50 x 64 walks 2,048 updates on each of 3,200
# threads rather than on each of 64.
OWNER_THREADS_BELOW = 4096
OWNER_WORK = 1 << 26


def _scatter_split(kernel: K.Kernel, eqn) -> list[K.Kernel] | None:
    """A scatter kernel (`fusion._scatter`: the operand copied into
    the result, then every update combined into its place in order, all on one thread, for
    no offset shows two updates apart) as two kernels: the copy, on the grid, then the
    updates with their window loops and batch loops outermost and made one loop, a thread
    per position of the window in each batch element taking every update in order, where
    no window dimension is one the indices place (a row scatter: an embedding's gradient,
    one row a token; a batched scatter: the gradient of `take_along_axis`, each line's
    updates into that line). Each store's coordinates in the window and batching
    dimensions are then its thread's position (a dropped update rewrites the element at its
    position from its batch's origin), so threads never meet, and each element sees its
    updates in the original order: the sums' bits are the reference's. Where those threads
    are few and walk many updates each (an embedding's gradient, `bincount`), a thread per
    element of the operand walks its position's updates and combines those that land on its
    element (owner computes: `OWNER_THREADS_BELOW`, `OWNER_WORK`). Elsewhere the updates
    stay on one thread, after the copy."""
    if len(kernel.body) < 2 or kernel.scratch:
        return None
    operand, updates = eqn.invars[0].aval.shape, eqn.invars[2].aval.shape
    if not isinstance(kernel.body[-1], K.Loop):
        return None
    copy = K.Kernel(f"{kernel.name}_copy", kernel.inputs, kernel.outputs, kernel.body[:-1])
    if eqn.primitive.name.endswith("_pairs"):  # (complex updates: each part's store
        # reads both parts, so the updates stay on one thread, after the copy on the grid)
        return [copy, K.Kernel(kernel.name, kernel.inputs, kernel.outputs, kernel.body[-1:])]
    loops = perfect_nest(kernel.body[-1])
    store = loops[-1].body[0] if len(loops[-1].body) == 1 else None
    sizes = [(loop.start, loop.stop) for loop in loops]
    if not isinstance(store, K.Store) or sizes != [(0, n) for n in updates]:
        return None
    dn = eqn.params["dimension_numbers"]
    windows = [d for d in range(len(operand)) if d not in dn.inserted_window_dims]
    windows = [d for d in windows if d not in dn.operand_batching_dims]
    placed = {*dn.scatter_dims_to_operand_dims, *dn.operand_batching_dims}
    # The update's dimensions that walk the indices' batching dimensions (the update's
    # others walk the indices' dimensions, the index vector's last, in order).
    walking = [u for u in range(len(updates)) if u not in dn.update_window_dims]
    batching = [walking[k] for k in dn.scatter_indices_batching_dims]
    own = sorted({*dn.update_window_dims, *batching})
    positions = math.prod(updates[u] for u in own)
    serial = math.prod(updates) // max(positions, 1)  # (the updates a position walks)
    # The operand's dimensions neither a window nor a batch covers: an owner's row there.
    rows = [
        d for d in range(len(operand)) if d not in windows and d not in dn.operand_batching_dims
    ]
    owners = math.prod(operand[d] for d in rows)
    by_owner = (
        owners > 1
        and serial > 1
        and positions < OWNER_THREADS_BELOW
        and owners * positions * serial <= OWNER_WORK
    )
    if placed & set(windows) or (positions < 2 and not by_owner):
        return [copy, K.Kernel(kernel.name, kernel.inputs, kernel.outputs, [loops[0]])]
    thread = K.fresh_index("w")
    threads = positions * (owners if by_owner else 1)
    position = thread if threads == positions else K.binary("rem", thread, _index(positions))
    coordinates, inner = {}, 1
    for u in reversed(own):
        loop = loops[u]
        value = position if inner == 1 else K.binary("div", position, _index(inner))
        if inner * updates[u] < positions:
            value = K.binary("rem", value, _index(updates[u]))
        coordinates[id(loop.index)] = value
        inner *= updates[u]
    placed_store = statement_replaced(store, coordinates)
    if by_owner:
        at = dict(zip(windows, (coordinates[id(loops[u].index)] for u in dn.update_window_dims)))
        at.update(
            zip(dn.operand_batching_dims, (coordinates[id(loops[u].index)] for u in batching))
        )
        row = K.binary("div", thread, _index(positions))
        at.update(zip(rows, split_offset(row, tuple(operand[d] for d in rows))))
        mine = K.row_major_offset([at[d] for d in range(len(operand))], operand)
        placed_store = _stored_by_owner(placed_store, mine)
    body = [placed_store]
    for k in reversed(range(len(loops))):
        if k not in own:
            body = [K.Loop(loops[k].index, 0, updates[k], body)]
    updates_in_order = K.Kernel(
        kernel.name,
        kernel.inputs,
        kernel.outputs,
        [K.Loop(thread, 0, threads, body)],
        independent_outer=True,
    )
    return [copy, updates_in_order]


def _index(value: int) -> K.Expr:
    return K.const(value, K.INDEX)


def _stored_by_owner(store: K.Store, mine: K.Expr) -> K.Store:
    """`store` (an update combined into its place) as made by the thread owning the element
    at `mine`: there, what it was where the update lands elsewhere, and the update combined
    with it (rather than with the element at the update's place) where it lands there."""
    kept = K.Load(store.buffer, mine)
    old = {
        id(n): kept
        for n in K.nodes(store.value)
        if isinstance(n, K.Load) and n.buffer is store.buffer
    }
    lands = K.binary("eq", store.offset, mine)
    return K.Store(store.buffer, mine, K.select(lands, replaced_in(store.value, old), kept))


# -- whole-array argmax and argmin (GPU) ----------------------------------------------------

# A whole-array argmax or argmin of at least ARG_PARTS * ARG_PART_MIN elements is split.
ARG_PARTS = 1024
ARG_PART_MIN = 32


def _argreduction_split(kernel: K.Kernel, eqn) -> list[K.Kernel] | None:
    """An argmax or argmin over a whole array (`fusion._argreduce`: a best value and its
    index carried down the elements on one thread) of at least ARG_PARTS * ARG_PART_MIN
    elements as two kernels: each of ARG_PARTS contiguous parts finds its own first extreme
    (a thread each), then one thread carries the best over the parts' results in order and
    over the elements left over. Carried in order, the first extreme (or first NaN) of the
    whole array wins, as before."""
    body = kernel.body
    if len(body) != 4 or not isinstance(body[2], K.Loop) or len(body[2].body) != 2:
        return None
    loop, (at_update, best_update) = body[2], body[2].body
    if not all(isinstance(s, K.SetAcc) for s in (body[0], body[1], at_update, best_update)):
        return None
    take, value = best_update.value.pred, best_update.value.on_true
    first = take.a if isinstance(take, K.Binary) and take.op == "or" else None
    is_first = (
        isinstance(first, K.Binary)
        and first.op == "eq"
        and first.a is loop.index
        and isinstance(first.b, K.Const)
        and int(first.b.value) == 0
    )
    count = loop.stop - loop.start
    if not is_first or loop.start != 0 or count < ARG_PARTS * ARG_PART_MIN:
        return None
    share = count // ARG_PARTS
    best, at = best_update.acc, at_update.acc
    bests = K.Buffer(f"partial_{kernel.name}_best", best.dtype, ARG_PARTS)
    places = K.Buffer(f"partial_{kernel.name}_at", at.dtype, ARG_PARTS)
    part, inside = K.fresh_index("c"), K.fresh_index("i")
    within = {
        id(first): K.binary("eq", inside, K.const(0, K.INDEX)),
        id(loop.index): part * K.const(share, K.INDEX) + inside,
    }
    parts = K.Kernel(
        f"{kernel.name}_parts",
        kernel.inputs,
        [bests, places],
        [
            K.Loop(
                part,
                0,
                ARG_PARTS,
                [
                    body[0],
                    body[1],
                    K.Loop(inside, 0, share, body_replaced(loop.body, within)),
                    K.Store(bests, part, best.read()),
                    K.Store(places, part, at.read()),
                ],
            )
        ],
    )
    each = K.fresh_index("c")
    across = {
        id(first): K.binary("eq", each, K.const(0, K.INDEX)),
        id(value): K.Load(bests, each),
        id(at_update.value.on_true): K.Load(places, each),
    }
    carried = [body[0], body[1], K.Loop(each, 0, ARG_PARTS, body_replaced(loop.body, across))]
    rest = K.fresh_index("i")
    carried.append(
        K.Loop(rest, ARG_PARTS * share, count, body_replaced(loop.body, {id(loop.index): rest}))
    )
    combined = K.Kernel(
        kernel.name, [*kernel.inputs, bests, places], kernel.outputs, [*carried, body[3]]
    )
    return [parts, combined]


# -- cumulative ops along one long line (GPU) ---------------------------------------------

# A cumulative op along a whole line of at least SCAN_PARTS * SCAN_PART_MIN elements is split
# (into SCAN_PARTS parts, or a near count that divides the line).
SCAN_PARTS = 1024
SCAN_PART_MIN = 32


def _scan_split(kernel: K.Kernel, eqn) -> list[K.Kernel] | None:
    """A cumulative op along one line (`fusion._cumulative` with no
    outer loops: a running value carried down the line on one thread) of at least
    SCAN_PARTS * SCAN_PART_MIN elements, in SCAN_PARTS parts or a near count that divides
    the line (`_dividing`), else in parts of equal share but a shorter last one, as three
    kernels: each contiguous part folds its elements (a thread each);
    one thread carries the running value over the parts' folds, keeping it after each part;
    then each part runs down its elements again from the value before it, storing (a thread
    each). That last kernel alone writes the result, pointwise with its reads of the operand,
    so a donated operand still hosts it (`donation`). The combination is regrouped, as a
    split sum is: float sums and products round differently from one running value."""
    if len(kernel.body) != 2 or kernel.scratch:
        return None
    start, loop = kernel.body
    if not (isinstance(start, K.SetAcc) and isinstance(loop, K.Loop) and len(loop.body) == 2):
        return None
    update, store = loop.body
    if not (isinstance(update, K.SetAcc) and isinstance(store, K.Store)):
        return None
    if not isinstance(update.value, K.Select) or loop.start != 0:
        return None
    count = loop.stop - loop.start
    parts_count = _dividing(count, SCAN_PARTS)
    if count < parts_count * SCAN_PART_MIN:
        return None
    share = -(-count // parts_count)
    parts_count = -(-count // share)  # (where none divides, the last part shorter, none empty)
    acc, value = update.acc, update.value.on_true
    folds = K.Buffer(f"partial_{kernel.name}", acc.dtype, parts_count)
    running = K.Buffer(f"running_{kernel.name}", acc.dtype, parts_count)

    def by_part(body: list) -> K.Loop:
        part, inside = K.fresh_index("c"), K.fresh_index("i")
        position = part * K.const(share, K.INDEX) + inside
        return K.Loop(part, 0, parts_count, body(part, inside, position))

    def guarded(statements: list, position) -> list:
        """The loop body at `position`, where the line's length is not a multiple of the
        share: past the line's end the running value stays, and the last element's store is
        made again (the same value, by the same thread)."""
        if count % share == 0:
            return body_replaced(statements, {id(loop.index): position})
        past = K.binary("lt", position, K.const(count, K.INDEX))
        clamped = K.binary("min", position, K.const(count - 1, K.INDEX))
        placed = body_replaced(statements, {id(loop.index): clamped})
        return [
            K.SetAcc(s.acc, K.select(past, s.value, acc.read())) if isinstance(s, K.SetAcc) else s
            for s in placed
        ]

    def fold(part, inside, position) -> list:
        opening = K.binary("eq", inside, K.const(0, K.INDEX))  # (a part folds from its first)
        opened = statement_replaced(update, {id(update.value.pred): opening})
        within = K.Loop(inside, 0, share, guarded([opened], position))
        return [start, within, K.Store(folds, part, acc.read())]

    def rescan(part, inside, position) -> list:
        before = K.binary("max", part - K.const(1, K.INDEX), K.const(0, K.INDEX))
        within = K.Loop(inside, 0, share, guarded(loop.body, position))
        # (part 0 starts afresh at its first element, as the line did)
        return [K.SetAcc(acc, K.Load(running, before)), within]

    each = K.fresh_index("c")
    across = {id(loop.index): each, id(value): K.Load(folds, each)}
    carry = [statement_replaced(update, across), K.Store(running, each, acc.read())]
    return [
        K.Kernel(f"{kernel.name}_parts", kernel.inputs, [folds], [by_part(fold)]),
        K.Kernel(
            f"{kernel.name}_carry", [folds], [running], [start, K.Loop(each, 0, parts_count, carry)]
        ),
        # (parts never meet: past the line's end the last part rewrites its own last element)
        K.Kernel(
            kernel.name,
            [*kernel.inputs, running],
            kernel.outputs,
            [by_part(rescan)],
            independent_outer=True,
        ),
    ]


# -- sorts (GPU) ------------------------------------------------------------------------------


def _sort_split(kernel: K.Kernel, eqn) -> list[K.Kernel] | None:
    """A sort or top_k kernel (`fusion._merge_sort`: every line's positions
    0..n-1, then passes merging runs of each width over every line in turn, then the sorted
    elements gathered, all on one thread: each pass's loads and stores go through the
    permutations it reads) as kernels on the grid: with fewer than RANKED_MERGES_BELOW
    lines, a kernel per merge pass placing every element at once (`_ranked_merges`); else a
    thread per line taking its whole merge sort, its permutations in two buffers of all the
    lines' (each line reads and writes its own row of them, but for a spare slot every line
    writes and none reads). Then the gather on the grid."""
    if len(kernel.scratch) != 2:
        return None
    scratch = set(kernel.scratch)
    count = 0
    while count < len(kernel.body) and _stores_only(kernel.body[count], scratch):
        count += 1
    passes, gather = kernel.body[:count], kernel.body[count:]
    if not passes or not gather or not all(isinstance(loop, K.Loop) for loop in passes):
        return None
    lines = {(loop.start, loop.stop) for loop in passes}
    if len(lines) != 1:
        return None
    ((start, stop),) = lines
    if stop - start < RANKED_MERGES_BELOW:
        ranked = _ranked_merges(kernel, passes, gather)
        if ranked is not None:
            return ranked
    if stop - start < 2:
        return None
    line = K.fresh_index("line")
    body = []
    for loop in passes:
        body += body_replaced(loop.body, {id(loop.index): line})
    permutations = list(kernel.scratch)
    sorting = K.Kernel(
        f"{kernel.name}_lines",
        kernel.inputs,
        permutations,
        [K.Loop(line, start, stop, body)],
        independent_outer=True,
    )
    gathered = K.Kernel(kernel.name, kernel.inputs + permutations, kernel.outputs, gather)
    return [sorting, gathered]


# Sorts of fewer lines than this (a thread each would leave a GPU nearly idle, one walking n
# log n steps) merge their runs a kernel per pass, a thread per element (`_ranked_merges`).
RANKED_MERGES_BELOW = 1 << 12


def _ranked_merges(kernel: K.Kernel, passes: list, gather: list) -> list[K.Kernel] | None:
    """`_merge_sort`'s passes as a kernel each over every element of every line: an element
    of a run finds its place in the merged run from its own rank and the number of elements
    of the other run that go before it (the right run's strictly before, the left run's
    before or tied: the merge stays stable), by binary search in that sorted run with the
    pass's own comparison. log n kernels of n log w steps, where a thread per line walks
    n log n steps alone. None where the passes are not `_merge_sort`'s."""
    init, merges = passes[0], passes[1:]
    first = _positions_store(init)
    if first is None:
        return None
    lines, n = init.stop - init.start, init.body[0].stop
    e = K.fresh_index("e")
    kernels = [
        K.Kernel(
            f"{kernel.name}_positions",
            kernel.inputs,
            [first],
            [K.Loop(e, 0, lines * n, [K.Store(first, e, K.binary("rem", e, _index(n)))])],
            independent_outer=True,
        )
    ]
    for number, merge in enumerate(merges):
        ranked = _ranked_pass(merge, n)
        if ranked is None:
            return None
        source, body = ranked
        name = f"{kernel.name}_merge{number}"
        inputs = kernel.inputs + [source]
        outputs = [b for b in kernel.scratch if b is not source]
        kernels.append(K.Kernel(name, inputs, outputs, [body], independent_outer=True))
    permutations = list(kernel.scratch)
    kernels.append(K.Kernel(kernel.name, kernel.inputs + permutations, kernel.outputs, gather))
    return kernels


def _positions_store(init) -> K.Buffer | None:
    """The buffer of `_merge_sort`'s first loop (each line's positions 0..n-1), or None."""
    if not (isinstance(init, K.Loop) and len(init.body) == 1):
        return None
    inner = init.body[0]
    if not (isinstance(inner, K.Loop) and len(inner.body) == 1):
        return None
    store = inner.body[0]
    return store.buffer if isinstance(store, K.Store) else None


def _ranked_pass(merge: K.Loop, n: int) -> tuple[K.Buffer, K.Loop] | None:
    """One merge pass of `_merge_sort` (for each line, each pair of runs of width w merged
    by a walk choosing the left or the right element) as a loop over every element of every
    line placing it by binary search, and the buffer the pass reads; None where `merge` is
    not such a pass."""
    pairs = merge.body[0] if len(merge.body) == 1 else None
    if not isinstance(pairs, K.Loop) or len(pairs.body) != 3:
        return None
    walk = pairs.body[2]
    if not isinstance(walk, K.Loop) or len(walk.body) != 4:
        return None
    decide, store = walk.body[0], walk.body[1]
    if not (isinstance(decide, K.SetAcc) and isinstance(store, K.Store)):
        return None
    chosen, take_left = store.value, decide.value
    if not (isinstance(chosen, K.Select) and isinstance(take_left, K.Binary)):
        return None
    left_pos, right_pos = chosen.on_true, chosen.on_false
    either = take_left.b
    if not (
        isinstance(left_pos, K.Load)
        and isinstance(right_pos, K.Load)
        and isinstance(either, K.Binary)
        and isinstance(either.b, K.Unary)
        and either.b.op == "not"
    ):
        return None
    right_first = either.b.x  # before(line, right's position, left's position)
    source, target, width = left_pos.buffer, store.buffer, (walk.stop - walk.start) // 2

    e = K.fresh_index("e")
    line, p = K.binary("div", e, _index(n)), K.binary("rem", e, _index(n))
    base = K.binary("mul", line, _index(n))
    lo = K.binary("mul", K.binary("div", p, _index(2 * width)), _index(2 * width))
    mid = K.binary("min", K.binary("add", lo, _index(width)), _index(n))
    hi = K.binary("min", K.binary("add", lo, _index(2 * width)), _index(n))
    in_left = K.binary("lt", p, mid)
    mine = K.Load(source, K.binary("add", base, p))

    def before(right, left):  # the pass's comparison, at other positions
        return replaced_in(
            right_first, {id(right_pos): right, id(left_pos): left, id(merge.index): line}
        )

    found, remaining = K.fresh_acc(K.INDEX, "found"), K.fresh_acc(K.INDEX, "remaining")
    go = K.fresh_acc(K.BOOL, "go")
    half = K.binary("div", remaining.read(), _index(2))
    other = K.select(in_left, mid, lo)
    probe = K.binary(
        "min", K.binary("add", K.binary("add", other, found.read()), half), _index(n - 1)
    )
    theirs = K.Load(source, K.binary("add", base, probe))
    # Left elements count the right run's that go strictly before them; right elements the
    # left run's that do not go after them.
    counted = K.select(in_left, before(theirs, mine), K.unary("not", before(mine, theirs)))
    step = K.fresh_index("step")
    search = K.Loop(
        step,
        0,
        width.bit_length() + 1,
        [
            K.SetAcc(go, K.binary("and", K.binary("gt", remaining.read(), _index(0)), counted)),
            K.SetAcc(
                found,
                K.select(
                    go.read(),
                    K.binary("add", K.binary("add", found.read(), half), _index(1)),
                    found.read(),
                ),
            ),
            K.SetAcc(
                remaining,
                K.select(
                    go.read(),
                    K.binary("sub", K.binary("sub", remaining.read(), half), _index(1)),
                    half,
                ),
            ),
        ],
    )
    own = K.binary("sub", p, K.select(in_left, lo, mid))
    slot = K.binary("add", K.binary("add", lo, own), found.read())
    body = [
        K.SetAcc(found, _index(0)),
        K.SetAcc(remaining, K.select(in_left, K.binary("sub", hi, mid), K.binary("sub", mid, lo))),
        search,
        K.Store(target, K.binary("add", base, slot), mine),
    ]
    return source, K.Loop(e, 0, n * (merge.stop - merge.start), body)


def _stores_only(statement, buffers: set) -> bool:
    """Whether every store in `statement` goes to one of `buffers`."""
    return all(s.buffer in buffers for s in statements_in([statement]) if isinstance(s, K.Store))


# -- kernels that ran on one thread (GPU) -------------------------------------------------------

# How a GPU spreads the kernels of these primitives, which the scheduler writes for one thread.
_SPREAD_BY_ROOT = {
    **dict.fromkeys(
        (
            "scatter",
            "scatter_add",
            "scatter_mul",
            "scatter_min",
            "scatter_max",
            "scatter_mul_pairs",
            "scatter_min_pairs",
            "scatter_max_pairs",
        ),
        _scatter_split,
    ),
    **dict.fromkeys(("sort", "top_k"), _sort_split),
    **dict.fromkeys(("argmax", "argmin"), _argreduction_split),
    **dict.fromkeys(("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"), _scan_split),
}


def spread_one_thread_kernels(program: Program) -> None:
    """For a GPU, rewrites, in `program` and the programs its steps hold, each kernel whose
    root is a scatter, a sort, a whole-array argmax or argmin, or a cumulative op along one
    line, all of which run on one thread as the scheduler writes them, as kernels that
    spread over a GPU's threads, by its root's rule (`_scatter_split`, `_sort_split`,
    `_argreduction_split`, `_scan_split`)."""

    def rewritten(step: KernelStep) -> list[K.Kernel] | None:
        spread = _SPREAD_BY_ROOT.get(step.eqns[-1].primitive.name) if step.eqns else None
        return None if spread is None else spread(step.kernel, step.eqns[-1])

    _kernels_replaced(program, rewritten)


def body_replaced(body: list, replacements: dict) -> list:
    """The statements with the nodes `replacements` names (by id) replaced, their loops new."""
    return [
        K.Loop(s.index, s.start, s.stop, body_replaced(s.body, replacements))
        if isinstance(s, K.Loop)
        else statement_replaced(s, replacements)
        for s in body
    ]


def _split_product(kernel: K.Kernel) -> list[K.Kernel] | None:
    nest = product_nest(kernel)
    if nest is None or nest.parts is not None:
        return None
    rows, columns, terms = nest.rows.stop, nest.columns.stop, nest.terms.stop
    if rows * columns < MIN_TILED_RESULTS:
        return None
    parts = min(terms // MIN_PRODUCT_SHARE, PRODUCT_RESULTS // (rows * columns))
    if parts < 2:
        return None
    share = terms // parts
    dtype = nest.acc.dtype
    partials = K.Buffer(f"partial_{kernel.name}", dtype, parts * rows * columns)
    part, row, column, term = (K.fresh_index(n) for n in ("p", "r", "c", "k"))

    def at(e: K.Expr, place: dict) -> K.Expr:
        return replaced_in(e, {id(index): value for index, value in place.items()})

    term_there = part * K.const(share, K.INDEX) + term
    place = {nest.rows.index: row, nest.columns.index: column, nest.terms.index: term_there}
    partial = K.fresh_acc(dtype)
    product = K.binary("mul", at(nest.a, place), at(nest.b, place))
    slot = (part * K.const(rows, K.INDEX) + row) * K.const(columns, K.INDEX) + column
    sums = K.Loop(part, 0, parts, [K.Loop(row, 0, rows, [K.Loop(column, 0, columns, [
        K.SetAcc(partial, K.const(0, dtype)),
        K.Loop(term, 0, share, [K.SetAcc(partial, K.binary("add", partial.read(), product))]),
        K.Store(partials, slot, partial.read()),
    ])])])  # fmt: skip
    first = K.Kernel(f"{kernel.name}_parts", kernel.inputs, [partials], [sums])

    result, each = K.fresh_index("j"), K.fresh_index("p")
    width = K.const(columns, K.INDEX)
    place = {
        nest.rows.index: K.binary("div", result, width),
        nest.columns.index: K.binary("rem", result, width),
    }
    acc = nest.acc
    combined = K.Load(partials, each * K.const(rows * columns, K.INDEX) + result)
    body = [
        K.SetAcc(acc, nest.init),
        K.Loop(each, 0, parts, [K.SetAcc(acc, K.binary("add", acc.read(), combined))]),
    ]
    if parts * share < terms:
        rest = K.fresh_index("k")
        left = {**place, nest.terms.index: rest}
        term_left = K.binary("mul", at(nest.a, left), at(nest.b, left))
        body.append(
            K.Loop(
                rest, parts * share, terms, [K.SetAcc(acc, K.binary("add", acc.read(), term_left))]
            )
        )
    body.append(statement_replaced(nest.store, {id(i): v for i, v in place.items()}))
    second = K.Kernel(
        kernel.name,
        [*kernel.inputs, partials],
        kernel.outputs,
        [K.Loop(result, 0, rows * columns, body)],
    )
    return [first, second]


# -- reductions over a leading axis with few columns (GPU) -----------------------------------------

# A part of a column's rows is at least this many rows.
MIN_PART_ROWS = 16


def _split_columns(kernel: K.Kernel, threads: int) -> list[K.Kernel] | None:
    """A column reduction in `columns_outer`'s form,

        for j < C: acc = init(j); for i < R: acc = op(acc, term(i, j)); out[j] = acc

    as two kernels: first P * C partial folds, thread t taking column t % C and part t / C
    of the rows (neighbouring threads read neighbouring elements), each column's partials
    stored side by side, then per column the fold of its P partials in order (on a block per
    column where they are many: `render.row_kernel`), of the rows left over and of `init`,
    with the store. P makes about `threads` threads of at least MIN_PART_ROWS rows each,
    dividing the rows where a near count does (`_dividing`: no rows are left over for the
    second kernel's threads to walk); it depends on the shapes alone, so the bits of a float
    sum do not depend on the device."""
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], K.Loop):
        return None
    columns = kernel.body[0]
    if len(columns.body) < 2 or not isinstance(columns.body[0], K.SetAcc):
        return None
    (init, rows, *after), acc = columns.body, columns.body[0].acc
    found = _fold_and_map(rows, acc) if isinstance(rows, K.Loop) else None
    if found is None or found[0] not in FOLDS:
        return None
    op, term, stores = found
    if not all(_one_element_each(s, columns, rows, set(kernel.scratch)) for s in stores):
        return None
    owned = {s.buffer: s.offset for s in stores}  # (the fold reads back what the map stores)
    if _reads(init.value, lambda e: isinstance(e, K.AccRead)) or _reads(
        term,
        lambda e: (
            isinstance(e, K.AccRead)
            or (
                e.buffer in kernel.outputs and (e.buffer not in owned or _reads_elsewhere(e, owned))
            )
        ),
    ):
        return None
    count, length = columns.stop - columns.start, rows.stop - rows.start
    parts = _parts(length, count, threads)
    if parts < 2:
        return None
    share = length // parts
    on_blocks = _columns_on_blocks(kernel, columns, rows, op, term, parts, stores)
    if on_blocks is not None:
        return [on_blocks]
    partials = K.Buffer(f"partial_{kernel.name}", acc.dtype, parts * count)
    thread, step, width = K.fresh_index("t"), K.fresh_index("i"), K.const(count, K.INDEX)
    column = K.binary("rem", thread, width) + K.const(columns.start, K.INDEX)
    row = K.binary("div", thread, width) * K.const(share, K.INDEX) + step
    partial = K.fresh_acc(acc.dtype)
    term_there = replaced_in(
        term, {id(columns.index): column, id(rows.index): row + K.const(rows.start, K.INDEX)}
    )
    place = {id(columns.index): column, id(rows.index): row + K.const(rows.start, K.INDEX)}
    fold = [
        *_owned_there(stores, place),
        K.SetAcc(partial, K.binary(op, partial.read(), term_there)),
    ]
    slot = K.binary("rem", thread, width) * K.const(parts, K.INDEX) + K.binary("div", thread, width)
    first = _partial_folds(kernel, partials, partial, op, thread, step, share, fold, slot)
    first.outputs += [s.buffer for s in stores]
    each = K.fresh_index("c")
    mine = (columns.index - K.const(columns.start, K.INDEX)) * K.const(parts, K.INDEX) + each
    combined = K.SetAcc(acc, K.binary(op, acc.read(), K.Load(partials, mine)))
    body = [init, K.Loop(each, 0, parts, [combined])]
    left = rows.start + parts * share
    if left < rows.stop:
        rest = K.fresh_index("i")
        folded = K.binary(op, acc.read(), substituted(term, rows.index, rest))
        mapped = _owned_there(stores, {id(rows.index): rest})
        body.append(K.Loop(rest, left, rows.stop, [*mapped, K.SetAcc(acc, folded)]))
    second = K.Kernel(
        kernel.name,
        [*kernel.inputs, partials],
        kernel.outputs,
        [K.Loop(columns.index, columns.start, columns.stop, body + after)],
        kernel.scratch,
    )
    return [first, second]


# A group of columns with its parts of the rows takes one block when that makes a block's worth
# of partial folds: at least this many (as `render.ROW_MIN_WIDTH` asks of a row's loop), at
# most a launch's block (`render.LAUNCH_BLOCK`, each thread one part of one column), the
# group's columns at least a sector of memory wide (8 floats) unless they are all the columns.
# The narrowest such group makes the most blocks, which spread over the most multiprocessors.
BLOCK_PARTS_LEAST = 128
BLOCK_PARTS_MOST = 256
BLOCK_LANES_LEAST = 8


def _fold_and_map(rows: K.Loop, acc: K.Acc) -> tuple | None:
    """(op, term, stores) when `rows` is one loop folding `acc = op(acc, term)`, maybe after
    the stores of the map whose values it folds (`_columns_outer`)."""
    *stores, last = rows.body
    if stores and all(isinstance(s, K.Store) for s in stores):
        rows = K.Loop(rows.index, rows.start, rows.stop, [last])
    elif stores:
        return None
    found = _fold(rows, acc)
    if found is None or len(found[2]) != 1:
        return None
    return found[0], found[1], stores


def _one_element_each(store: K.Store, columns: K.Loop, rows: K.Loop, scratch: set) -> bool:
    """Whether a fold's map store writes a different element at each column and row, as the
    map a column fold reads back does (`schedule.column_folds_with_maps`): its offset
    `a * column + b * row + c`, one stride spanning the other's whole range, in memory of
    the kernel's own. Not so a row's scratch, which every column reuses: a softmax's
    gradient read a product's weights strided, its first fold was taken for a column's, and
    the parts of both rows wrote their values into one row's scratch, which the second
    kernel then read for each."""
    if store.buffer in scratch:
        return False
    terms, _ = linear_terms(store.offset)
    if set(terms) != {id(columns.index), id(rows.index)}:
        return False
    across, down = abs(terms[id(columns.index)][1]), abs(terms[id(rows.index)][1])
    return across >= down * (rows.stop - rows.start) or down >= across * (
        columns.stop - columns.start
    )


def _owned_there(stores: list, place: dict) -> list:
    """A fold's map stores, moved where `place` (replacements by id) puts its indices, marked
    as each iteration's own (`Store.own`): the moves keep one element to each iteration,
    which the offsets no longer show."""
    return [
        dataclasses.replace(
            s, offset=replaced_in(s.offset, place), value=replaced_in(s.value, place), own=True
        )
        for s in stores
    ]


def _columns_on_blocks(
    kernel: K.Kernel,
    columns: K.Loop,
    rows: K.Loop,
    op: str,
    term: K.Expr,
    parts: int,
    stores: list,
) -> K.Kernel | None:
    """`_split_columns`'s two kernels as one, where its partial folds fit in blocks: a block
    per group of L neighbouring columns (a row of the group loop, `render.row_kernel`),
    whose threads first make the group's P * L partial folds (thread t: column t % L, part
    t / L) into shared memory, then, after a barrier, fold each column's P partials in order
    with `init`, the rows left over and the statements after, as the second kernel did (the
    same sums, in the same order). One launch where there were two, and no partials in
    global memory."""
    (init, _, *after), acc = columns.body, columns.body[0].acc
    count, length = columns.stop - columns.start, rows.stop - rows.start
    lanes = _block_lanes(count, parts)
    if lanes is None or not all(isinstance(s, K.Store) for s in after):
        return None
    share = length // parts
    group, thread, lane = K.fresh_index("g"), K.fresh_index("t"), K.fresh_index("l")
    step, each = K.fresh_index("i"), K.fresh_index("c")
    width = K.const(lanes, K.INDEX)
    partials = K.Buffer(f"partials_{kernel.name}", acc.dtype, parts * lanes)
    folded = K.Buffer(f"folded_{kernel.name}", acc.dtype, lanes)

    def mine() -> K.Expr:
        return K.Load(partials, thread)

    def running() -> K.Expr:
        return K.Load(folded, lane)

    def at(column_in_group: K.Expr) -> dict:
        column = group * width + column_in_group + K.const(columns.start, K.INDEX)
        return {id(columns.index): column}

    row = K.binary("div", thread, width) * K.const(share, K.INDEX) + step
    there = at(K.binary("rem", thread, width)) | {
        id(rows.index): row + K.const(rows.start, K.INDEX)
    }
    first = K.Loop(
        thread,
        0,
        parts * lanes,
        [
            K.Store(partials, thread, K.const(identity(op, acc.dtype), acc.dtype)),
            K.Loop(
                step,
                0,
                share,
                [
                    *_owned_there(stores, there),
                    K.Store(partials, thread, K.binary(op, mine(), replaced_in(term, there))),
                ],
            ),
        ],
    )
    in_order = K.Load(partials, each * width + lane)
    body = [
        K.Store(folded, lane, replaced_in(init.value, at(lane))),
        K.Loop(each, 0, parts, [K.Store(folded, lane, K.binary(op, running(), in_order))]),
    ]
    left = rows.start + parts * share
    if left < rows.stop:
        rest = K.fresh_index("i")
        leftover = replaced_in(term, at(lane) | {id(rows.index): rest})
        mapped = _owned_there(stores, at(lane) | {id(rows.index): rest})
        body.append(
            K.Loop(
                rest,
                left,
                rows.stop,
                [*mapped, K.Store(folded, lane, K.binary(op, running(), leftover))],
            )
        )
    for statement in after:
        reads = {
            id(e): running()
            for e in expressions(statement)
            if isinstance(e, K.AccRead) and e.acc is acc
        }
        body.append(statement_replaced(statement, reads | at(lane)))
    second = K.Loop(lane, 0, lanes, body)
    if shared_loop_folds(first) is None or shared_loop_folds(second) is None:
        return None
    return K.Kernel(
        kernel.name,
        kernel.inputs,
        kernel.outputs + [partials, folded],
        [K.Loop(group, 0, count // lanes, [first, second])],
        kernel.scratch + [partials, folded],
    )


def _parts(length: int, count: int, threads: int) -> int:
    """How many parts `_split_columns` folds each of `count` columns of `length` rows in."""
    return _dividing(length, min(length // MIN_PART_ROWS, threads // max(count, 1)))


def _block_lanes(count: int, parts: int) -> int | None:
    """The columns a block takes in `_columns_on_blocks` (each folded in `parts` parts), or
    None where no group of them suits a block."""
    for lanes in range(1, min(count, BLOCK_PARTS_MOST // parts) + 1):
        wide = lanes >= BLOCK_LANES_LEAST or lanes == count
        if count % lanes == 0 and lanes * parts >= BLOCK_PARTS_LEAST and wide:
            return lanes
    return None


def column_fold_on_blocks(rows: int, columns: int, split: ReductionSplit) -> bool:
    """Whether a fold down `rows` of each of `columns` (a reduction over leading axes) runs
    as one kernel of blocks, each folding a group of columns (`_columns_on_blocks`), under
    `split`: where a map may make the values it folds in that kernel (`schedule`)."""
    if not split.column_threads or rows * columns < split.min_work:
        return False
    parts = _parts(rows, columns, split.column_threads)
    return parts >= 2 and _block_lanes(columns, parts) is not None


def _dividing(length: int, most: int) -> int:
    """The largest count of parts, at most `most` and at least a quarter of it, that divides
    `length`; `most` where none does."""
    for parts in range(most, max(most // 4, 1), -1):
        if length % parts == 0:
            return parts
    return most


def _partial_folds(
    kernel: K.Kernel,
    partials: K.Buffer,
    partial: K.Acc,
    op: str,
    part: K.Index,
    step: K.Index,
    share: int,
    fold: list,
    slot: K.Expr,
) -> K.Kernel:
    """The first kernel of a split reduction: for each part (as many as `partials` holds),
    `partial` starts at `op`'s identity, folds `share` steps of `fold` and is stored at
    `slot` (an expression of `part`)."""
    start = K.SetAcc(partial, K.const(identity(op, partial.dtype), partial.dtype))
    body = [start, K.Loop(step, 0, share, fold), K.Store(partials, slot, partial.read())]
    return K.Kernel(
        f"{kernel.name}_parts", kernel.inputs, [partials], [K.Loop(part, 0, partials.size, body)]
    )


def _fold_nest(
    loops: list, acc: K.Acc, op: str, term: K.Expr, outer: K.Loop, position: K.Expr
) -> list:
    """The statements folding `term` into `acc` over `loops` (the inner loops of a reduction),
    with the outer loop's index standing for `position`."""
    body = [K.SetAcc(acc, K.binary(op, acc.read(), substituted(term, outer.index, position)))]
    for loop in reversed(loops):
        body = [K.Loop(loop.index, loop.start, loop.stop, body)]
    return body


def substituted(expr: K.Expr, index: K.Index, value: K.Expr) -> K.Expr:
    """`expr` with `value` in place of `index`."""
    return replaced_in(expr, {id(index): value})


def statement_replaced(statement, replacements: dict):
    """A store or accumulator update with the nodes `replacements` names (by id) replaced in
    its expressions (`replaced_in`)."""
    if isinstance(statement, K.Store):
        offset, value = (replaced_in(e, replacements) for e in (statement.offset, statement.value))
        return dataclasses.replace(statement, offset=offset, value=value)
    return K.SetAcc(statement.acc, replaced_in(statement.value, replacements))


def replaced_in(expr: K.Expr, replacements: dict) -> K.Expr:
    """`expr` with each node whose id `replacements` holds replaced by its value there (shared
    subexpressions stay shared; iterative, as expression DAGs may be deep)."""
    done: dict = dict(replacements)
    pending = [expr]
    while pending:
        e = pending[-1]
        if id(e) in done:
            pending.pop()
            continue
        children = {
            f.name: getattr(e, f.name)
            for f in dataclasses.fields(e)
            if f.init and isinstance(getattr(e, f.name), K.Expr)
        }
        todo = [child for child in children.values() if id(child) not in done]
        if todo:
            pending += todo
            continue
        pending.pop()
        changes = {name: done[id(child)] for name, child in children.items()}
        same = all(changes[name] is child for name, child in children.items())
        done[id(e)] = e if same else dataclasses.replace(e, **changes)
    return done[id(expr)]
