"""erfcx, dawsn, exp1, expi, expn, spence, comb, gammasgn, boxcox, boxcox1p and bernoulli:
values against mpmath at 40 digits (SciPy's own are up to 6,000 ulp off for some of these)
over each domain with its tails, edge values as SciPy's, float32 results, derivatives
against central differences, and jit and vmap against eager."""

from __future__ import annotations

import functools

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sc

import funcgrad as fg
import funcgrad.scipy.special as fs
from funcgrad import lax
from funcgrad.test_util import check_grads
from tests.checks import check_batching, jit_backend

mp.mp.dps = 40


def _dawson(t):
    return mp.sqrt(mp.pi) / 2 * mp.exp(-t * t) * mp.erfi(t)


def _erfcx(t):
    return mp.exp(t * t) * mp.erfc(t)


def _spence(t):
    return mp.polylog(2, 1 - t)


def _grid(*pieces) -> np.ndarray:
    return np.concatenate([np.asarray(p, np.float64) for p in pieces])


# name -> (the exact function, arguments sweeping the domain and its tails, most ulps allowed).
# The measured maxima in float64 over denser sweeps (eager and jit alike):
#   erfcx 3 (x in [-26, 1e10]), dawsn 4 (Rybicki's sum, 0.5 <= |x| < 8; 1 elsewhere),
#   exp1 3 (near x = 1, where the series cancels; 2 elsewhere), expi 4 (2 < x < 6; 2 near
#   its root and beyond 6), spence 3.
ONE_ARGUMENT = {
    "erfcx": (
        _erfcx,
        _grid(np.linspace(-26, 0, 60), np.linspace(0, 2, 40), np.linspace(2, 60, 40), [1e3, 1e9]),
        3,
    ),
    "dawsn": (
        _dawson,
        _grid(np.linspace(-8.5, 8.5, 50), np.geomspace(1e-8, 0.5, 10), [20.0, 1e3, -1e6]),
        4,
    ),
    "exp1": (mp.e1, _grid(np.geomspace(1e-10, 1, 30), np.linspace(1, 12, 60), [50, 300, 700]), 3),
    "expi": (
        mp.ei,
        _grid(
            np.linspace(-700, -0.01, 40),
            np.geomspace(1e-10, 0.25, 12),
            np.linspace(0.25, 0.6, 30),  # around the root 0.3725...
            np.linspace(0.6, 60, 80),
            [100.0, 400.0, 705.0],
        ),
        4,
    ),
    "spence": (
        _spence,
        _grid(np.geomspace(1e-10, 0.5, 30), np.linspace(0.5, 2, 40), [5, 1e3, 1e9]),
        3,
    ),
}


def _ulps(got, want) -> np.ndarray:
    return np.abs(np.asarray(got, np.float64) - want) / np.spacing(np.abs(want))


@pytest.mark.parametrize("name", sorted(ONE_ARGUMENT))
def test_float64_values_within_a_few_ulps_of_mpmath(name):
    exact, x, allowed = ONE_ARGUMENT[name]
    want = np.array([float(exact(mp.mpf(float(v)))) for v in x])
    kept = want != 0
    for got in (getattr(fs, name)(x), fg.jit(getattr(fs, name))(x)):
        ulps = _ulps(got, want)[kept]
        assert ulps.max() <= allowed, (name, ulps.max(), x[kept][np.argmax(ulps)])


def test_expn_within_a_few_ulps_of_mpmath():
    """Measured at most 2 ulp for n up to 30 and x from 1e-8 to 600."""
    n = np.repeat(np.array([1, 2, 3, 5, 10, 30], np.float64), 12)
    x = np.tile(_grid(np.geomspace(1e-8, 1, 5), [1.5, 3.0, 10.0, 40.0, 100.0, 300.0, 0.999]), 6)
    want = np.array([float(mp.expint(int(k), mp.mpf(float(v)))) for k, v in zip(n, x)])
    assert _ulps(fs.expn(n, x), want).max() <= 4
    assert _ulps(fs.expn(n.astype(np.int32), x), want).max() <= 4


def test_edge_values_follow_scipy():
    special = np.array([-np.inf, -1.0, 0.0, np.inf, np.nan])
    for name in ("erfcx", "dawsn", "exp1", "expi"):
        got = np.asarray(getattr(fs, name)(special))
        np.testing.assert_allclose(got, getattr(sc, name)(special), rtol=4e-15, err_msg=name)
    np.testing.assert_array_equal(
        np.asarray(fs.spence(np.array([0.0, 1.0, -1.0, np.nan, np.inf]))),
        [np.pi**2 / 6, 0, np.nan, np.nan, np.nan],  # (NaN at inf as SciPy's and JAX's)
    )
    n, x = np.array([0, 1, 2, 5, -1, 2, 2]), np.array([0.0, 0.0, 0.0, 0.0, 1.0, -1.0, np.inf])
    np.testing.assert_array_equal(np.asarray(fs.expn(n, x)), sc.expn(n, x))
    assert np.isnan(float(fs.expn(2.5, 1.0)))  # (SciPy truncates n, with a warning)


