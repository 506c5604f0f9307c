"""i0e, i1e, i0, i1, zeta, polygamma, gammainc, gammaincc and betainc against SciPy in
float64 (and float32), their derivatives against finite differences, and their special
values."""

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.scipy.special as fs
from funcgrad.test_util import check_grads

positive = st.floats(0.05, 60.0)
f64 = np.float64


def relative_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.abs(got - want) / np.maximum(np.abs(want), 1e-300)


@pytest.mark.parametrize("name", ["i0e", "i1e", "i0", "i1"])
def test_bessel_functions_match_scipy(name):
    x = np.concatenate([np.linspace(-60, 60, 2401), [0.0, 1e-9, 29.999, 30.0, 30.001, 600.0]])
    if name in ("i0", "i1"):
        x = x[np.abs(x) <= 60]  # within float32's range
    want = getattr(sc, name)(x)
    assert relative_error(getattr(fs, name)(x), want).max() < 1e-14
    x32 = x.astype(np.float32)
    got32 = np.asarray(getattr(fs, name)(x32))
    assert got32.dtype == np.float32
    want32 = getattr(sc, name)(x32.astype(np.float64)).astype(np.float32)
    assert relative_error(got32, want32).max() < 2e-7


@given(s=st.floats(1.01, 40.0), q=positive)
def test_zeta_matches_scipy(s, q):
    assert relative_error(fs.zeta(f64(s), f64(q)), sc.zeta(s, q)) < 1e-13


def test_zeta_and_polygamma_special_values():
    np.testing.assert_allclose(np.asarray(fs.zeta(f64(2.0))), np.pi**2 / 6, rtol=1e-15)
    assert np.isinf(fs.zeta(1.0, 3.0)) and np.isnan(fs.zeta(0.5, 1.0))
    # (poles at the non-positive integers q, as SciPy's; other negative q need a whole x)
    q = np.array([0.0, -1.0, -3.0])
    np.testing.assert_array_equal(np.asarray(fs.zeta(f64(2.0), q)), sc.zeta(2.0, q))
    assert np.isnan(fs.zeta(2.5, -1.5)) and np.isnan(fs.zeta(0.5, -1.0))
    n = np.arange(6, dtype=np.float64)[:, None]
    x = np.linspace(0.1, 12, 40)[None]
    assert relative_error(fs.polygamma(n, x), sc.polygamma(n.astype(int), x)).max() < 1e-13
    assert np.isnan(fs.polygamma(1.5, 2.0)) and np.isnan(fs.polygamma(-1.0, 2.0))


def test_zeta_at_large_and_infinite_orders_is_its_first_term():
    # The Euler-Maclaurin tail multiplied s (s + 1) ... before dividing by w^2: at s = 1e300
    # that overflowed to 0 * inf = NaN, and at s = inf its s w^(-s-1) was inf * 0.
    q = np.array([0.5, 1.0, 1.5, 2.0, 7.0])
    for s in (1e20, 1e300):
        want = [float(mp.zeta(s, v)) for v in q]
        np.testing.assert_array_equal(np.asarray(fs.zeta(f64(s), q)), want)
    np.testing.assert_array_equal(np.asarray(fs.zeta(f64(np.inf), q)), [np.inf, 1, 0, 0, 0])
    assert np.asarray(fs.zeta(np.float32(np.inf))) == 1
    # whole non-positive q stay poles; other negative q alternate in sign without a limit
    assert np.isinf(fs.zeta(np.inf, -2.0)) and np.isnan(fs.zeta(np.inf, -1.5))
    np.testing.assert_allclose(np.asarray(fs.zeta(f64(300.0), 1.01)), float(mp.zeta(300, 1.01)))


def test_riemann_zeta_below_one_is_continued():
    # zeta(x) was NaN for x < 1 (SciPy continues Riemann's; zeta(x, q) with q stays NaN there).
    x = np.array([0.9, 0.5, 1e-8, 0.0, -1e-8, -0.2, -0.5, -1.0, -1.5, -2.0 + 1e-8, -2.5, -7.0])
    x = np.concatenate([x, [-10.0, -10.0 + 1e-9, -30.5, -171.5, -200.0, -250.5]])
    with mp.workdps(40):
        want = np.array([float(mp.zeta(v)) for v in x])
    for got in (fs.zeta(x), fg.jit(fs.zeta)(x)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)
    assert np.asarray(fs.zeta(np.array([-1e3, -1e300]))).tolist() == [0.0, 0.0]
    assert np.isinf(fs.zeta(-260.5)) and np.isnan(fs.zeta(-np.inf)) and np.isnan(fs.zeta(0.5, 1.0))
    np.testing.assert_allclose(np.asarray(fs.zeta(np.float32(-1.0))), -1 / 12, rtol=1e-7)
    for at in (0.5, -0.1, -2.0, -7.3):  # (-2 a trivial zero, with a slope)
        check_grads(fs.zeta, (f64(at),), order=1)


