"""A compiled loop's carries updated where the loop keeps them (`donation.carries_in_place`):
the body writes a carry into its own memory wherever every read of the old value comes first
(or reads the very element it then writes), and the loop copies nothing back; elsewhere the
carry keeps its copy. Against the NumPy reference backend, on bodies that read their carries
crosswise, reversed, rolled, reduced, passed through, in nested loops and transforms."""

from __future__ import annotations

import re

import numpy as np
import pytest
from checks import jit_backend

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax

rng = np.random.default_rng(0)
A = rng.standard_normal((16, 32)).astype(np.float32)
B = rng.standard_normal((16, 32)).astype(np.float32)
W = rng.standard_normal((32, 32)).astype(np.float32)


def _row_updates(c, i):
    row = c[(i + 1) % 16][None] + i.astype(fnp.float32)
    return lax.dynamic_update_slice(c, row, (i, 0)), c.sum()


BODIES = {
    "swapped": lambda a, b: lax.fori_loop(0, 5, lambda i, c: (c[1] * 1.5, c[0] + 1.0), (a, b)),
    "rolled": lambda a, b: lax.fori_loop(0, 5, lambda i, c: fnp.roll(c, 1, axis=1) + 1.0, a),
    "reversed": lambda a, b: lax.fori_loop(0, 5, lambda i, c: c[::-1] * 2.0, a),
    "plus its sum": lambda a, b: lax.fori_loop(0, 5, lambda i, c: c + c.sum() * 0.01, a),
    "transposed": lambda a, b: lax.fori_loop(0, 5, lambda i, c: c.T * 0.5 + 1.0, a[:, :16]),
    "row updates": lambda a, b: lax.scan(_row_updates, a, fnp.arange(16)),
    "old carry as y": lambda a, b: lax.scan(lambda c, x: (c * 2.0 + x, c), a[0], a),
    "old rows as ys": lambda a, b: lax.scan(
        lambda c, i: (c.at[i].add(c[(i + 1) % 16]), (c[i] * 2.0, c.sum())), a, fnp.arange(16)
    ),
    "while reading the old carry last": lambda a, b: lax.while_loop(
        lambda c: c[2] < 5, lambda c: (c[0] * 1.5 + 1.0, c[0][::-1] + c[1], c[2] + 1), (a, b, 0)
    ),
    "new carry as y": lambda a, b: lax.scan(lambda c, x: (c * 2.0 + x, c * 2.0 + x), a[0], a),
    "passed through": lambda a, b: lax.fori_loop(0, 5, lambda i, c: (c[0], c[1] + c[0]), (a, b)),
    "read crosswise": lambda a, b: lax.fori_loop(
        0, 4, lambda i, c: (c[0] + c[1][::-1], c[1] + c[0]), (a, b)
    ),
    "while": lambda a, b: lax.while_loop(
        lambda c: c[0].sum() < 1e4, lambda c: (c[0] * 1.1 + 1.0, c[1] + 1), (a, 0)
    ),
    "gemm updates": lambda a, b: lax.fori_loop(
        0, 5, lambda i, w: w - 0.01 * (a.T @ (a @ w)), fnp.asarray(W)
    ),
    "windows clamped at either end": lambda a, b: lax.fori_loop(
        0, 6, lambda i, c: lax.dynamic_update_slice(c, c[:3, :5] * 0.5, (i * 4 - 6, 30 - i)), a
    ),
    "windows from themselves": lambda a, b: lax.fori_loop(
        0,
        8,
        lambda i, c: lax.dynamic_update_slice(
            c, lax.dynamic_slice(c, (i, 2), (2, 4)) * 2.0 + c[i + 1, 3], (i, 2)
        ),
        a,
    ),
    "row set from itself": lambda a, b: lax.fori_loop(
        0, 16, lambda i, c: c.at[i].set(c[(i + 3) % 16] * 2.0 + c[i]), a
    ),
    "scatter adds, repeated places": lambda a, b: lax.fori_loop(
        0, 6, lambda i, c: c.at[fnp.array([1, 1, 5]) * i % 16].add(c[0] + 1.0), a
    ),
    "scatter mul and max": lambda a, b: lax.fori_loop(
        0, 6, lambda i, c: (c[0].at[i, :4].mul(c[1][i, :4]), c[1].at[:, i].max(c[0][:, i])), (a, b)
    ),
    "places out of bounds dropped": lambda a, b: lax.fori_loop(
        0, 4, lambda i, c: c.at[i * 9].set(c[i], mode="drop"), a
    ),
    "scatter in a while": lambda a, b: lax.while_loop(
        lambda c: c[1] < 7, lambda c: (c[0].at[c[1]].add(c[0][c[1] + 1]), c[1] + 1), (a, 0)
    ),
    "cond updating in place": lambda a, b: lax.fori_loop(
        0,
        16,
        lambda i, c: lax.cond(i % 3 == 0, lambda c: c.at[i].set(c[i] * 2.0), lambda c: c, c),
        a,
    ),
    "cond with a branch reading reversed": lambda a, b: lax.fori_loop(
        0, 5, lambda i, c: lax.cond(i % 2 == 0, lambda c: c[::-1] + 1.0, lambda c: c * 2.0, c), a
    ),
    "cond reading the carry twice": lambda a, b: lax.fori_loop(
        0, 5, lambda i, c: lax.cond(i > 2, lambda x, y: x + y[0], lambda x, y: x * 2.0, c, c), a
    ),
    "switch on the carry": lambda a, b: lax.fori_loop(
        0,
        6,
        lambda i, c: lax.switch(
            (c[0, 0] > 0).astype(fnp.int32) + i % 2,
            [lambda c: c + 1.0, lambda c: c.at[0].add(-3.0), lambda c: c * 0.5],
            c,
        ),
        a,
    ),
    "nested": lambda a, b: lax.fori_loop(
        0, 3, lambda i, c: lax.fori_loop(0, 3, lambda j, d: d[::-1] + 1.0, c) * 0.5, a
    ),
    "grad of a scan": lambda a, b: fg.grad(
        lambda a: lax.scan(lambda c, x: (fnp.sin(c) * x, c.sum()), a[0], a)[1].sum()
    )(a),
    "vmap of a scan": lambda a, b: fg.vmap(
        lambda r: lax.scan(lambda c, x: (c[::-1] + x, c[0]), r[0], r)[0]
    )(a.reshape(4, 4, 32)),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_loops_agree_with_the_reference(name):
    f = BODIES[name]
    with jit_backend("numpy"):
        expected = fg.tree_util.tree_leaves(fg.jit(f)(A, B))
    with jit_backend("llvm"):
        got = fg.tree_util.tree_leaves(fg.jit(f)(A, B))
    for e, g in zip(expected, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-5)


def _carry_copies(f, *args) -> int:
    """How many copies of a 256x256 float32 carry the program's code makes."""
    with jit_backend("llvm"):
        ir = fg.jit(f).lower(*args).compile().executable.ir
    return len(re.findall(r"call void @llvm\.memcpy[^\n]*i64 262144,", ir))


def test_a_carry_updated_in_place_is_copied_only_into_the_loop():
    carry = np.zeros((256, 256), np.float32)

    def row_by_row(c):
        def put(c, i):
            return lax.dynamic_update_slice(c, fnp.full((1, 256), i, fnp.float32), (i, 0)), None

        return lax.scan(put, c, fnp.arange(256))[0]

    assert _carry_copies(row_by_row, carry) == 1  # the initial value, before the loop

    # So does a scatter reading what it updates: its updates are made apart first.
    def scattered(c):
        return lax.fori_loop(0, 256, lambda i, c: c.at[i].set(c[i] * 2), c)

    assert _carry_copies(scattered, carry) == 1

    def conditional(c):
        def body(i, c):
            return lax.cond(i % 2 == 0, lambda c: c.at[i].set(c[i] * 2), lambda c: c, c)

        return lax.fori_loop(0, 256, body, c)

    assert _carry_copies(conditional, carry) == 1  # and the cond's branches write it in place

    # So does a body reading the old carry after the step writing the new one, by running
    # the reading kernel first (`donation.carry_readers_first`).
    def old_rows_out(c):
        return lax.scan(lambda c, i: (c.at[i].add(1.0), c[i] * 2.0), c, fnp.arange(256))[1]

    assert _carry_copies(old_rows_out, carry) == 1
    # A body reading its carry at other places than it writes keeps the copy back.
    assert _carry_copies(lambda c: lax.fori_loop(0, 3, lambda i, c: c[::-1] + 1.0, c), carry) == 2


def test_a_branch_returning_its_operand_in_place_runs_nothing():
    """A cond whose result lives in its operand's memory: the branch returning the operand
    unchanged copies it onto itself, which renders as no kernel at all."""
    carry = np.zeros((256, 256), np.float32)

    def conditional(c):
        def body(i, c):
            return lax.cond(i % 2 == 0, lambda c: c.at[i].set(c[i] * 2), lambda c: c, c)

        return lax.fori_loop(0, 256, body, c)

    with jit_backend("llvm"):
        executable = fg.jit(conditional).lower(carry).compile().executable
    assert "_copy" in executable.fusion_plan()  # the branch's copy, planned
    assert not re.search(r"define internal void @k\d+_copy", executable.ir)  # and not run
    assert _carry_copies(conditional, carry) == 1


def test_a_donated_array_takes_a_scatter_in_place():
    a = rng.standard_normal((64, 8)).astype(np.float32)
    expected = a.copy()
    expected[3] = expected[3] * 2 + expected[5]
    step = fg.jit(lambda a: a.at[3].set(a[3] * 2 + a[5]), donate_argnums=0)
    with jit_backend("llvm"):
        compiled = step.lower(a).compile()
        assert len(compiled.executable.donated) == 1  # the result lives in the argument
        got = step(fnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_a_donated_array_takes_a_cond_in_place_where_every_branch_may():
    a = rng.standard_normal((64, 8)).astype(np.float32)
    doubled_row = a.copy()
    doubled_row[3] *= 2

    def pointwise(a, flag):
        return lax.cond(flag, lambda a: a.at[3].set(a[3] * 2), lambda a: a + 1.0, a)

    def reversing(a, flag):
        return lax.cond(flag, lambda a: a.at[3].set(a[3] * 2), lambda a: a[::-1], a)

    with jit_backend("llvm"):
        executable = fg.jit(pointwise, donate_argnums=0).lower(a, True).compile().executable
        assert len(executable.donated) == 1
        for flag, expected in ((True, doubled_row), (False, a + 1.0)):
            got = fg.jit(pointwise, donate_argnums=0)(fnp.asarray(a), flag)
            np.testing.assert_array_equal(np.asarray(got), expected)
        for flag, expected in ((True, doubled_row), (False, a[::-1])):
            with pytest.warns(UserWarning, match="donated buffers were not usable"):
                got = fg.jit(reversing, donate_argnums=0)(fnp.asarray(a), flag)
            np.testing.assert_array_equal(np.asarray(got), expected)