@pytest.mark.parametrize("name", sorted(ONE_ARGUMENT))
def test_float32_inputs_give_float32_results_rounded_once(name):
    exact, x, _ = ONE_ARGUMENT[name]
    x32 = x[np.abs(x) < 9].astype(np.float32)
    got = np.asarray(getattr(fs, name)(x32))
    assert got.dtype == np.float32
    want = np.asarray(getattr(fs, name)(x32.astype(np.float64))).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_derivatives_are_the_closed_forms():
    for fun, x, order in [
        (fs.erfcx, -3.0, 2),
        (fs.spence, 1.0, 2),
        (fs.dawsn, 1.7, 1),
        (fs.expi, 0.3, 1),
        (fs.exp1, 3.5, 1),
        (lambda t: fs.expn(3, t), 0.2, 1),
    ]:
        check_grads(fun, (np.float64(x),), order=order)
    x = np.array([0.2, 0.3725074107813666, 1.0, 2.0, 7.0, 40.0])
    slopes = {
        "erfcx": 2 * x * sc.erfcx(x) - 2 / np.sqrt(np.pi),
        "dawsn": 1 - 2 * x * sc.dawsn(x),
        "exp1": -np.exp(-x) / x,
        "expi": np.exp(x) / x,
        "spence": np.where(x == 1, -1, np.log(x) / np.where(x == 1, -1, 1 - x)),
    }
    for name, want in slopes.items():
        got = fg.vmap(fg.grad(getattr(fs, name)))(x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13, atol=3e-15, err_msg=name)
    got = fg.vmap(fg.grad(fs.expn, argnums=1))(np.array([0.0, 1.0, 3.0, 3.0]), x[:4])
    want = [-np.exp(-0.2) * 1.2 / 0.04, -sc.expn(0, x[1]), -sc.expn(2, 1.0), -sc.expn(2, 2.0)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)


def test_vmap_and_jit_agree_with_eager():
    x = np.linspace(0.1, 9.0, 12).reshape(3, 4)
    for name in ONE_ARGUMENT:
        fun = getattr(fs, name)
        eager = np.asarray(fun(x))
        np.testing.assert_allclose(np.asarray(fg.vmap(fun)(x)), eager, rtol=1e-15, err_msg=name)
        np.testing.assert_allclose(np.asarray(fg.jit(fun)(x)), eager, rtol=4e-16, err_msg=name)
    n = np.array([0.0, 1.0, 2.0, 7.0])
    mapped = fg.vmap(fs.expn)(n, x[0])
    np.testing.assert_allclose(np.asarray(mapped), sc.expn(n.astype(int), x[0]), rtol=1e-14)


def test_comb_matches_scipy():
    """Whole k or N - k up to 40 by the product (measured within 8 ulp); elsewhere by betaln."""
    N = np.array([5.0, 5, 5, -1, 5.5, 3, 10, 60, 1000, 7.5, 30.25])
    k = np.array([2.0, 6, -1, 2, 2, 3.5, 0, 30, 3, 2.5, 30.0])
    want = sc.comb(N, k)
    np.testing.assert_allclose(np.asarray(fs.comb(N, k)), want, rtol=2e-15)
    np.testing.assert_allclose(
        np.asarray(fs.comb(N, k, repetition=True)), sc.comb(N, k, repetition=True), rtol=2e-15
    )
    big = fs.comb(np.float64(1000), np.float64(500))
    np.testing.assert_allclose(float(big), float(mp.binomial(1000, 500)), rtol=1e-12)
    assert fs.comb(5, 2).dtype == np.float32 and float(fs.comb(5, 2)) == 10.0