def test_zeta_and_polygamma_at_negative_arguments():
    # A whole order x makes every term (q + k)^-x real: these were NaN (SciPy sums them).
    q = np.array([-1e-3, -0.5, -0.57, -0.999, -5.3, -20.5, -1000.3])
    for s in (2.0, 3.0, 6.0):
        assert relative_error(fs.zeta(f64(s), q), sc.zeta(s, q)).max() < 1e-12
    n = np.arange(4, dtype=np.float64)[:, None]
    assert relative_error(fs.polygamma(n, q), sc.polygamma(n.astype(int), q)).max() < 1e-12
    # psi''(x) = psi''(1 - x) at half-integers (the reflection's cot'' vanishes there); SciPy's
    # direct sum loses three digits this far left.
    far = fs.polygamma(f64(2.0), f64(-1e6 - 0.5))
    assert relative_error(far, fs.polygamma(f64(2.0), f64(1e6 + 1.5))) < 1e-13
    check_grads(lambda q: fs.zeta(f64(3.0), q), (f64(-2.3),), order=1)


def _lower_gamma_by_series(a: float, x: float) -> float:
    """P(a, x) = x^a e^-x / Gamma(a + 1) sum_n x^n / ((a + 1) ... (a + n)) in 40 digits."""
    with mp.workdps(40):
        a, x = mp.mpf(a), mp.mpf(x)
        term = total = mp.mpf(1)
        n = 0
        while term > total * mp.mpf(10) ** -35:
            n += 1
            term *= x / (a + n)
            total += term
        return float(mp.exp(a * mp.log(x) - x - mp.loggamma(a + 1)) * total)


def test_incomplete_gamma_at_large_shapes():
    # Near x = a the series and the continued fraction need ~9 sqrt(a) rounds: past a = 3e6
    # they stopped short (P(1e8, 1e8) was 0.19), and their prefactor's a log(a) cancellation
    # left P(1e6, 1e6) 6e-7 off. Temme's expansion takes over from a = 1000.
    a = 1e6
    for x in (a, a - 4e3, a + 3e3, a - 300):
        want = _lower_gamma_by_series(a, x)
        assert relative_error(fs.gammainc(f64(a), f64(x)), want) < 1e-14
        assert relative_error(fs.gammaincc(f64(a), f64(x)), 1 - want) < 1e-12
    for a in (1234.5, 3e4):  # either side of where every x is left to the expansion
        for x in (0.55 * a, 0.9 * a, a + 3 * a**0.5, 1.5 * a):
            want = _lower_gamma_by_series(a, x)
            assert relative_error(fs.gammainc(f64(a), f64(x)), want) < 1e-12
    # Far out: P(a, a) = 1/2 + 1 / (3 sqrt(2 pi a)) + O(a^-3/2) (DLMF 8.12's c_0(0) = -1/3).
    a = 1e12
    np.testing.assert_allclose(fs.gammainc(f64(a), f64(a)), 0.5 + 1 / (3 * (2 * np.pi * a) ** 0.5))
    check_grads(fs.gammainc, (f64(2e4), f64(2e4 + 150)), order=1)


@given(a=st.floats(0.01, 500.0), x=st.floats(0.0, 800.0))
def test_incomplete_gamma_matches_scipy(a, x):
    for name in ("gammainc", "gammaincc"):
        want = getattr(sc, name)(a, x)
        got = getattr(fs, name)(f64(a), f64(x))
        if want > 1e-280:
            assert relative_error(got, want) < 1e-11, name
        else:
            assert float(got) < 1e-270, name


