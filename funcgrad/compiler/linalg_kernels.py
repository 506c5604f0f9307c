"""Root rules for the small dense factorizations that have exact loop forms: triangular solves,
Cholesky and LU with partial pivoting. Each maps over the leading (batch) axes and works in
place in its output buffer, in the same order of operations as the reference backend.

Loops have static bounds, so the triangular ones run over the whole square and mask what
lies outside the triangle with selects (never with loads of unwritten memory feeding a
result).
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.fusion import KernelBuilder, compute_dtype, root_rules
from funcgrad.compiler.kernel_ir import INDEX, Expr
from funcgrad.core import PRIMITIVES
from funcgrad.ir import JaxprEqn


def _i(value: int) -> Expr:
    return K.const(value, INDEX)


def _batched(batch: int, body) -> list:
    """`body(b)` for every matrix b of the stack."""
    b = K.fresh_index("batch")
    return [K.Loop(b, 0, batch, body(b))]


def _read(builder: KernelBuilder, var, b: Expr, i: Expr, j: Expr, dtype) -> Expr:
    """Element (i, j) of matrix b of `var`, in the compute dtype."""
    *batch_shape, rows, cols = var.aval.shape
    index = list(_batch_index(b, tuple(batch_shape))) + [i, j]
    return K.cast(builder.element(var, index), dtype)


def _batch_index(b: Expr, batch_shape: tuple[int, ...]) -> list:
    index = []
    remaining = b
    for size in reversed(batch_shape):
        index.append(K.binary("rem", remaining, _i(size)))
        remaining = K.binary("div", remaining, _i(size))
    return list(reversed(index))


def _at(b: Expr, i: Expr, j: Expr, rows: int, cols: int) -> Expr:
    return (b * _i(rows) + i) * _i(cols) + j


def _triangular_solve(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Forward or back substitution: op(a) x = b (left side) or x op(a) = b, brought to
    T y = c for a triangular T as the reference does."""
    a, b_var = eqn.invars
    (out,) = outputs
    p = eqn.params
    *batch_shape, rows, cols = b_var.aval.shape
    m = a.aval.shape[-1]
    dtype = compute_dtype(out.dtype)
    right_side = not p["left_side"]
    flip = p["transpose_a"] ^ right_side
    lower = p["lower"] ^ p["transpose_a"] ^ right_side
    right_count = cols if p["left_side"] else rows
    batch = math.prod(batch_shape)

    def per_matrix(b: Expr) -> list:
        def t(i: Expr, k: Expr) -> Expr:
            return _read(builder, a, b, k, i, dtype) if flip else _read(builder, a, b, i, k, dtype)

        def y_offset(i: Expr, j: Expr) -> Expr:
            return _at(b, i, j, rows, cols) if p["left_side"] else _at(b, j, i, rows, cols)

        def c(i: Expr, j: Expr) -> Expr:
            index = (i, j) if p["left_side"] else (j, i)
            return _read(builder, b_var, b, *index, dtype)

        step, j, k = K.fresh_index(), K.fresh_index(), K.fresh_index()
        i = step if lower else K.binary("sub", _i(m - 1), step)
        total = K.fresh_acc(dtype)
        known = K.binary("lt", k, i) if lower else K.binary("gt", k, i)
        y_k = K.cast(K.Load(out, y_offset(k, j)), dtype)
        product = K.select(known, K.binary("mul", t(i, k), y_k), K.const(0, dtype))
        remainder = K.binary("sub", c(i, j), total.read())
        value = remainder if p["unit_diagonal"] else K.binary("div", remainder, t(i, i))
        return [
            K.Loop(
                step,
                0,
                m,
                [
                    K.Loop(
                        j,
                        0,
                        right_count,
                        [
                            K.SetAcc(total, K.const(0, dtype)),
                            K.Loop(
                                k, 0, m, [K.SetAcc(total, K.binary("add", total.read(), product))]
                            ),
                            K.Store(out, y_offset(i, j), K.cast(value, out.dtype)),
                        ],
                    )
                ],
            )
        ]

    return _batched(batch, per_matrix)