def test_comb_of_a_fractional_k_and_a_large_n():
    # lgamma(N + 1) - lgamma(k + 1) - lgamma(N - k + 1) cancelled: comb(1e20, 0.5) was
    # 1 / Gamma(1.5) (for 1.1e10), comb(1e10, 1e-3) 1.2e-5 off (SciPy's is still 3.5e-15 off).
    N = np.array([1e20, 1e10, 1e6, 1e15, 50.0])
    k = np.array([0.5, 1e-3, 0.1, 7.25, 20.5])
    with mp.workdps(40):
        want = np.array([float(mp.binomial(mp.mpf(n), mp.mpf(j))) for n, j in zip(N, k)])
    np.testing.assert_allclose(np.asarray(fs.comb(N, k)), want, rtol=1e-13)
    fits = [0, 1, 2, 4]  # (comb(1e15, 7.25) overflows float32)
    got32 = np.asarray(fs.comb(N[fits].astype(np.float32), k[fits].astype(np.float32)))
    np.testing.assert_allclose(got32, want[fits].astype(np.float32), rtol=1e-6)


def test_gammasgn_matches_scipy():
    x = np.array([-0.0, 0.0, -1.0, -2.0, -1.5, -2.5, -0.5, 3.0, np.inf, -np.inf, np.nan])
    np.testing.assert_array_equal(np.asarray(fs.gammasgn(x)), sc.gammasgn(x))
    assert fs.gammasgn(np.float32(-0.5)).dtype == np.float32


def test_boxcox_matches_scipy_and_is_smooth_in_lambda():
    x = np.array([0.0, -1.0, 2.0, 2.0, 0.0, 1e-3, 30.0, 2.0])
    lmbda = np.array([0.0, 1.0, 0.0, 0.5, -1.0, 1e-6, -2.5, 1e-12])
    np.testing.assert_allclose(np.asarray(fs.boxcox(x, lmbda)), sc.boxcox(x, lmbda), rtol=1e-15)
    np.testing.assert_allclose(
        np.asarray(fs.boxcox1p(x - 1, lmbda)), sc.boxcox1p(x - 1, lmbda), rtol=1e-15
    )
    small = np.float64(1e-20)
    np.testing.assert_allclose(float(fs.boxcox1p(small, 0.5)), 1e-20, rtol=1e-15)
    # At x = 0 and inf, -1 / lmbda for a positive and a negative lmbda (-inf was given for
    # every lmbda at 0: the infinite log took the Taylor branch).
    x = np.array([0.0, 0.0, 0.0, np.inf, np.inf, np.inf])
    lmbda = np.array([16.4375, 0.5, -1.0, 2.0, -0.5, 0.0])
    for dtype in (np.float16, np.float32, np.float64):
        want = sc.boxcox(x, lmbda).astype(dtype)
        np.testing.assert_array_equal(
            np.asarray(fs.boxcox(x.astype(dtype), lmbda.astype(dtype))), want
        )
        got = fs.boxcox1p((x - 1).astype(dtype), lmbda.astype(dtype))
        np.testing.assert_array_equal(np.asarray(got), want)
    # d/dlmbda at 0 is (log x)^2 / 2, through the Taylor branch
    slope = fg.grad(fs.boxcox, argnums=1)(np.float64(3.0), np.float64(0.0))
    np.testing.assert_allclose(float(slope), np.log(3.0) ** 2 / 2, rtol=1e-15)
    for lm in (0.0, 1e-6, 0.7):
        check_grads(fs.boxcox, (np.float64(2.5), np.float64(lm)), order=2)
        check_grads(fs.boxcox1p, (np.float64(0.5), np.float64(lm)), order=2)


def test_boxcox_where_x_to_the_lmbda_overflows_but_the_result_does_not():
    # expm1(lmbda log x) overflowed before the division by lmbda: boxcox(2.5, 100) was inf in
    # float32 (for 6.2e37), boxcox(1.5, 1760) in float64 (for 4.7e306).
    x = np.array([2.5, 0.5, 1.5, np.e])
    lmbda = np.array([100.0, -127.0, 1760.0, 41.0])
    with mp.workdps(30):
        want = np.array([float(mp.expm1(mp.mpf(lm) * mp.log(v)) / lm) for v, lm in zip(x, lmbda)])
    np.testing.assert_allclose(np.asarray(fs.boxcox(x, lmbda)), want, rtol=1e-13)
    got32 = fs.boxcox(x[:2].astype(np.float32), lmbda[:2].astype(np.float32))
    np.testing.assert_allclose(np.asarray(got32), want[:2].astype(np.float32), rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(fs.boxcox1p(np.float32(1e-8), np.float32(1e10))),
        sc.boxcox1p(float(np.float32(1e-8)), 1e10),
        rtol=1e-5,
    )
    check_grads(fs.boxcox, (np.float64(np.e), np.float64(41.0)), order=1)
    slope = fg.grad(fs.boxcox, argnums=1)(np.float64(1.5), np.float64(1760.0))  # (was NaN)
    assert np.isfinite(slope)