@given(a=st.floats(0.05, 80.0), b=st.floats(0.05, 80.0), x=st.floats(0.0, 1.0))
def test_incomplete_beta_matches_scipy(a, b, x):
    want = sc.betainc(a, b, x)
    got = fs.betainc(f64(a), f64(b), f64(x))
    if want > 1e-280:
        assert relative_error(got, want) < 1e-11
    else:
        assert float(got) < 1e-270


def test_incomplete_functions_edges_and_invalid_arguments():
    np.testing.assert_array_equal(np.asarray(fs.gammainc(2.0, np.array([0.0, np.inf]))), [0.0, 1.0])
    np.testing.assert_array_equal(
        np.asarray(fs.gammaincc(2.0, np.array([0.0, np.inf]))), [1.0, 0.0]
    )
    assert np.isnan(
        np.asarray(fs.gammainc(np.array([0.0, -1.0, 1.0]), np.array([0.0, 1.0, -1.0])))
    ).all()
    # a = 0: the limits SciPy gives (P = 1, Q = 0 for x > 0; NaN at x = 0)
    for name in ("gammainc", "gammaincc"):
        x = np.array([0.0, 1e-300, 2.0, np.inf])
        got = np.asarray(getattr(fs, name)(0.0, x))
        np.testing.assert_array_equal(got, getattr(sc, name)(0.0, x), err_msg=name)
    # a or b = 0: steps, as SciPy's
    a, b = np.array([0.0, 0.0, 0.0, 3.0, 3.0, 3.0, 0.0]), np.array([3, 3, 3, 0, 0, 0, 0.0])
    x = np.array([0.0, 1e-300, 0.5, 0.0, 0.5, 1.0, 0.5])
    np.testing.assert_array_equal(np.asarray(fs.betainc(a, b, x)), sc.betainc(a, b, x))
    np.testing.assert_array_equal(
        np.asarray(fs.betainc(2.0, 3.0, np.array([0.0, 1.0]))), [0.0, 1.0]
    )
    assert np.isnan(np.asarray(fs.betainc(np.array([-1.0, 1.0]), 2.0, np.array([0.5, 1.5])))).all()


def test_incomplete_gamma_at_infinite_shape():
    # P(inf, x) = 0 and Q(inf, x) = 1 for finite x (SciPy's); NaN at x = inf. They were NaN.
    x = np.array([0.0, 2.9, 1e300, np.inf, -1.0])
    for name in ("gammainc", "gammaincc"):
        got = np.asarray(getattr(fs, name)(np.inf, x))
        np.testing.assert_array_equal(got, getattr(sc, name)(np.inf, x), err_msg=name)


def test_betainc_small_past_the_swap():
    # A small b leaves I_x(a, b) small where x is past (a + 1) / (a + b + 2), where it was
    # 1 less a continued fraction near 1: I_0.99(5, 1e-10) kept 5 digits, I_0.88(1.2, 2.3e-12) 4.
    a = np.array([5.0, 1.2, 0.48, 120.0, 4.3, 0.0916, 50.0, 733.0])
    b = np.array([1e-10, 2.3e-12, 1.3e-12, 1.1e-12, 1.1e-12, 1.63e-6, 1e-3, 5.6e-7])
    x = np.array([0.99, 0.88, 0.68, 1 - 1e-6, 1 - 1e-9, 0.943, 0.999, 1 - 1.24e-5])
    with mp.workdps(40):
        want = [float(mp.betainc(p, q, 0, v, regularized=True)) for p, q, v in zip(a, b, x)]
    for f in (fs.betainc, fg.jit(fs.betainc)):
        np.testing.assert_allclose(np.asarray(f(a, b, x)), want, rtol=1e-11)
    check_grads(lambda x: fs.betainc(f64(5.0), f64(1e-3), x), (f64(0.995),), order=1)


def test_betainc_at_infinite_and_huge_shapes():
    # The limits (SciPy's): a = inf is a step at x = 1, b = inf one past x = 0; both: NaN.
    # These were NaN, as were finite shapes past 1e154, whose products in the continued
    # fraction overflowed.
    inf = np.inf
    a = np.array([inf, inf, 1.0, 1.0, inf, 1e300, 2.5, 1e200])
    b = np.array([1.0, 2.0, inf, inf, inf, 1.0, 1e300, 3.0])
    x = np.array([0.3, 1.0, 0.3, 0.0, 0.5, 0.3, 0.3, 0.9])
    np.testing.assert_array_equal(
        np.asarray(fs.betainc(a, b, x)), [0.0, 1.0, 1.0, 0.0, np.nan, 0.0, 1.0, 0.0]
    )
    # a b x = 1e-1 stays a gamma-like tail: I_x(2, b) -> P(2, b x) = 1 - 1.1 e^-0.1
    got = float(fs.betainc(f64(2.0), f64(1e160), f64(1e-161)))
    assert relative_error(got, 1 - 1.1 * np.exp(-0.1)) < 1e-13


