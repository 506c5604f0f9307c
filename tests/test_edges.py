"""Innermost loops split where their comparisons change (`compiler/edges.py`): a pad's, a
concatenation's and a comparison of an index with a threshold's kernels hold loops whose
bodies no longer compare, and every value equals NumPy's, for comparisons of the index or its
negation, each way, at thresholds in and out of the loop's range."""

from __future__ import annotations

import re

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp

rng = np.random.default_rng(0)


def kernels(f, *args):
    with jit_backend("llvm"):
        compiled = fg.jit(f).lower(*args).compile()
        got = np.asarray(compiled(*args))
    texts = [step.kernel.as_text() for step in compiled.executable.program.steps]
    return got, texts


def innermost_loops(text: str) -> list[str]:
    """Each innermost loop of a kernel's text: its header and body lines."""
    lines = text.splitlines()
    loops = []
    for k, line in enumerate(lines):
        if line.lstrip().startswith("for "):
            depth = len(line) - len(line.lstrip())
            body = []
            for following in lines[k + 1 :]:
                if len(following) - len(following.lstrip()) <= depth:
                    break
                body.append(following)
            if not any(b.lstrip().startswith("for ") for b in body):
                loops.append("\n".join([line, *body]))
    return loops


def test_a_pad_writes_zeros_and_copies_in_loops_of_their_own():
    """Large enough to run on the pool's threads, its rows split among them."""
    x = rng.standard_normal((300, 260)).astype(np.float32)
    got, (text,) = kernels(lambda a: fnp.pad(a, ((3, 2), (5, 7))), x)
    np.testing.assert_array_equal(got, np.pad(x, ((3, 2), (5, 7))))
    loops = innermost_loops(text)
    assert [re.search(r"in \[(\d+), (\d+)\)", loop).groups() for loop in loops] == [
        ("0", "5"),
        ("5", "265"),
        ("265", "272"),
    ]
    assert "select" not in loops[0] and "select" not in loops[2]
    inner = loops[1].splitlines()[0].split()[1]  # the middle loop's index
    assert not re.search(rf"(ge|lt)\(sub\({inner},", loops[1])


def test_a_concatenation_reads_each_operand_in_its_own_loop():
    x = rng.standard_normal((64, 300)).astype(np.float32)

    def f(a):
        return fnp.concatenate([a[:, :100], a[:, 100:] * 2, a[:, :50] + 1], axis=1)

    got, (text,) = kernels(f, x)
    np.testing.assert_allclose(got, np.concatenate([x[:, :100], x[:, 100:] * 2, x[:, :50] + 1], 1))
    loops = innermost_loops(text)
    assert len(loops) == 3 and not any("select" in loop for loop in loops)


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "min", "max"])
@settings(deadline=None)
@given(
    length=st.integers(64, 300),
    threshold=st.integers(-20, 320),
    negated=st.booleans(),
    shift=st.integers(-10, 10),
)
def test_comparisons_of_the_index_split_exactly_where_they_change(
    length, threshold, op, negated, shift
):
    """select(op(±i + shift, threshold), x, y) and min/max of the same, along the inner axis
    of a 3 x length array: values as NumPy's."""
    x = rng.standard_normal((3, length)).astype(np.float32)
    sign = -1 if negated else 1

    def f(xp):
        def compute(a):
            i = sign * xp.arange(length) + shift
            if op in ("min", "max"):
                picked = getattr(xp, "minimum" if op == "min" else "maximum")(i, threshold)
                return a * picked.astype(a.dtype)
            compare = {"lt": i < threshold, "le": i <= threshold, "gt": i > threshold}
            holds = compare.get(op, i >= threshold)
            return xp.where(holds, a, -a)

        return compute

    got, _ = kernels(f(fnp), x)
    np.testing.assert_array_equal(got, f(np)(x))


@pytest.mark.parametrize("padding", [((1, 1), (1, 1)), ((0, 2), (3, 0)), ((-1, 2), (2, -3))])
def test_a_padded_input_copy_and_negative_padding(padding):
    x = rng.standard_normal((2, 9, 90)).astype(np.float32)

    def f(a):
        return fg.lax.pad(a, 0.0, ((0, 0, 0), (*padding[0], 0), (*padding[1], 0))) * 3

    got, _ = kernels(f, x)
    want = np.asarray(fg.lax.pad(x, 0.0, ((0, 0, 0), (*padding[0], 0), (*padding[1], 0)))) * 3
    np.testing.assert_array_equal(got, want)
