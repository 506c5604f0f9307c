"""Innermost loops split where their comparisons change (index-set splitting), on a CPU.

A pad, a concatenation or a convolution's padded copy chooses, for each element, between
reading its operand and a constant by comparing the loop's index with constants
(`select(0 <= i - 5 < 1024, x[i - 5], 0)`), and clamps the index it reads at (`min(i, 511)`).
Each comparison of the innermost loop's index plus a constant changes its answer at one
index. Split there, each piece of the loop knows every such answer: its body is plain loads
and stores, which vectorize without selects or clamped indices.
"""

from __future__ import annotations

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.index_algebra import expression_range
from funcgrad.compiler.parallel import replaced_in

# A loop of fewer iterations is left whole (its pieces would be too short to vectorize).
MIN_TRIPS = 64
# At most this many pieces (a pad's three, a concatenation's of four operands).
MAX_PIECES = 5

_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def split_at_edges(kernel: K.Kernel) -> None:
    """Splits the kernel's innermost loops inside other loops (an outermost one stays whole:
    threads split it)."""
    for statement in kernel.body:
        if isinstance(statement, K.Loop):
            statement.body[:] = _split(statement.body)


def _split(body: list) -> list:
    rewritten = []
    for statement in body:
        if not isinstance(statement, K.Loop):
            rewritten.append(statement)
        elif any(isinstance(inner, K.Loop) for inner in statement.body):
            statement.body[:] = _split(statement.body)
            rewritten.append(statement)
        else:
            rewritten.extend(_pieces(statement))
    return rewritten


def _pieces(loop: K.Loop) -> list[K.Loop]:
    if loop.stop - loop.start < MIN_TRIPS:
        return [loop]
    edges = sorted({e for e in _edges(loop) if loop.start < e < loop.stop})
    if not edges or len(edges) >= MAX_PIECES:
        return [loop]
    bounds = [loop.start, *edges, loop.stop]
    pieces = []
    for start, stop in zip(bounds, bounds[1:]):
        index = K.fresh_index()
        ranges = {index: (start, stop - 1)}
        memo = {id(loop.index): index}
        body = [_statement_decided(s, ranges, memo) for s in loop.body]
        pieces.append(K.Loop(index, start, stop, body))
    return pieces


def _edges(loop: K.Loop):
    """The indices where a comparison (or a min or max) of `loop`'s index plus a constant
    with a constant first gives its other answer."""
    for statement in loop.body:
        values = [statement.value] + ([statement.offset] if isinstance(statement, K.Store) else [])
        for value in values:
            for node in K.nodes(value):
                edge = _edge(node, loop.index)
                if edge is not None:
                    yield edge


def _edge(node: K.Expr, index: K.Index) -> int | None:
    if not isinstance(node, K.Binary) or node.a.dtype != K.INDEX:
        return None
    op, a, b = node.op, node.a, node.b
    if op in ("min", "max"):  # min(e, c) is e where e <= c; max(e, c) where e >= c
        op = "le" if op == "min" else "ge"
    if op not in _FLIPPED:
        return None
    if isinstance(a, K.Const):
        op, a, b = _FLIPPED[op], b, a
    if not isinstance(b, K.Const):
        return None
    terms, constant = K.linear_terms(a)
    if len(terms) != 1:
        return None
    ((atom, coefficient),) = terms.values()
    if atom is not index or coefficient not in (1, -1):
        return None
    # coefficient * i + constant against b: as `lt` or `ge` with a threshold.
    threshold = int(b.value) + (1 if op in ("le", "gt") else 0)
    return threshold - constant if coefficient == 1 else constant - threshold + 1


def _statement_decided(statement, ranges: dict, memo: dict):
    value = _decided(statement.value, ranges, memo)
    if isinstance(statement, K.Store):
        return K.Store(statement.buffer, _decided(statement.offset, ranges, memo), value)
    return K.SetAcc(statement.acc, value)


def _decided(e: K.Expr, ranges: dict, memo: dict) -> K.Expr:
    """`e` with the piece's index in place of the loop's (`memo` maps the one to the other)
    and each comparison, min and max the piece's range decides replaced by its answer."""
    if id(e) in memo:
        return memo[id(e)]
    result = e
    if isinstance(e, K.Binary):
        a, b = _decided(e.a, ranges, memo), _decided(e.b, ranges, memo)
        result = _answered(e.op, a, b, ranges)
        if result is None and (a is not e.a or b is not e.b):
            result = K.binary(e.op, a, b) if e.contract else K.Binary(e.op, a, b, False)
        elif result is None:
            result = e
    elif isinstance(e, K.Select):
        pred = _decided(e.pred, ranges, memo)
        on_true, on_false = _decided(e.on_true, ranges, memo), _decided(e.on_false, ranges, memo)
        if isinstance(pred, K.Const):
            result = on_true if pred.value else on_false
        elif (pred, on_true, on_false) != (e.pred, e.on_true, e.on_false):
            result = K.Select(pred, on_true, on_false)
    elif not isinstance(e, (K.Const, K.Index, K.Acc)):
        children = {id(c): _decided(c, ranges, memo) for c in _children(e)}
        if any(children[id(c)] is not c for c in _children(e)):
            result = replaced_in(e, children)
    memo[id(e)] = result
    return result


def _children(e: K.Expr) -> list[K.Expr]:
    return [v for v in vars(e).values() if isinstance(v, K.Expr)]


def _answered(op: str, a: K.Expr, b: K.Expr, ranges: dict) -> K.Expr | None:
    """op(a, b) where the range decides it (or a constant operand of `and` and `or` does)."""
    if op in ("and", "or") and (isinstance(a, K.Const) or isinstance(b, K.Const)):
        known, other = (a, b) if isinstance(a, K.Const) else (b, a)
        absorbs = not known.value if op == "and" else bool(known.value)
        return known if absorbs else other
    if a.dtype != K.INDEX or op not in ("lt", "le", "gt", "ge", "min", "max"):
        return None
    difference = expression_range(K.binary("sub", a, b), ranges)
    if difference is None:
        return None
    low, high = difference
    if op in ("min", "max"):
        if high <= 0:
            return a if op == "min" else b
        if low >= 0:
            return b if op == "min" else a
        return None
    holds = {"lt": high < 0, "le": high <= 0, "gt": low > 0, "ge": low >= 0}[op]
    fails = {"lt": low >= 0, "le": low > 0, "gt": high <= 0, "ge": high < 0}[op]
    if holds or fails:
        return K.const(holds, K.BOOL)
    return None