def test_bernoulli_matches_scipy():
    exact = [float(mp.bernoulli(n)) for n in range(31)]
    exact[1] = -0.5
    np.testing.assert_array_equal(np.asarray(fs.bernoulli(30)), np.float32(exact))
    with fg.enable_x64():
        np.testing.assert_array_equal(np.asarray(fs.bernoulli(30)), exact)
    assert fs.bernoulli(0).shape == (1,)
    with pytest.raises(ValueError, match="non-negative"):
        fs.bernoulli(-1)
    with pytest.raises(TypeError, match="int"):
        fs.bernoulli(2.0)


def test_hyp1f1_matches_mpmath():
    """Measured at most 4e-13 relative (near the zeros of 1F1 for negative a, where the
    series' terms cancel) over a in [-4.5, 7], b in [0.5, 10], |x| <= 300; eager and jit."""
    a, b = np.meshgrid([-4.5, -0.5, 0.3, 2.5, 7.0], [0.5, 2.2, 10.0])
    x = np.array([-300.0, -60.0, -8.0, -1e-3, 0.5, 9.0, 45.0, 250.0])
    a, b, x = (
        np.broadcast_to(v, (x.size, a.size)).ravel() for v in (a.ravel(), b.ravel(), x[:, None])
    )
    want = np.array([float(mp.hyp1f1(*map(float, args))) for args in zip(a, b, x)])
    kept = want != 0
    for got in (fs.hyp1f1(a, b, x), fg.jit(fs.hyp1f1)(a, b, x)):
        rel = np.abs(np.asarray(got) - want)[kept] / np.abs(want[kept])
        assert rel.max() < 1e-12
    assert np.isnan(float(fs.hyp1f1(1.0, -1.0, 2.0)))
    np.testing.assert_allclose(float(fs.hyp1f1(-2.0, 3.0, 1.5)), 0.1875, rtol=1e-7)
    # Past x = -709 Kummer's e^x and the expansion's e^-x each overflowed (NaN); they cancel.
    a, b, x = (
        np.array([0.527, 0.527, 2.5, 0.3]),
        np.array([-0.738, -1.738, 3.5, 0.7]),
        np.array([-65504.0, -1e3, -1e5, -1e300]),
    )
    want = np.array([float(mp.hyp1f1(*map(float, args))) for args in zip(a, b, x)])
    assert (np.abs(np.asarray(fs.hyp1f1(a, b, x)) - want) / np.abs(want)).max() < 1e-13
    assert fs.hyp1f1(np.float32(1), 2, 3).dtype == np.float32


def test_hyp1f1_derivatives():
    """d/dx = (a / b) 1F1(a + 1; b + 1; x) exactly; d/da and d/db by central differences."""
    args = (np.float64(1.5), np.float64(2.5), np.float64(-3.0))
    check_grads(fs.hyp1f1, args, order=1)
    got = fg.grad(fs.hyp1f1, argnums=2)(*args)
    np.testing.assert_allclose(float(got), 1.5 / 2.5 * float(mp.hyp1f1(2.5, 3.5, -3)), rtol=1e-14)
    mapped = fg.vmap(fg.grad(fs.hyp1f1, argnums=0))(
        np.array([0.5, 1.0]), np.array([2.0, 2.0]), np.array([1.0, 1.0])
    )
    want = [float(mp.diff(lambda s: mp.hyp1f1(s, 2, 1), v)) for v in (0.5, 1.0)]
    np.testing.assert_allclose(np.asarray(mapped), want, rtol=1e-8)


def test_owens_t_matches_scipy():
    """Measured within 2e-14 relative of SciPy's for h < 8 and 1e-13 out to h = 30, eager and
    jit; even in h, odd in a, Q(|h|) / 2 at a = inf and atan(a) / 2 pi at h = 0."""
    h, a = np.meshgrid(
        [0, 0.1, 0.5, 1, 2, 3.5, 5, 8, 12, 20, 30, -1.5], [0.01, 0.3, 1, 1.1, 5, 1e3, -2]
    )
    h, a = h.ravel(), a.ravel()
    want = sc.owens_t(h, a)
    for got in (fs.owens_t(h, a), fg.jit(fs.owens_t)(h, a)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-13, atol=0)
    # (T(inf, NaN) was 0)
    h, a = (
        np.array([0.0, 1, -1, np.inf, 1, np.nan, 0, np.inf, -np.inf, np.inf]),
        np.array([1.0, 0.5, 0.5, 1, np.inf, 1, np.inf, np.nan, np.nan, 0]),
    )
    np.testing.assert_allclose(np.asarray(fs.owens_t(h, a)), sc.owens_t(h, a), rtol=1e-15)
    assert fs.owens_t(np.float32(1), np.float32(0.5)).dtype == np.float32