def test_betaln_of_large_shapes():
    # lgamma(a) + lgamma(b) - lgamma(a + b) cancelled: betaln(1e300, 1) was 0, betaln(1e15, 3)
    # -108 (for -102.9), and the front factor of betainc(2, 1e20, 1e-21) 1e-40 too small.
    a = np.array([1e300, 1e15, 0.5, 12.0, 2.9e8, 45.7, 9.99, 1e17])
    b = np.array([1.0, 3.0, 1e20, 12.000001, 71.8, 22.4, 1e5, 1e17])
    with mp.workdps(340):  # (a + b exact)
        pairs = [(mp.mpf(p), mp.mpf(q)) for p, q in zip(a, b)]
        logs = [mp.loggamma(p) + mp.loggamma(q) - mp.loggamma(p + q) for p, q in pairs]
        want = [float(v) for v in logs]
    assert relative_error(fs.betaln(a, b), want).max() < 1e-14
    got = float(fs.betainc(f64(2.0), f64(1e20), f64(1e-21)))
    assert relative_error(got, 1 - 1.1 * np.exp(-0.1)) < 1e-13
    assert np.asarray(fs.betaln(np.float32(1e30), np.float32(2.0))).dtype == np.float32
    check_grads(fs.betaln, (f64(30.0), f64(1e6)), order=1)


def test_polygamma_where_its_zeta_underflows():
    # zeta(60, 2e5) is near float64's smallest numbers, n! zeta(n + 1, x) kept 7 digits
    n = np.array([59.0, 30.0, 100.0, 3.0])
    x = np.array([209592.00469420603, 1e9, 50.0, 1e200])
    with mp.workdps(40):
        want = [float(mp.polygamma(int(k), mp.mpf(v))) for k, v in zip(n, x)]
    assert relative_error(fs.polygamma(n, x), want).max() < 1e-12


def test_betainc_of_huge_shapes():
    # x^a y^b / B(a, b) as exp(a log x + b log y - ln B(a, b)) lost about a u of its
    # relative precision: betainc(1e8, 1e8, 0.5) was 0.49999988
    a = np.array([1e6, 1e7, 1e8])
    got = np.asarray(fs.betainc(a, a, np.full(3, 0.5)))
    np.testing.assert_allclose(got, 0.5, rtol=2e-11)
    # (SciPy's, Boost's ibeta: mpmath takes minutes here)
    got = fs.betainc(f64(2e5), f64(6e5), f64(0.2505))
    assert relative_error(got, sc.betainc(2e5, 6e5, 0.2505)) < 1e-11
    # past what the continued fraction converges on within its rounds: NaN, not a number
    assert np.isnan(float(fs.betainc(f64(1e10), f64(1e10), f64(0.5))))


def test_derivatives_match_finite_differences():
    check_grads(fs.gammainc, (f64(2.5), f64(1.7)), order=1)
    check_grads(fs.gammaincc, (f64(0.7), f64(3.1)), order=1)
    check_grads(fs.betainc, (f64(2.0), f64(3.5), f64(0.35)), order=1)
    check_grads(fs.i0e, (f64(3.0),), order=2)
    check_grads(fs.i1e, (f64(-45.0),), order=1)
    check_grads(lambda q: fs.zeta(f64(3.0), q), (f64(2.5),), order=2)
    # The x derivatives are the densities.
    a, x = 3.0, 2.0
    density = x ** (a - 1) * np.exp(-x) / sc.gamma(a)
    np.testing.assert_allclose(fg.grad(fs.gammainc, argnums=1)(f64(a), f64(x)), density, rtol=1e-12)