def _cholesky(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Row by row (Cholesky-Banachiewicz), reading the lower triangle; the upper triangle is
    zero. A matrix that is not positive definite gets NaN everywhere, as the reference."""
    (a,) = eqn.invars
    (out,) = outputs
    *batch_shape, n, _ = a.aval.shape
    dtype = compute_dtype(out.dtype)
    batch = math.prod(batch_shape)

    def per_matrix(b: Expr) -> list:
        i, j, k = K.fresh_index(), K.fresh_index(), K.fresh_index()
        total = K.fresh_acc(dtype)
        failed = K.fresh_acc(K.BOOL, "failed")

        def factor(r: Expr, col: Expr) -> Expr:
            return K.cast(K.Load(out, _at(b, r, col, n, n)), dtype)

        below = K.binary("lt", k, j)
        product = K.select(below, K.binary("mul", factor(i, k), factor(j, k)), K.const(0, dtype))
        v = K.binary("sub", _read(builder, a, b, i, j, dtype), total.read())
        diagonal = K.unary("sqrt", v)
        off_diagonal = K.binary("div", v, factor(j, j))
        value = K.select(
            K.binary("le", j, i),
            K.select(K.binary("eq", i, j), diagonal, off_diagonal),
            K.const(0, dtype),
        )
        # The diagonal must be a positive number (NaN compares false).
        bad = K.unary("not", K.binary("gt", diagonal, K.const(0, dtype)))
        fill_i, fill_j = K.fresh_index(), K.fresh_index()
        nan_or_value = K.select(
            failed.read(), K.const(np.nan, out.dtype), K.Load(out, _at(b, fill_i, fill_j, n, n))
        )
        return [
            K.SetAcc(failed, K.const(False, K.BOOL)),
            K.Loop(
                i,
                0,
                n,
                [
                    K.Loop(
                        j,
                        0,
                        n,
                        [
                            K.SetAcc(total, K.const(0, dtype)),
                            K.Loop(
                                k, 0, n, [K.SetAcc(total, K.binary("add", total.read(), product))]
                            ),
                            K.SetAcc(
                                failed,
                                K.binary(
                                    "or", failed.read(), K.binary("and", K.binary("eq", i, j), bad)
                                ),
                            ),
                            K.Store(out, _at(b, i, j, n, n), K.cast(value, out.dtype)),
                        ],
                    )
                ],
            ),
            K.Loop(
                fill_i,
                0,
                n,
                [K.Loop(fill_j, 0, n, [K.Store(out, _at(b, fill_i, fill_j, n, n), nan_or_value)])],
            ),
        ]

    return _batched(batch, per_matrix)


def _lu(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Gaussian elimination with partial pivoting (the first largest |pivot| in each column),
    row swaps applied to the whole row; a zero pivot leaves its column as it is."""
    (a,) = eqn.invars
    lu, pivots, permutation = outputs
    *batch_shape, m, n = a.aval.shape
    steps = min(m, n)
    dtype = compute_dtype(lu.dtype)
    batch = math.prod(batch_shape)

    def per_matrix(b: Expr) -> list:
        def at(r: Expr, c: Expr) -> Expr:
            return _at(b, r, c, m, n)

        def value(r: Expr, c: Expr) -> Expr:
            return K.cast(K.Load(lu, at(r, c)), dtype)

        i, c = K.fresh_index(), K.fresh_index()
        statements = [
            K.Loop(
                i,
                0,
                m,
                [
                    K.Loop(
                        c,
                        0,
                        n,
                        [
                            K.Store(
                                lu,
                                at(i, c),
                                builder.element(a, [*_batch_index(b, tuple(batch_shape)), i, c]),
                            )
                        ],
                    ),
                    K.Store(permutation, b * _i(m) + i, K.cast(i, permutation.dtype)),
                ],
            )
        ]
        j = K.fresh_index("col")
        # Pivot search over rows j..m-1.
        r = K.fresh_index()
        best, best_at = K.fresh_acc(dtype, "best"), K.fresh_acc(INDEX, "best_at")
        candidate = K.unary("abs", value(r, j))
        better = K.binary("and", K.binary("ge", r, j), K.binary("gt", candidate, best.read()))
        first = K.binary("eq", r, j)
        take = K.binary("or", first, better)
        moves = K.fresh_acc(K.BOOL, "moves")
        search = [
            K.SetAcc(best, K.const(0, dtype)),
            K.SetAcc(best_at, j),
            K.Loop(
                r,
                0,
                m,
                [
                    K.SetAcc(moves, take),
                    K.SetAcc(best, K.select(moves.read(), candidate, best.read())),
                    K.SetAcc(best_at, K.select(moves.read(), r, best_at.read())),
                ],
            ),
            K.Store(pivots, b * _i(steps) + j, K.cast(best_at.read(), pivots.dtype)),
        ]
        # Swap rows j and best_at (a no-op when they are equal).
        p = best_at.read()
        swap_c = K.fresh_index()
        held = K.fresh_acc(lu.dtype, "held")
        swap = [
            K.Loop(
                swap_c,
                0,
                n,
                [
                    K.SetAcc(held, K.Load(lu, at(j, swap_c))),
                    K.Store(lu, at(j, swap_c), K.Load(lu, at(p, swap_c))),
                    K.Store(lu, at(p, swap_c), held.read()),
                ],
            ),
        ]
        held_row = K.fresh_acc(permutation.dtype, "held_row")
        swap += [
            K.SetAcc(held_row, K.Load(permutation, b * _i(m) + j)),
            K.Store(permutation, b * _i(m) + j, K.Load(permutation, b * _i(m) + p)),
            K.Store(permutation, b * _i(m) + p, held_row.read()),
        ]
        # Scale the column below the pivot, then update the trailing block.
        pivot = K.fresh_acc(dtype, "pivot")
        nonzero = K.binary("ne", pivot.read(), K.const(0, dtype))
        below_r = K.fresh_index()
        is_below = K.binary("gt", below_r, j)
        scaled = K.select(
            K.binary("and", is_below, nonzero),
            K.binary("div", value(below_r, j), pivot.read()),
            value(below_r, j),
        )
        scale = [
            K.SetAcc(pivot, value(j, j)),
            K.Loop(below_r, 0, m, [K.Store(lu, at(below_r, j), K.cast(scaled, lu.dtype))]),
        ]
        ur, uc = K.fresh_index(), K.fresh_index()
        inside = K.binary("and", K.binary("gt", ur, j), K.binary("gt", uc, j))
        updated = K.select(
            inside,
            K.binary("sub", value(ur, uc), K.binary("mul", value(ur, j), value(j, uc))),
            value(ur, uc),
        )
        update = [
            K.Loop(
                ur, 0, m, [K.Loop(uc, 0, n, [K.Store(lu, at(ur, uc), K.cast(updated, lu.dtype))])]
            )
        ]
        statements.append(K.Loop(j, 0, steps, search + swap + scale + update))
        return statements

    return _batched(batch, per_matrix)


root_rules[PRIMITIVES["triangular_solve"]] = _triangular_solve
root_rules[PRIMITIVES["cholesky"]] = _cholesky
root_rules[PRIMITIVES["lu"]] = _lu