def test_owens_t_derivatives():
    check_grads(fs.owens_t, (np.float64(0.7), np.float64(1.6)), order=2)
    h, a = np.array([0.3, 2.0, 6.0]), np.array([0.5, 3.0, 0.9])
    dh, da = fg.vmap(fg.grad(fs.owens_t, argnums=(0, 1)))(h, a)
    density = np.exp(-h * h / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(
        np.asarray(dh), -density * sc.erf(a * h / np.sqrt(2)) / 2, rtol=1e-14
    )
    want = np.exp(-h * h * (1 + a * a) / 2) / (2 * np.pi * (1 + a * a))
    np.testing.assert_allclose(np.asarray(da), want, rtol=1e-14)


def test_sici_and_fresnel_within_a_few_ulps_of_mpmath():
    """Measured in float64 (eager and jit): Si 1 ulp, Ci 11 ulp (next to its zero at 28.3;
    SciPy's is 235 ulp off next to the one at 3.38), fresnel's S and C 3 ulp (SciPy's 18),
    out to x = 1e12 where the phase pi x^2 / 2 is reduced exactly."""
    x = _grid(np.geomspace(1e-8, 2, 12), np.linspace(2, 30, 50), [50.0, 1e3, 1e5, 1e8, 1e12])
    exact = {
        "si": [mp.si(v) for v in x],
        "ci": [mp.ci(v) for v in x],
        "s": [mp.fresnels(v) for v in x],
        "c": [mp.fresnelc(v) for v in x],
    }
    exact = {k: np.array([float(v) for v in vs]) for k, vs in exact.items()}
    for sici, fresnel in ((fs.sici, fs.fresnel), (fg.jit(fs.sici), fg.jit(fs.fresnel))):
        si, ci = sici(x)
        s, c = fresnel(x)
        assert _ulps(si, exact["si"]).max() <= 2
        assert _ulps(ci, exact["ci"]).max() <= 12
        assert _ulps(s, exact["s"]).max() <= 4 and _ulps(c, exact["c"]).max() <= 4


def test_sici_and_fresnel_edges_and_derivatives():
    x = np.array([-2.0, -0.0, 0.0, 1.0, np.inf, -np.inf, np.nan])
    for fun, reference in ((fs.sici, sc.sici), (fs.fresnel, sc.fresnel)):
        for got, want in zip(fun(x), reference(x)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-15)
    assert np.signbit(float(fs.sici(-0.0)[0]))
    s32, c32 = fs.fresnel(np.float32(1.5))
    assert s32.dtype == c32.dtype == np.float32
    check_grads(lambda t: fs.sici(t)[1], (np.float64(2.5),), order=2)
    check_grads(lambda t: fs.fresnel(t)[0], (np.float64(1.1),), order=2)
    t = np.array([0.0, 0.5, 3.0, 1e4 + 0.1])
    dsi = fg.vmap(fg.grad(lambda v: fs.sici(v)[0]))(t)
    np.testing.assert_allclose(np.asarray(dsi), np.sinc(t / np.pi), rtol=1e-13)
    dc = fg.vmap(fg.grad(lambda v: fs.fresnel(v)[1]))(t)
    want = [float(mp.cos(mp.pi * mp.mpf(float(v)) ** 2 / 2)) for v in t]
    np.testing.assert_allclose(np.asarray(dc), want, rtol=1e-12, atol=1e-15)


def test_bessel_jn_matches_scipy():
    """Measured within 2e-16 absolute of SciPy's for |z| <= 100 and orders up to 40, 2e-15 at
    z = 1e4 (the phase's own rounding); at z = 0 too (JAX's is NaN there)."""
    z = _grid(np.linspace(-100, 100, 401), [0.0, 1e-8, 1.999, 2.0, 500.0, 1e4])
    for v, jit in ((0, False), (3, True), (40, False)):
        want = sc.jv(np.arange(v + 1)[:, None], z[None])
        fun = functools.partial(fs.bessel_jn, v=v)
        for got in (fun(z), fg.jit(fun)(z)) if jit else (fun(z),):
            assert got.shape == (v + 1, z.size)
            atol = 3e-15 if v < 40 else 1e-14
            np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=atol)
    got32 = fs.bessel_jn(np.float32([[0.5, 3.0]]), v=2)
    assert got32.shape == (3, 1, 2) and got32.dtype == np.float32
    with pytest.raises(ValueError, match="non-negative"):
        fs.bessel_jn(1.0, v=-1)


