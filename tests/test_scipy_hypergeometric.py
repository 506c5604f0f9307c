"""hyp1f1 and hyp2f1 over broad parameter ranges: each value within 1e-10 of mpmath's (at
high precision) or NaN, never a finite wrong number; the regressions found by sweeping a,
b, c over [-500, 500] (negative integers and near-integers included) and x over the domain.

mpmath's own value is checked at two precisions: its hypergeometric functions lose digits
to cancellation too (2F1(306, -0.54; -476.5; 0.43) is 9.4e240, mpmath says 1.14 at 50
digits), and a point where the two disagree says nothing about ours."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.scipy.special as fs
from tests.checks import jit_backend

RTOL = 1e-10
# Of parameters drawn over [-500, 500] (x over [-1000, 1000] for hyp1f1) these samples
# have 88% of hyp2f1's values and 73% of hyp1f1's computed, the rest NaN: below these
# something was lost.
COVERAGE_2F1, COVERAGE_1F1 = 0.8, 0.65


def _exact(f, *args, digits=(30, 120)):
    """f at two precisions (digits, more by as many as the smallest argument has zeros after
    the point: mpmath's 2F1(-57, 8.8e-177; 1; -879) is 1 at 120 digits, 1 + 1.06e-10 at
    400); None where the two disagree."""
    tiny = min([abs(float(a)) for a in args if a != 0] + [1.0])
    extra = max(0, -int(np.floor(np.log10(tiny))))
    digits = (digits[0] + extra, digits[1] + extra)
    args = [mp.mpf(float(a)) for a in args]
    with mp.workdps(digits[0]):
        low = f(*args)
    with mp.workdps(digits[1]):
        high = f(*args)
    if isinstance(high, mp.mpc) or isinstance(low, mp.mpc):
        return None
    if abs(high - low) > mp.mpf(10) ** -20 * abs(high):
        return None
    return high


def _assert_accurate_or_nan(got, want, what, dtype=np.float64):
    """got within RTOL of want (inf where want is past dtype's range, about 0 below it), or
    NaN."""
    got = float(got)
    if np.isnan(got):
        return
    finfo = np.finfo(dtype)
    size = abs(want)
    if size > finfo.max:
        assert np.isinf(got) and np.sign(got) == mp.sign(want), (what, got, want)
    elif size < 100 * finfo.tiny:
        assert abs(got) < 1000 * finfo.tiny, (what, got, want)
    else:
        rtol = RTOL if dtype == np.float64 else 4 * finfo.eps
        assert abs(got - float(want)) <= rtol * float(size), (what, got, float(want))


# (a, b, c, x): values that were finite and wrong, by up to 1e240 relative, in float64
HYP2F1_REGRESSIONS = [
    (2.0, -366.0, 0.12, 0.9),  # -1e90 in float64, -inf in float32: 1.539e-5
    (-500.0, -298.5, -99.5, -0.5428300837084776),
    (38.194755159967286, -3.0, 421.0, -130038144.74799348),
    (-210.78985618105327, 311.9999999999923, 46.62441397040679, 0.999999),
    (378.5, -25.80252012594161, -0.1717226301615573, -6.037524914654149),
    (136.77890806101186, 303.00000502976167, 40.860797964577756, -10.494940023121258),
    (306.0000000200996, -0.5407101321671812, -476.5, 0.4309879261111909),
    (-500.0, 205.99999999973582, -0.8840410054985257, 0.7840881274561002),
    (200.0, -10.0, 26.0, 0.6808640412218205),
    (2.5, 2.5, 1.5, -1e6),
]
# the ones above that are now computed, not NaN
HYP2F1_COMPUTED = [0, 2, 3, 4, 5, 6, 8, 9]

# (a, b, x)
HYP1F1_REGRESSIONS = [
    (4.4474045787191745, 461.0, 200.0),  # 12.37, was 1.3e62
    (-2.5389273713755456, 491.99999694825783, 200.0),
    (129.0, 457.00000559181353, -245.7070145215443),
    (-200.0, -499.5, -672.4326200070752),
    (-159.00000000000122, -463.0000000000254, 500.0),
    (1.0, 215.5, 70.69815671938898),  # an asymptotic expansion far outside its range
    (-300.5, 10.0, 500.0),  # 1.9e89, was -0.8
    (-500.0, 0.43600032987461423, 377.45404532977795),
    (428.0, 89.0, -500.0),
    (-20.0, -0.3353528536253203, 2.1477296828743833),  # by the recurrence in a
    (-33.85409606339415, -0.8396483098459251, 2.985727463144559),
    (-448.5, 107.9, 81.08),
    (39.198915978546324, 2.9943936658660757, -50.0),  # -1.1e-15: its recurrence is unstable
]
HYP1F1_COMPUTED = [0, 1, 2, 3, 4, 5, 9, 10, 11]


def test_hyp2f1_regressions_are_accurate_or_nan():
    a, b, c, x = (np.array(column) for column in zip(*HYP2F1_REGRESSIONS))
    got = np.asarray(fs.hyp2f1(a, b, c, x))
    for row, value in zip(HYP2F1_REGRESSIONS, got):
        _assert_accurate_or_nan(value, _exact(mp.hyp2f1, *row, digits=(120, 250)), row)
    assert np.isfinite(got[HYP2F1_COMPUTED]).all()
    narrow = fs.hyp2f1(*(np.float32(v) for v in HYP2F1_REGRESSIONS[0]))
    assert narrow.dtype == np.float32
    want = _exact(mp.hyp2f1, *(np.float32(v) for v in HYP2F1_REGRESSIONS[0]))
    _assert_accurate_or_nan(narrow, want, "float32", np.float32)


def test_hyp1f1_regressions_are_accurate_or_nan():
    a, b, x = (np.array(column) for column in zip(*HYP1F1_REGRESSIONS))
    got = np.asarray(fs.hyp1f1(a, b, x))
    for row, value in zip(HYP1F1_REGRESSIONS, got):
        _assert_accurate_or_nan(value, _exact(mp.hyp1f1, *row, digits=(120, 250)), row)
    assert np.isfinite(got[HYP1F1_COMPUTED]).all()


def test_regressions_compiled_agree_with_eager():
    # (the NumPy backend runs the same program as the compiled ones, without their
    # compile time)
    a, b, c, x = (np.array(column) for column in zip(*HYP2F1_REGRESSIONS))
    with jit_backend("numpy"):
        compiled = fg.jit(fs.hyp2f1)(a, b, c, x)
        compiled_1f1 = fg.jit(fs.hyp1f1)(*(np.array(c) for c in zip(*HYP1F1_REGRESSIONS)))
    np.testing.assert_array_equal(np.asarray(compiled), np.asarray(fs.hyp2f1(a, b, c, x)))
    eager_1f1 = fs.hyp1f1(*(np.array(c) for c in zip(*HYP1F1_REGRESSIONS)))
    np.testing.assert_array_equal(np.asarray(compiled_1f1), np.asarray(eager_1f1))


def _large_parameters(rng, size):
    """Parameters over [-500, 500]: whole numbers (negative ones end series), numbers within
    1e-12 to 1e-3 of them, halves, and others."""
    whole = rng.integers(-500, 501, size).astype(float)
    near = whole + rng.choice([-1, 1], size) * 10.0 ** rng.uniform(-12, -3, size)
    kinds = [whole, near, whole + 0.5, rng.uniform(-500, 500, size), rng.uniform(-10, 10, size)]
    return np.choose(rng.integers(0, len(kinds), size), kinds)


def test_hyp2f1_large_parameters_are_accurate_or_nan():
    # (one call for all: a loop runs as long as its slowest lane)
    rng = np.random.default_rng(0)
    size = 48
    a, b, c = (_large_parameters(rng, size) for _ in range(3))
    x = np.choose(
        rng.integers(0, 4, size),
        [
            rng.uniform(-1, 0.9, size),
            -(10.0 ** rng.uniform(0, 8, size)),
            1 - 10.0 ** rng.uniform(-12, -1, size),
            rng.uniform(0.5, 1, size),
        ],
    )
    got = np.asarray(fs.hyp2f1(a, b, c, x))
    for row, value in zip(zip(a, b, c, x), got):
        want = _exact(mp.hyp2f1, *row)
        if want is not None and mp.isfinite(want):
            _assert_accurate_or_nan(value, want, row)
    assert (~np.isnan(got)).mean() > COVERAGE_2F1


def test_hyp1f1_large_parameters_are_accurate_or_nan():
    rng = np.random.default_rng(1)
    size = 48
    a, b = _large_parameters(rng, size), _large_parameters(rng, size)
    x = np.choose(
        rng.integers(0, 2, size), [rng.uniform(-1000, 1000, size), rng.uniform(-50, 50, size)]
    )
    got = np.asarray(fs.hyp1f1(a, b, x))
    pole = (b <= 0) & (b == np.floor(b))
    assert np.isnan(got[pole]).all()
    for row, value in zip(zip(a[~pole], b[~pole], x[~pole]), got[~pole]):
        want = _exact(mp.hyp1f1, *row)
        if want is not None and mp.isfinite(want):
            _assert_accurate_or_nan(value, want, row)
    assert (~np.isnan(got[~pole])).mean() > COVERAGE_1F1


def _ends_before_pole(a, b, c):
    """a or b a whole number -m <= 0 with m <= -c: the series ends before c's pole."""
    degrees = [-p for p in (a, b) if p <= 0 and p == np.floor(p)]
    return bool(degrees) and min(degrees) <= -c


def _parameter():
    """Parameters up to 60 in size, where the transformations keep (nearly) all values."""
    whole = st.integers(-60, 60).map(float)
    near_whole = st.tuples(st.integers(-60, 60), st.sampled_from([-1, 1]), st.floats(-12, -2)).map(
        lambda t: t[0] + t[1] * 10.0 ** t[2]
    )
    return st.one_of(
        whole,
        near_whole,
        st.floats(-10, 10),
        st.floats(-60, 60),
        st.integers(-60, 60).map(lambda n: n + 0.5),
    )


def _gauss_argument():
    return st.one_of(
        st.floats(-1, 0.999),
        st.floats(-1e8, -1),
        st.floats(-12, -1).map(lambda e: 1 - 10.0**e),
        st.floats(-4, 0).map(lambda e: -(10.0**e)),
    )


@given(
    st.lists(
        st.tuples(_parameter(), _parameter(), _parameter(), _gauss_argument()),
        min_size=3,
        max_size=3,
    )
)
def test_hyp2f1_is_accurate_or_nan(rows):
    a, b, c, x = (np.array(column) for column in zip(*rows))
    got = np.asarray(fs.hyp2f1(a, b, c, x))
    for (p, q, r, y), value in zip(rows, got):
        if r <= 0 and r == np.floor(r) and y != 0 and not _ends_before_pole(p, q, r):
            assert np.isinf(value)  # c at a pole (as SciPy's and JAX's)
            continue
        want = _exact(mp.hyp2f1, p, q, r, y)
        if want is not None and mp.isfinite(want):
            _assert_accurate_or_nan(value, want, (p, q, r, y))


@given(
    st.lists(
        st.tuples(
            _parameter(),
            _parameter(),
            st.one_of(st.floats(-300, 300), st.floats(-3, 3).map(lambda e: 10.0**e)),
        ),
        min_size=3,
        max_size=3,
    )
)
def test_hyp1f1_is_accurate_or_nan(rows):
    a, b, x = (np.array(column) for column in zip(*rows))
    got = np.asarray(fs.hyp1f1(a, b, x))
    for (p, q, y), value in zip(rows, got):
        if q <= 0 and q == np.floor(q) and y != 0:
            assert np.isnan(value)
            continue
        want = _exact(mp.hyp1f1, p, q, y)
        if want is not None and mp.isfinite(want):
            _assert_accurate_or_nan(value, want, (p, q, y))


def test_derivatives_at_large_parameters():
    # 2F1(2, -366; 0.12; x) at 0.9 is computed by Euler's transformation: its slope in x,
    # (a b / c) 2F1(3, -365; 1.12; x), by another (both keep their digits there)
    args = (2.0, -366.0, 0.12, np.float64(0.9))
    slope = fg.grad(fs.hyp2f1, argnums=3)(*args)
    want = 2 * -366 / 0.12 * _exact(mp.hyp2f1, 3, -365, 1.12, 0.9)
    np.testing.assert_allclose(float(slope), float(want), rtol=1e-10)
    # 1F1(-33.85, -0.84; 2.99) by the recurrence in a; its slope in x, (a / b) 1F1(a + 1;
    # b + 1; x), by it too
    args = (-33.85409606339415, -0.8396483098459251, np.float64(2.985727463144559))
    slope = fg.grad(fs.hyp1f1, argnums=2)(*args)
    want = args[0] / args[1] * _exact(mp.hyp1f1, args[0] + 1, args[1] + 1, args[2])
    np.testing.assert_allclose(float(slope), float(want), rtol=1e-10)
    batched = fg.vmap(fs.hyp2f1, in_axes=(None, None, None, 0))(
        2.0, -366.0, 0.12, np.array([0.3, 0.9])
    )
    looped = [float(fs.hyp2f1(2.0, -366.0, 0.12, np.float64(t))) for t in (0.3, 0.9)]
    np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-15)


@pytest.mark.parametrize(
    "args, want",
    [
        ((np.nan, 2.0, 3.0, 0.5), np.nan),  # NaN in, NaN out
        ((1.0, 2.0, -3.0, 0.5), np.inf),  # c at a pole
        ((1.0, 2.0, 3.0, 1.5), np.inf),  # beyond x = 1
        ((1.0, 2.0, 3.5, 1.0), 5.0),  # Gauss's sum
    ],
)
def test_hyp2f1_edges(args, want):
    got = float(fs.hyp2f1(*(np.float64(v) for v in args)))
    np.testing.assert_allclose(got, want, rtol=1e-14)