@pytest.mark.parametrize("name", ["i1", "i1e"])
def test_odd_bessel_derivative_at_zero_is_one_half(name):
    # I1(x) = x/2 + x^3/16 + ...: smooth through 0, where both slopes are 1/2 (the series
    # once took its odd factor as sign(x) |x|, whose derivative at 0 is 0).
    for x in (0.0, -0.0):
        assert float(fg.grad(getattr(fs, name))(f64(x))) == 0.5
        assert float(fg.jacfwd(getattr(fs, name))(f64(x))) == 0.5
    check_grads(getattr(fs, name), (f64(1e-3),), order=2)


def test_shape_derivatives_for_small_shapes():
    """The derivatives in a and b are central differences; below a = 1e-5 the step once
    crossed into a < 0, making them NaN. As a -> 0, dQ/da -> E1(x)."""
    for x in (1.0, 10.0):
        for a in (1e-20, 1e-300):
            slope = float(fg.grad(fs.gammaincc)(f64(a), f64(x)))
            np.testing.assert_allclose(slope, sc.exp1(x), rtol=1e-12)
            np.testing.assert_allclose(float(fg.grad(fs.gammainc)(f64(a), f64(x))), -slope)
    a, h = 1e-6, 1e-8
    expected = (sc.gammaincc(a + h, 0.3) - sc.gammaincc(a - h, 0.3)) / (2 * h)
    np.testing.assert_allclose(float(fg.grad(fs.gammaincc)(f64(a), f64(0.3))), expected, rtol=1e-6)
    for argnum in (0, 1):
        args = [f64(2.0), f64(2.0), f64(0.3)]
        args[argnum] = f64(a)
        shifted = [list(args), list(args)]
        shifted[0][argnum] += h
        shifted[1][argnum] -= h
        expected = (sc.betainc(*shifted[0]) - sc.betainc(*shifted[1])) / (2 * h)
        got = float(fg.grad(fs.betainc, argnums=argnum)(*args))
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_small_shapes_below_x_of_a_plus_one():
    """Below x = a + 1 Q was 1 - P, which rounds away Q's digits as a -> 0 (Q(1e-20, 0.1) was
    1e4 times too large, dQ/da at a = 1e-10 and x = 1 - 1e-12 off by 8e-6); I_x(a, b) near
    1 likewise for its shape derivatives (1.6e-4 off at a = 1e-12). Against mpmath."""
    with mp.workdps(30):  # (not for the modules that run after this one)
        for a in (1e-20, 1e-10, 1e-3, 0.0999):
            for x in (1e-5, 0.1, 0.56, 1 - 1e-12):
                q = float(mp.gammainc(a, x, mp.inf, regularized=True))
                slope = float(
                    mp.diff(lambda s, x=x: mp.gammainc(s, x, mp.inf, regularized=True), a)
                )
                np.testing.assert_allclose(float(fs.gammaincc(f64(a), f64(x))), q, rtol=5e-15)
                got = float(fg.grad(fs.gammainc)(f64(a), f64(x)))
                np.testing.assert_allclose(got, -slope, rtol=1e-8 if a > 1e-5 else 1e-13)
        for argnum, args in ((0, (1e-12, 2.0, 0.5)), (1, (2.0, 1e-12, 0.5))):

            def regularized(s, args=args, argnum=argnum):
                shifted = list(args)
                shifted[argnum] = s
                return mp.betainc(shifted[0], shifted[1], 0, shifted[2], regularized=True)

            slope = float(mp.diff(regularized, args[argnum]))
            got = float(fg.grad(fs.betainc, argnums=argnum)(*map(f64, args)))
            np.testing.assert_allclose(got, slope, rtol=1e-13)


def test_jit_and_vmap_agree_with_eager():
    a = np.array([0.5, 3.0, 40.0])
    x = np.array([0.2, 5.0, 35.0])
    eager = np.asarray(fs.gammainc(a, x))
    # gammainc(40, 35) is scaled by exp(a log x - x - lgamma a), whose argument cancels from
    # 142 to 0.6: an ulp of its terms is 3e-14 of the result, on either backend.
    np.testing.assert_allclose(np.asarray(fg.jit(fs.gammainc)(a, x)), eager, rtol=6e-14)
    mapped = fg.vmap(fs.betainc)(a, a[::-1], np.array([0.1, 0.5, 0.9]))
    looped = [fs.betainc(p, q, r) for p, q, r in zip(a, a[::-1], [0.1, 0.5, 0.9])]
    np.testing.assert_allclose(np.asarray(mapped), np.asarray(looped), rtol=1e-14)