def test_bessel_jn_derivatives():
    check_grads(lambda t: fs.bessel_jn(t, v=2), (np.float64(1.7),), order=2)
    z = np.array([-3.0, 0.0, 0.5, 7.0, 150.0])
    slopes = fg.vmap(fg.jacfwd(lambda t: fs.bessel_jn(t, v=3)))(z)
    n = np.arange(4)[None]
    want = sc.jvp(n, z[:, None])
    np.testing.assert_allclose(np.asarray(slopes), want, rtol=0, atol=1e-15)


def test_hyp2f1_matches_mpmath():
    """Measured within 2e-11 relative over a in [-3.5, 4.6], b in [-1.2, 5], c in [0.5, 31],
    x from -1e8 to 1 - 1e-12 (c - a - b whole, or near it, too); edges as SciPy's and
    JAX's."""
    a, b, c, x = np.meshgrid(
        [-3.5, -0.7, 1.3, 4.6], [-1.2, 2.2], [0.5, 3.3], [-20, -1, 0.1, 0.55, 0.95, 0.999]
    )
    a, b, c, x = (v.ravel() for v in (a, b, c, x))
    want = np.array([float(mp.hyp2f1(*map(float, r))) for r in zip(a, b, c, x)])
    got = fs.hyp2f1(a, b, c, x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-11)
    # (compiling its three series loops takes about 3 s here, so once, on a few lanes)
    lanes = slice(0, None, 7)
    compiled = fg.jit(fs.hyp2f1)(a[lanes], b[lanes], c[lanes], x[lanes])
    np.testing.assert_allclose(np.asarray(compiled), np.asarray(got)[lanes], rtol=1e-14)
    x = np.array([-2.0, 0.0, 0.5, 1.0, 1.5])
    np.testing.assert_allclose(
        np.asarray(fs.hyp2f1(1.0, 2.0, 3.0, x)), sc.hyp2f1(1.0, 2.0, 3.0, x), rtol=1e-14
    )
    assert float(fs.hyp2f1(1.0, 2.0, 3.5, 1.0)) == pytest.approx(5.0, rel=1e-13)
    assert np.isinf(float(fs.hyp2f1(1.0, 2.0, -1.0, 0.5)))
    check_grads(
        fs.hyp2f1, (np.float64(0.7), np.float64(1.4), np.float64(2.9), np.float64(0.3)), order=1
    )
    slope = fg.grad(fs.hyp2f1, argnums=3)(1.0, 2.0, 3.0, np.float64(0.5))
    np.testing.assert_allclose(float(slope), 2 / 3 * float(mp.hyp2f1(2, 3, 4, 0.5)), rtol=1e-14)


def test_hyp2f1_of_a_series_that_ends_is_its_polynomial():
    """Where a or b is a whole number -m <= 0 the series is a polynomial of degree m: finite
    at x = 1 (where c - a - b <= 0 gave inf; 2F1(-1, 2.5; 0.5; 1) is -4), beyond it, and at
    c = -n with n >= m (inf before). Against mpmath, with c = -n + tiny beside them (accurate
    before too: the parameters keep their digits in float64)."""
    rows = [
        (-1.0, 2.5, 0.5, 1.0),
        (-2.0, 2.5, 0.5, 1.0),
        (-1.0, 2.5, -1 + 1e-3, 1.0),
        (2.5, -2.0, -3.0, 1.0),
        (-1.0, 2.5, 0.5, 2.0),
        (-3.0, 2.5, 0.5, 7.0),
        (-1.0, 2.5, -2.0, 0.3),
        (2.5, -3.0, -3.0, 0.4),
        (-4.0, 1.5, -6.0, -3.0),
        (-2.0, -3.0, -3.0, 0.4),
        (0.5, 1.5, -1 + 1e-10, 0.7),
        (2.0, 3.0, -5 + 1e-14, 0.95),
        (1.3, -0.7, -2 - 1e-10, -5.0),
    ]
    a, b, c, x = (np.array(v) for v in zip(*rows))
    want = np.array([float(mp.hyp2f1(*row)) for row in rows])
    np.testing.assert_allclose(np.asarray(fs.hyp2f1(a, b, c, x)), want, rtol=1e-13)
    # (exactly 0 by Chu and Vandermonde's product, where the sum of terms cancels)
    assert float(fs.hyp2f1(-3.0, 2.5, 0.5, np.float64(1.0))) == 0.0
    # past the polynomial's end, c's pole stays a pole
    assert np.isinf(float(fs.hyp2f1(-3.0, 2.5, -2.0, np.float64(0.3))))
    slope = fg.grad(fs.hyp2f1, argnums=3)(-2.0, 2.5, 0.5, np.float64(1.5))
    want_slope = float(mp.diff(lambda t: mp.hyp2f1(-2, 2.5, 0.5, t), 1.5))
    np.testing.assert_allclose(float(slope), want_slope, rtol=1e-14)


def test_hypergeometric_series_stop_at_once_on_nan(monkeypatch):
    # A NaN term never fell below 1e-17 of the sum: every loop ran its 5000 rounds (1 s).
    rounds = []

    def counting(cond_fun, body_fun, init):
        carry = while_loop(cond_fun, body_fun, init)
        rounds.append(int(carry[0]))
        return carry

    while_loop = lax.while_loop
    monkeypatch.setattr(lax, "while_loop", counting)
    nan = np.float64(np.nan)
    assert np.isnan(float(fs.hyp2f1(nan, 2.0, 3.0, 0.5)))
    assert np.isnan(float(fs.hyp2f1(1.0, 2.0, nan, 0.9)))
    assert np.isnan(float(fs.hyp1f1(nan, 2.0, 0.5)))
    assert rounds and max(rounds) < 100, rounds


def test_hyp2f1_near_one_where_c_minus_a_minus_b_is_whole():
    """Near x = 1 (and, by Pfaff's transformation, for large negative x when b - a is whole)
    where c - a - b is a whole number or within 1e-9 of one: the logarithmic case, which
    the series alone was 0.45 off at 1 - 1e-8 (1.7e-4 at 0.999). Measured within 5e-16."""
    rows = [
        (1.0, 1.0, 2.0, 0.99),  # -log(1 - x) / x
        (1.0, 1.0, 2.0, 0.999),
        (1.0, 1.0, 2.0, 1 - 1e-8),
        (0.5, 0.5, 1.0, 0.999),  # (2 / pi) K(x)
        (0.5, 0.5, 1.0, 1 - 1e-12),
        (1.5, 0.5, 2 + 1e-9, 0.9999),
        (0.3, 1.7, 4.0, 0.995),  # c - a - b = 2
        (2.5, 1.5, 3 - 1e-10, 0.99),  # c - a - b just below -1
        (-0.7, 1.3, 2.6, 1 - 1e-6),
        (1.0, 1.0, 2.0, -1e3),  # log(1 - x) / -x
        (2.5, 2.5, 1.5, -1e6),
        (0.5, 1.0, 1.5, -1e8),
    ]
    a, b, c, x = (np.array(column) for column in zip(*rows))
    want = np.array([float(mp.hyp2f1(*map(mp.mpf, row))) for row in rows])
    np.testing.assert_allclose(np.asarray(fs.hyp2f1(a, b, c, x)), want, rtol=2e-15)
    with jit_backend("numpy"):
        compiled = fg.jit(fs.hyp2f1)(a, b, c, x)
    np.testing.assert_allclose(np.asarray(compiled), want, rtol=2e-15)
    np.testing.assert_allclose(
        float(fs.hyp2f1(1.0, 1.0, 2.0, np.float64(0.999))), -np.log(1e-3) / 0.999, rtol=1e-15
    )


def test_wofz_matches_mpmath():
    """Measured within 7e-16 relative over the upper half plane for |z| from 0.01 to 1e3
    (SciPy's: 1e-14); below it within about |z|^2 ulp, the conditioning of exp(-z^2)."""
    radius, angle = np.meshgrid([0.01, 0.5, 1.5, 3, 6, 20, 1e3], np.linspace(-np.pi, np.pi, 13))
    z = (radius * np.exp(1j * angle)).ravel()
    z = z[(z.imag >= 0) | (np.abs(z) < 10)]
    want = np.array([complex(mp.exp(-(mp.mpc(v) ** 2)) * mp.erfc(-1j * mp.mpc(v))) for v in z])
    for got in (fs.wofz(z), fg.jit(fs.wofz)(z)):
        got = np.asarray(got)
        assert got.dtype == np.complex128
        rel = np.abs(got - want) / np.abs(want)
        assert rel.max() <= 2e-15 * np.maximum(1, np.abs(z) ** 2).max()
        assert rel[z.imag >= 0].max() < 1e-15
    edges = np.array([0.0, 1.0, np.inf, -np.inf, np.nan])
    np.testing.assert_allclose(np.asarray(fs.wofz(edges)), sc.wofz(edges), rtol=1e-15)
    assert fs.wofz(np.float32(1)).dtype == fs.wofz(np.complex64(1j)).dtype == np.complex64


def test_wofz_derivative_is_holomorphic():
    z = np.array([0.3 + 0.2j, -2.0 + 1.0j, 1.5 - 0.5j])
    slope = fg.vmap(lambda v: fg.jvp(fs.wofz, (v,), (np.complex128(1),))[1])(z)
    want = -2 * z * sc.wofz(z) + 2j / np.sqrt(np.pi)
    np.testing.assert_allclose(np.asarray(slope), want, rtol=1e-14)
    h = 1e-6
    numeric = (sc.wofz(z + h) - sc.wofz(z - h)) / (2 * h)
    np.testing.assert_allclose(np.asarray(slope), numeric, rtol=1e-8)


def test_sph_harm_y_matches_scipy():
    """Measured within 6e-15 absolute (and relative away from its zeros) of SciPy's for n up
    to 30, every sign of m, theta over [0, pi] including the poles."""
    rows = [(n, m) for n in range(0, 31, 3) for m in range(-n, n + 1, max(1, n // 4))]
    n, m = (np.array(v) for v in zip(*rows))
    rng = np.random.default_rng(0)
    theta, phi = rng.uniform(0, np.pi, n.size), rng.uniform(0, 2 * np.pi, n.size)
    theta[:4] = [0.0, np.pi, np.pi / 2, 1e-9]
    want = sc.sph_harm_y(n, m, theta, phi)
    got = fs.sph_harm_y(n, m, theta, phi)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13, atol=1e-14)
    compiled = fg.jit(lambda *args: fs.sph_harm_y(*args, n_max=30))(n, m, theta, phi)
    np.testing.assert_allclose(np.asarray(compiled), want, rtol=1e-13, atol=1e-14)
    assert complex(fs.sph_harm_y(2, 5, 1.0, 1.0)) == 0  # (|m| > n)
    assert fs.sph_harm_y(1, 1, np.float32(0.5), np.float32(0.2)).dtype == np.complex64
    with pytest.raises(fg.errors.ConcretizationTypeError, match="n_max"):
        fg.jit(fs.sph_harm_y)(n, m, theta, phi)
    with pytest.raises(NotImplementedError, match="diff_n"):
        fs.sph_harm_y(1, 0, 0.5, 0.5, diff_n=1)


def test_sph_harm_y_is_a_function_of_cos_theta():
    """Polar angles outside [0, pi] (where sin theta < 0) are taken through cos theta, as SciPy
    defines Y_n^m by P_n^m(cos theta): odd orders had the opposite sign there."""
    n, m = np.array([1, 3, 3, 2, 2]), np.array([1, 1, -1, 1, 2])
    theta = np.array([-1.0, 4.0, -0.3, 5.5, -2.0])
    phi = np.array([0.5, 0.5, 1.2, -0.7, 2.0])
    want = sc.sph_harm_y(n, m, theta, phi)
    np.testing.assert_allclose(np.asarray(fs.sph_harm_y(n, m, theta, phi)), want, rtol=1e-13)
    compiled = fg.jit(lambda *args: fs.sph_harm_y(*args, n_max=3))(n, m, theta, phi)
    np.testing.assert_allclose(np.asarray(compiled), want, rtol=1e-13)


def test_sph_harm_y_derivatives():
    def real_part(theta, phi):
        return fs.sph_harm_y(3, -2, theta, phi).real

    check_grads(real_part, (np.float64(0.8), np.float64(2.1)), order=2)


@pytest.mark.parametrize(
    "fun, args",
    [
        (fs.expn, (np.array([0.0, 1.0, 4.0]), np.array([0.5, 2.0, 9.0]))),
        (fs.comb, (np.array([5.0, 30.0, 7.5]), np.array([2.0, 11.0, 2.5]))),
        (fs.boxcox, (np.array([0.5, 2.0, 9.0]), np.array([0.0, 0.3, -1.2]))),
        (fs.boxcox1p, (np.array([0.5, 2.0, 9.0]), np.array([0.0, 0.3, -1.2]))),
        (fs.gammasgn, (np.array([-1.5, 0.5, -2.5]),)),
        (fs.owens_t, (np.array([0.5, 2.0, 9.0]), np.array([0.2, 3.0, 0.9]))),
        (fs.hyp1f1, (np.array([0.5, 2.0]), np.array([1.5, 3.0]), np.array([-4.0, 2.0]))),
        (fs.sici, (np.array([0.5, 2.0, 40.0]),)),
        (fs.fresnel, (np.array([0.5, 2.0, 40.0]),)),
        (fs.wofz, (np.array([0.5 + 1j, -2.0 - 0.1j, 3j]),)),
    ],
)
def test_vmap_agrees_with_a_loop(fun, args):
    check_batching(fun, args, [0] * len(args), rtol=1e-15, atol=0)
