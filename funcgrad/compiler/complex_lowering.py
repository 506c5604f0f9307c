"""Complex numbers as pairs of real numbers: the compiler's kernels compute on real values only.

`lower_complex` rewrites a program with complex values into one without: each complex value
becomes a `Pair` of real arrays (its real and imaginary parts) and each primitive on complex
operands becomes real arithmetic on the parts, written here with `funcgrad.lax` and staged
again. A complex input or output of shape S is a real one of shape S + (2,) holding the parts
interleaved, which is exactly how NumPy lays out a complex array in memory: the compiled
program reads and writes the caller's complex buffers as they are. Every later stage (fusion,
the kernel IR, the renderers) sees real arithmetic, which it already compiles and vectorizes.

The formulas keep the reference's accuracy where it is cheap to do so: |z| and log|z| scale
by the larger part (no overflow of a² + b²), division is Smith's algorithm, log1p and expm1
keep their small-argument accuracy, tanh stays finite for large real parts, the inverse
functions keep small parts and take the sides of their cuts by the signs of zeros (Kahan's
formulas), and whole real powers multiply as NumPy's do. Where a part is infinite or NaN they
give the values of C99's Annex G that NumPy gives (exp(-inf + inf j) = 0, arcsin(inf) =
pi/2 + inf j), and NumPy's own where it has its own formula (expm1, sign): selects on those
rare parts, which leave the finite arithmetic as it was.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from funcgrad import dtypes, lax, tree_util
from funcgrad.array import Array
from funcgrad.compiler.passes import _param_jaxprs
from funcgrad.core import PRIMITIVES, ShapedArray
from funcgrad.interpreters.staging import trace_to_jaxpr
from funcgrad.ir import ClosedJaxpr, Jaxpr, Literal, literal_value
from funcgrad.lax import fft_passes
from funcgrad.lax.complex_pairs import PAIRS
from funcgrad.lax.eig import eig_parts_p
from funcgrad.lax.fft import FftType
from funcgrad.lax.sorting import sort_p


class Pair:
    """A complex value as its real and imaginary parts (real arrays of one shape and dtype),
    and where some operation wrote them so, the array holding them interleaved."""

    __slots__ = ("re", "im", "interleaved")

    def __init__(self, re, im, interleaved=None):
        self.re, self.im, self.interleaved = re, im, interleaved

    @classmethod
    def of_interleaved(cls, parts) -> Pair:
        last = parts.ndim - 1
        re, im = (lax.index_in_dim(parts, i, last, False) for i in (0, 1))
        return cls(re, im, parts)


tree_util.register_pytree_node(Pair, lambda p: ((p.re, p.im), None), lambda _, c: Pair(*c))


# ---------------------------------------------------------------------------------------------
# The rewrite


@functools.lru_cache(maxsize=256)
def mentions_complex(jaxpr: Jaxpr) -> bool:
    """Whether any value of `jaxpr` or of the programs it carries is complex."""
    # Every variable is an input or some equation's output; literals are only operands.
    atoms = [*jaxpr.constvars, *jaxpr.invars, *jaxpr.outvars]
    for eqn in jaxpr.eqns:
        atoms += eqn.outvars
        atoms += [v for v in eqn.invars if type(v) is Literal]
        if eqn.params and any(mentions_complex(inner) for inner in _param_jaxprs(eqn.params)):
            return True
    return any(atom.aval.dtype.kind == "c" for atom in atoms)


def real_aval(aval: ShapedArray) -> ShapedArray:
    """The aval a value of `aval` has in the lowered program (complex: interleaved parts)."""
    if not dtypes.is_complex(aval.dtype):
        return aval
    return ShapedArray(aval.shape + (2,), dtypes.real_dtype(aval.dtype))


def lower_complex(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` without complex values (itself when it has none); see the module docstring."""
    if not mentions_complex(closed.jaxpr):
        return closed
    in_avals = closed.in_avals

    def lowered(*args):
        values = [_split(x) if dtypes.is_complex(a.dtype) else x for x, a in zip(args, in_avals)]
        consts = [_constant(c) for c in closed.consts]
        outs = evaluate(closed.jaxpr, consts, values)
        return [_interleave(v) if isinstance(v, Pair) else v for v in outs]

    program, _ = trace_to_jaxpr(lowered, [real_aval(a) for a in in_avals], "complex lowering")
    return program


def _split(x) -> Pair:
    last = x.ndim - 1
    return Pair(lax.index_in_dim(x, 0, last, False), lax.index_in_dim(x, 1, last, False))


def _interleave(z: Pair):
    if z.interleaved is not None:
        return z.interleaved
    last = z.re.ndim
    return lax.concatenate([lax.expand_dims(z.re, (last,)), lax.expand_dims(z.im, (last,))], last)


def _constant(value):
    array = np.asarray(getattr(value, "_value", value))
    if not dtypes.is_complex(array.dtype):
        return value
    return Pair(Array(np.array(array.real)[()]), Array(np.array(array.imag)[()]))


def evaluate(jaxpr: Jaxpr, consts: list, args: list) -> list:
    """Run `jaxpr` on values that are real arrays or `Pair`s, under the current trace."""
    env: dict = {}

    def read(atom):
        if type(atom) is Literal:
            return _constant(literal_value(atom))
        return env[atom]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        prim = eqn.primitive
        involved = [*eqn.invars, *eqn.outvars]
        if not any(dtypes.is_complex(v.aval.dtype) for v in involved) and not any(
            mentions_complex(inner) for inner in _param_jaxprs(eqn.params)
        ):
            outs = prim.bind(*invals, **eqn.params)
        else:
            rule = rules.get(prim.name)
            if rule is None:
                raise NotImplementedError(
                    f"the compiler cannot compile {prim.name} on complex values yet; run this "
                    "program with jit_backend='numpy'"
                )
            outs = rule([v.aval for v in eqn.outvars], *invals, **eqn.params)
        if not prim.multiple_results:
            outs = [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _evaluate_closed(closed: ClosedJaxpr, args) -> list:
    return evaluate(closed.jaxpr, [_constant(c) for c in closed.consts], list(args))


# ---------------------------------------------------------------------------------------------
# Complex arithmetic on pairs

rules: dict[str, Callable] = {}


def _c(x, value):
    """A rank-0 constant of the dtype of real array `x`."""
    return Array(np.array(value, x.dtype)[()], False)


def _is_inf(x):
    return lax.eq(lax.abs(x), _c(x, np.inf))


def _is_nan(x):
    return lax.ne(x, x)


def _not_finite(x):
    return lax.bitwise_not(lax.is_finite(x))


def _copysign(magnitude, sign_source):
    """|magnitude| with the sign bit of `sign_source` (bit operations: two instructions)."""
    integer = np.dtype(f"i{magnitude.dtype.itemsize}")
    sign_bit = lax.full_like(lax.bitcast_convert_type(sign_source, integer), np.iinfo(integer).min)
    sign = lax.bitwise_and(lax.bitcast_convert_type(sign_source, integer), sign_bit)
    bits = lax.bitwise_or(lax.bitcast_convert_type(lax.abs(magnitude), integer), sign)
    return lax.bitcast_convert_type(bits, magnitude.dtype)


def each_part(fn: Callable, z: Pair) -> Pair:
    """`fn` applied to the real and to the imaginary part."""
    return Pair(fn(z.re), fn(z.im))


def _parts(value):
    """`value` as a Pair (a real value gets a zero imaginary part shaped like it)."""
    if isinstance(value, Pair):
        return value
    return Pair(value, lax.full_like(value, 0))


def add(x: Pair, y: Pair) -> Pair:
    return Pair(lax.add(x.re, y.re), lax.add(x.im, y.im))


def sub(x: Pair, y: Pair) -> Pair:
    return Pair(lax.sub(x.re, y.re), lax.sub(x.im, y.im))


def mul(x: Pair, y: Pair) -> Pair:
    re = lax.sub(lax.mul(x.re, y.re), lax.mul(x.im, y.im))
    return Pair(re, lax.add(lax.mul(x.re, y.im), lax.mul(x.im, y.re)))


def scale(x: Pair, factor) -> Pair:
    """x times a real `factor`."""
    return Pair(lax.mul(x.re, factor), lax.mul(x.im, factor))


def div(x: Pair, y: Pair) -> Pair:
    """Smith's algorithm: divide through by the larger part of y, so nothing overflows."""
    c, d = y.re, y.im
    real_larger = lax.ge(lax.abs(c), lax.abs(d))
    big = lax.select(real_larger, c, d)
    small = lax.select(real_larger, d, c)
    ratio = lax.div(small, big)
    denominator = lax.add(big, lax.mul(small, ratio))
    # With r = small / big: the real-larger case gives ((a + b r) + i (b - a r)) / (c + d r),
    # the other ((a r + b) + i (b r - a)) / (c r + d).
    a, b = x.re, x.im
    re = lax.select(real_larger, lax.add(a, lax.mul(b, ratio)), lax.add(lax.mul(a, ratio), b))
    im = lax.select(real_larger, lax.sub(b, lax.mul(a, ratio)), lax.sub(lax.mul(b, ratio), a))
    # By zero, each part of x is divided by +0, as NumPy does: 1 / 0j = inf + nan j (but a
    # NaN part beside a zero one is no zero: 1 / (nan + 0j) is nan + nan j).
    zero = lax.bitwise_and(lax.eq(big, _c(big, 0)), lax.eq(small, _c(small, 0)))
    divisor = lax.select(zero, lax.abs(big), denominator)
    re, im = lax.select(zero, a, re), lax.select(zero, b, im)
    return Pair(lax.div(re, divisor), lax.div(im, divisor))


def neg(x: Pair) -> Pair:
    return each_part(lax.neg, x)


def times_i(x: Pair) -> Pair:
    return Pair(lax.neg(x.im), x.re)


def times_minus_i(x: Pair) -> Pair:
    return Pair(x.im, lax.neg(x.re))


def _range_scale(m):
    """2^60 where `m` is below the smallest normal number, 1/4 where it passes a quarter of
    the largest, else 1: an exact rescaling (a square's root too) that gives subnormal values
    their full precision before they are divided and squared, and keeps a modulus and sums of
    parts near the largest float from overflowing (log(3e38 + 3e38j) was inf in complex64,
    sqrt(-3e38 + 1j) inf j)."""
    info = dtypes.finfo(m.dtype)
    tiny, huge = lax.lt(m, _c(m, info.tiny)), lax.gt(m, _c(m, float(info.max) / 4))
    unscaled = lax.select(huge, lax.full_like(m, 0.25), lax.full_like(m, 1))
    return lax.select(tiny, lax.full_like(m, 2.0**60), unscaled)


def _scaled_modulus(x: Pair):
    """(|x| f, f) with f from `_range_scale`: |x| = m sqrt(1 + (n/m)²) with m, n the larger
    and smaller part magnitudes, scaled so that subnormal parts keep their precision (in the
    scaled result, which may itself be subnormal once divided by f) and huge ones do not
    overflow (the result divided by f may). An infinite part makes |x| infinite, the other
    part NaN or not (as C's hypot, and NumPy, have it)."""
    a, b = lax.abs(x.re), lax.abs(x.im)
    m = lax.max(a, b)
    factor = _range_scale(m)
    m, n = lax.mul(m, factor), lax.mul(lax.min(a, b), factor)
    safe = lax.select(lax.eq(m, _c(m, 0)), lax.full_like(m, 1), m)
    r = lax.div(n, safe)
    result = lax.mul(m, lax.sqrt(lax.add(_c(m, 1), lax.mul(r, r))))
    infinite = lax.bitwise_or(lax.eq(a, _c(a, np.inf)), lax.eq(b, _c(b, np.inf)))
    return lax.select(infinite, lax.full_like(m, np.inf), result), factor


def modulus(x: Pair):
    """|x|, with neither overflow nor, until the last division, a subnormal's loss of
    precision."""
    scaled, factor = _scaled_modulus(x)
    return lax.div(scaled, factor)


def exp(x: Pair) -> Pair:
    """e^a (cos b + i sin b). Where e^a overflows, its two halves e^(a/2) multiply in one
    after the other, around cos b or sin b, which may bring a part back into range (the
    reference's exp(90 + 1e-30j) in complex64 is inf + 1.2e9j, not inf + inf j)."""
    a, b = x.re, x.im
    large = lax.gt(a, _c(a, math.log(dtypes.finfo(a.dtype).max) - 1))
    half = lax.exp(lax.mul(lax.select(large, a, lax.full_like(a, 0)), _c(a, 0.5)))
    scale_ = lax.select(large, half, lax.exp(a))
    outer = lax.select(large, half, lax.full_like(a, 1))

    def times(part):
        return lax.mul(lax.mul(scale_, part), outer)

    # exp(a + 0i) is real even where e^a is infinite (inf * sin(0) would be NaN).
    re, im = times(lax.cos(b)), lax.select(lax.eq(b, _c(b, 0)), b, times(lax.sin(b)))
    # An infinite a beside an infinite or NaN b (where e^a cos b is NaN): inf + NaN i, or a
    # zero signed as b (C99's Annex G, and NumPy), as max(a, 0) + i max(a, 0) (±0).
    special = lax.bitwise_and(_is_inf(a), _is_nan(re))
    re = lax.select(special, lax.max(a, lax.full_like(a, 0)), re)
    im = lax.select(special, lax.mul(re, _copysign(lax.full_like(b, 0), b)), im)
    return Pair(re, im)


def log(x: Pair) -> Pair:
    """log |x| + i arg x. log |x| is taken of the scaled modulus (a subnormal |x| has lost bits
    that its log would show), and where the larger part m is within [1/2, 2] as
    log1p((m - 1)(m + 1) + n²) / 2, n the smaller one: log of a modulus near 1 keeps only
    the modulus' absolute accuracy (log(1.00000025 - 5.7e-6j) was 6e-10 relative off)."""
    scaled, factor = _scaled_modulus(x)
    far = lax.sub(lax.log(scaled), lax.log(factor))
    a, b = lax.abs(x.re), lax.abs(x.im)
    m, n = lax.max(a, b), lax.min(a, b)
    near_one = lax.bitwise_and(lax.ge(m, _c(m, 0.5)), lax.le(m, _c(m, 2)))
    squares = lax.add(lax.mul(lax.sub(m, _c(m, 1)), lax.add(m, _c(m, 1))), lax.mul(n, n))
    near = lax.mul(lax.log1p(squares), _c(m, 0.5))
    return Pair(lax.select(near_one, near, far), lax.atan2(x.im, x.re))


def log1p(x: Pair) -> Pair:
    """log(1 + z). log|1 + z| = log1p(2a + a² + b²) / 2 keeps the accuracy of small z; where
    that argument is far from 0 (1 + z far from the unit circle) log|1 + z| is taken
    directly, which avoids the cancellation of log1p near -1."""
    a, b = x.re, x.im
    shifted = Pair(lax.add(a, _c(a, 1)), b)
    square = lax.add(lax.mul(a, lax.add(a, _c(a, 2))), lax.mul(b, b))
    near = lax.lt(lax.abs(square), _c(a, 0.5))
    safe_square = lax.select(near, square, lax.full_like(square, 0))
    re = lax.select(near, lax.mul(lax.log1p(safe_square), _c(a, 0.5)), lax.log(modulus(shifted)))
    return Pair(re, lax.atan2(b, shifted.re))


def expm1(x: Pair) -> Pair:
    """Re(e^z - 1) = expm1(a) cos b - 2 sin²(b/2), without the cancellation of e^a cos b - 1,
    and Im = e^a sin b, as NumPy computes them: expm1(inf + 0j) is inf + nan j there (e^a
    times sin 0), not C99's exp(z) - 1 = inf + 0j."""
    a, b = x.re, x.im
    half_sin = lax.sin(lax.mul(b, _c(b, 0.5)))
    re = lax.sub(lax.mul(lax.expm1(a), lax.cos(b)), lax.mul(_c(b, 2), lax.mul(half_sin, half_sin)))
    return Pair(re, lax.mul(lax.exp(a), lax.sin(b)))


def sqrt(x: Pair) -> Pair:
    """The principal root: t = sqrt((|z| + |a|) / 2) and b / 2t, placed by the sign of a; on
    the cut along the negative reals the sign of b, a zero's included, picks the side, as in
    C99's csqrt and NumPy (sqrt(-1 - 0j) = -1j). A subnormal z is scaled by 2^60 first, its
    root then divided by 2^30, so that its parts keep their precision; a huge one by 1/4, its
    root doubled, so that |z| + |a| stays finite."""
    factor = _range_scale(lax.max(lax.abs(x.re), lax.abs(x.im)))
    a, b = lax.mul(x.re, factor), lax.mul(x.im, factor)
    t = lax.sqrt(lax.mul(lax.add(modulus(Pair(a, b)), lax.abs(a)), _c(a, 0.5)))
    safe_t = lax.select(lax.eq(t, _c(t, 0)), lax.full_like(t, 1), t)
    other = lax.div(b, lax.mul(_c(t, 2), safe_t))
    other = lax.select(lax.eq(t, _c(t, 0)), b, other)  # (z = 0: +0 with b's zero)
    non_negative = lax.ge(a, _c(a, 0))
    re = lax.select(non_negative, t, lax.abs(other))
    im = lax.select(non_negative, other, lax.select(_signbit(b), lax.neg(t), t))
    infinite = lax.eq(lax.abs(b), _c(b, np.inf))  # (sqrt(x ± inf i) = inf ± inf i, any x)
    re, im = lax.select(infinite, lax.abs(b), re), lax.select(infinite, b, im)
    root = lax.sqrt(factor)
    return Pair(lax.div(re, root), lax.div(im, root))


def _signbit(x):
    """Whether real `x` has its sign bit set (-0.0 included)."""
    bits = lax.bitcast_convert_type(x, np.dtype(f"i{x.dtype.itemsize}"))
    return lax.lt(bits, lax.full_like(bits, 0))


def _product(x, y):
    """x * y, except that a zero times an infinity is a zero, signed as the product of the
    signs: where a large argument overflows one factor of a part (cosh(1e30) in
    sinh(1e30 + 0j)), an exact zero factor decides it, as in NumPy (inf + 0j, not inf + nan j)."""
    product = lax.select(lax.eq(y, _c(y, 0)), lax.mul(y, lax.sign(x)), lax.mul(x, y))
    return lax.select(lax.eq(x, _c(x, 0)), lax.mul(x, lax.sign(y)), product)


def _hyperbolic_times(t, c, s):
    """(cosh t · c, sinh t · s), products by `_product`; where cosh t and sinh t overflow
    (|t| past log of the largest float, less 1), as e^|t| / 2 taken in halves e^(|t|/2) on each
    side of c or s, which may bring a product back into range (sinh(90 + 1e-30j) in complex64
    is inf + 6.1e8j)."""
    large = lax.gt(lax.abs(t), _c(t, math.log(dtypes.finfo(t.dtype).max) - 1))
    half = lax.exp(lax.mul(lax.select(large, lax.abs(t), lax.full_like(t, 0)), _c(t, 0.5)))

    def halves(part):
        product = lax.mul(lax.mul(lax.mul(half, _c(t, 0.5)), part), half)
        return lax.select(lax.eq(part, _c(part, 0)), part, product)

    cosh_c = lax.select(large, halves(c), _product(lax.cosh(t), c))
    sinh_s = lax.select(large, lax.mul(lax.sign(t), halves(s)), _product(lax.sinh(t), s))
    return cosh_c, sinh_s


def sinh(x: Pair) -> Pair:
    """sinh a cos b + i cosh a sin b. Where b is infinite or NaN (cos b and sin b are NaN),
    and where a is NaN beside a zero b, C99's Annex G (and NumPy) keep what the parts still
    decide: sinh(±0 + inf i) = ±0 + NaN i, sinh(±inf + NaN i) = inf + NaN i,
    sinh(NaN + 0i) = NaN + 0i."""
    a, b = x.re, x.im
    cosh_sin, sinh_cos = _hyperbolic_times(a, lax.sin(b), lax.cos(b))
    off_axis = lax.select(
        _is_inf(a), lax.abs(a), lax.select(lax.eq(a, _c(a, 0)), a, lax.full_like(a, np.nan))
    )
    re = lax.select(_not_finite(b), off_axis, sinh_cos)
    return Pair(re, lax.select(lax.eq(b, _c(b, 0)), b, cosh_sin))


def cosh(x: Pair) -> Pair:
    """cosh a cos b + i sinh a sin b, with Annex G's values where b is infinite or NaN
    (cosh(±inf + NaN i) = inf + NaN i, cosh(±0 + NaN i) = NaN + 0i) and at NaN + 0i."""
    a, b = x.re, x.im
    cosh_cos, sinh_sin = _hyperbolic_times(a, lax.cos(b), lax.sin(b))
    off_axis = _not_finite(b)
    re = lax.select(lax.bitwise_and(off_axis, _is_inf(a)), lax.abs(a), cosh_cos)
    im = lax.select(lax.bitwise_and(off_axis, lax.eq(a, _c(a, 0))), lax.full_like(b, 0), sinh_sin)
    im = lax.select(lax.bitwise_and(_is_nan(a), lax.eq(b, _c(b, 0))), b, im)
    return Pair(re, im)


def sin(x: Pair) -> Pair:
    """-i sinh(i z), except that NumPy makes sin(±inf ± inf i) and sin(NaN ± inf i)
    NaN + inf i (an infinity of either sign, in Annex G)."""
    z = times_minus_i(sinh(times_i(x)))
    unsigned = lax.bitwise_and(_not_finite(x.re), _is_inf(x.im))
    return Pair(z.re, lax.select(unsigned, lax.abs(x.im), z.im))


def logistic(x: Pair) -> Pair:
    """1 / (1 + e^-x) where the real part is not negative, e^x / (1 + e^x) where it is: the
    exponential never overflows, so the left half plane keeps its tiny values."""
    left = lax.lt(x.re, _c(x.re, 0))
    e = exp(Pair(lax.select(left, x.re, lax.neg(x.re)), lax.select(left, x.im, lax.neg(x.im))))
    numerator = Pair(
        lax.select(left, e.re, lax.full_like(e.re, 1)),
        lax.select(left, e.im, lax.full_like(e.im, 0)),
    )
    return div(numerator, Pair(lax.add(e.re, _c(e.re, 1)), e.im))


def cos(x: Pair) -> Pair:
    return cosh(times_i(x))


def tanh(x: Pair) -> Pair:
    """(sinh a cosh a + i sin b cos b) / (sinh² a + cos² b): the usual (sinh 2a + i sin 2b) /
    (cosh 2a + cos 2b) with the denominator's cancellation near the poles written away. For
    |a| > 20 that is sign(a) to working precision, with the imaginary part
    4 sin(b) cos(b) e^(-2|a|), which cannot overflow."""
    a, b = x.re, x.im
    sinh_a, cos_b, sin_b = lax.sinh(a), lax.cos(b), lax.sin(b)
    large = lax.gt(lax.abs(a), _c(a, 20))
    safe_sinh = lax.select(large, lax.full_like(a, 0), sinh_a)
    denominator = lax.add(lax.mul(safe_sinh, safe_sinh), lax.mul(cos_b, cos_b))
    re = lax.select(large, lax.sign(a), lax.div(lax.mul(safe_sinh, lax.cosh(a)), denominator))
    sin_cos = lax.mul(sin_b, cos_b)
    tail = lax.mul(lax.mul(_c(b, 4), sin_cos), lax.exp(lax.mul(lax.abs(a), _c(a, -2))))
    im = lax.select(large, tail, lax.div(sin_cos, denominator))
    # Annex G (and NumPy) where a part is not finite: tanh(a + NaN i) = NaN + NaN i for finite
    # a, but ±0 + NaN i at a = ±0; tanh(NaN + 0i) = NaN + 0i; tanh(±inf + NaN i) = ±1 + 0i
    # (the zero signed as b).
    finite_a = lax.bitwise_and(lax.is_finite(a), _not_finite(b))
    beside = lax.select(lax.eq(a, _c(a, 0)), a, lax.full_like(a, np.nan))
    re = lax.select(finite_a, beside, re)
    im = lax.select(lax.eq(b, _c(b, 0)), b, im)
    at_infinity = lax.bitwise_and(_is_inf(a), _not_finite(b))
    return Pair(re, lax.select(at_infinity, _copysign(lax.full_like(b, 0), b), im))


def tan(x: Pair) -> Pair:
    return times_minus_i(tanh(times_i(x)))


def one_like(x: Pair) -> Pair:
    return Pair(lax.full_like(x.re, 1), lax.full_like(x.im, 0))


def _halved(x: Pair) -> Pair:
    return Pair(lax.mul(x.re, _c(x.re, 0.5)), lax.mul(x.im, _c(x.im, 0.5)))


def _asinh_of_four_times(q):
    """asinh(4q), q a part of the product of Kahan's roots halved (a quarter of the roots'
    product, exactly): 4q overflows only where |z| nears the largest float, and there
    asinh(4q) is log|8q| signed as q (asinh y = log 2y to the last bit once y passes 2^30)."""
    y = lax.mul(q, _c(q, 4))
    far = _copysign(lax.add(lax.log(lax.abs(q)), _c(q, math.log(8))), q)
    return lax.select(_is_inf(y), far, lax.asinh(y))


def _conj_times(x: Pair, y: Pair) -> Pair:
    """conj(x) y."""
    re = lax.add(lax.mul(x.re, y.re), lax.mul(x.im, y.im))
    return Pair(re, lax.sub(lax.mul(x.re, y.im), lax.mul(x.im, y.re)))


def _not_finite_pair(x: Pair):
    return lax.bitwise_or(_not_finite(x.re), _not_finite(x.im))


def _infinite_or_nan(x: Pair, infinite):
    """`infinite` where a part of `x` is infinite, else NaN (for x with a part not finite)."""
    return lax.select(
        lax.bitwise_or(_is_inf(x.re), _is_inf(x.im)), infinite, lax.full_like(infinite, np.nan)
    )


def _real_plus(value: float, x: Pair) -> Pair:
    """value + x for a real `value`: x's imaginary part, a zero's sign included, is kept."""
    return Pair(lax.add(_c(x.re, value), x.re), x.im)


def asin(x: Pair) -> Pair:
    """Kahan's formulas ("Branch cuts for complex elementary functions", 1987), as for acos
    and acosh: with s = sqrt(1 - z) and t = sqrt(1 + z), asin z = atan2(a, Re(s t)) +
    i asinh(Im(conj(s) t)). They do not cancel near 0 or ±1, overflow only where |z| nears the
    largest float, and on the cuts the sign of a zero part picks the side, as in C99 and
    NumPy."""
    a, b = x.re, x.im
    s, t = sqrt(Pair(lax.sub(_c(a, 1), a), lax.neg(b))), sqrt(_real_plus(1, x))
    # Where a part is infinite or NaN, Annex G's values: asin z = atan2(a, |b|) + i·inf signed
    # as b for an infinite part, NaN + NaN i for a NaN one, and ±0 + NaN i at ±0 + NaN i.
    special = _not_finite_pair(x)
    # (Re(s t) overflows only where |z| nears the largest float: there a quarter of it, and
    # of a, give the angle)
    half_s, half_t = _halved(s), _halved(t)
    product = lax.sub(lax.mul(s.re, t.re), lax.mul(s.im, t.im))
    quarter = lax.sub(lax.mul(half_s.re, half_t.re), lax.mul(half_s.im, half_t.im))
    overflow = _is_inf(product)
    side = lax.select(overflow, lax.mul(a, _c(a, 0.25)), a)
    product = lax.select(overflow, quarter, product)
    re = lax.atan2(side, lax.select(special, lax.abs(b), product))
    re = lax.select(lax.eq(a, _c(a, 0)), a, re)
    far = _infinite_or_nan(x, _copysign(lax.full_like(b, np.inf), b))
    imaginary = _asinh_of_four_times(_conj_times(half_s, half_t).im)
    return Pair(re, lax.select(special, far, imaginary))


def acos(x: Pair) -> Pair:
    """2 atan2(Re s, Re t) + i asinh(Im(conj(t) s)), s and t as for `asin`."""
    a, b = x.re, x.im
    s, t = sqrt(Pair(lax.sub(_c(a, 1), a), lax.neg(b))), sqrt(_real_plus(1, x))
    # Annex G's values where a part is not finite: atan2(|b|, a) - i·inf signed as b, and
    # pi/2 on the imaginary axis (exact there for finite b too).
    special = _not_finite_pair(x)
    angle = lax.atan2(lax.select(special, lax.abs(b), s.re), lax.select(special, a, t.re))
    re = lax.select(special, angle, lax.mul(_c(a, 2), angle))
    re = lax.select(lax.eq(a, _c(a, 0)), lax.full_like(a, np.pi / 2), re)
    far = _infinite_or_nan(x, lax.neg(_copysign(lax.full_like(b, np.inf), b)))
    imaginary = _asinh_of_four_times(_conj_times(_halved(t), _halved(s)).im)
    return Pair(re, lax.select(special, far, imaginary))


def asinh(x: Pair) -> Pair:
    return times_minus_i(asin(times_i(x)))


def acosh(x: Pair) -> Pair:
    """With s = sqrt(z - 1) and t = sqrt(z + 1): asinh(Re(conj(s) t)) + 2i atan2(Im s, Re t)."""
    a, b = x.re, x.im
    s, t = sqrt(_real_plus(-1, x)), sqrt(_real_plus(1, x))
    # Annex G's values where a part is not finite: inf + i atan2(|b|, a) signed as b, and
    # ±pi/2 signed as b on the imaginary axis (exact there for finite b too).
    special = _not_finite_pair(x)
    angle = lax.atan2(lax.select(special, lax.abs(b), s.im), lax.select(special, a, t.re))
    im = lax.select(special, _copysign(angle, b), lax.mul(_c(b, 2), angle))
    im = lax.select(lax.eq(a, _c(a, 0)), _copysign(lax.full_like(b, np.pi / 2), b), im)
    far = _infinite_or_nan(x, lax.full_like(a, np.inf))
    real = _asinh_of_four_times(_conj_times(_halved(s), _halved(t)).re)
    return Pair(lax.select(special, far, real), im)


def atanh(x: Pair) -> Pair:
    """Re = sign(a) log1p(4|a| / ((1 - |a|)² + b²)) / 4 and Im = atan2(2b, (1 - a)(1 + a) - b²)
    / 2, which keep the real part's relative accuracy where it is small beside the imaginary
    one (log1p(z) - log1p(-z) cancels it away: atanh(1e-20 + 2j) came out 0 + 1.107j). Where
    that quotient is large (z near ±1), Re = (log|1 + |a| + ib| - log|1 - |a| + ib|) / 2,
    whose moduli do not underflow. Where the squares could overflow, atanh z = 1/z +
    i (pi/2) sign(b) (the expansion's next term, 1/(3z³), is far below the rounding), an
    infinite part's real part a signed zero."""
    a, b = x.re, x.im
    one = _c(a, 1)
    info = dtypes.finfo(a.dtype)
    large = lax.gt(lax.max(lax.abs(a), lax.abs(b)), _c(a, 2.0 ** (info.maxexp // 2 - 2)))
    safe_a = lax.select(large, lax.full_like(a, 0), a)
    safe_b = lax.select(large, lax.full_like(b, 0), b)
    magnitude = lax.abs(safe_a)
    gap = lax.sub(one, magnitude)
    quotient = lax.div(
        lax.mul(_c(a, 4), magnitude), lax.add(lax.mul(gap, gap), lax.mul(safe_b, safe_b))
    )
    apart = lax.sub(log(Pair(lax.add(one, magnitude), safe_b)).re, log(Pair(gap, safe_b)).re)
    re = lax.select(
        lax.lt(quotient, one),
        lax.mul(lax.log1p(quotient), _c(a, 0.25)),
        lax.mul(apart, _c(a, 0.5)),
    )
    re = lax.select(_signbit(a), lax.neg(re), re)
    across = lax.sub(lax.mul(lax.sub(one, safe_a), lax.add(one, safe_a)), lax.mul(safe_b, safe_b))
    im = lax.mul(lax.atan2(lax.mul(_c(b, 2), safe_b), across), _c(b, 0.5))
    # 1/z = (a - ib) / |z|², scaled by the larger part s (Smith's division loses a zero's
    # sign), divided by s last: s times the scaled |z|² (up to 2) overflowed for the largest
    # parts, which lost 1/z (the imaginary part of atan(3e38 + 3e38j) was 0, not 1.5e-39).
    s = lax.max(lax.abs(a), lax.abs(b))
    s = lax.select(large, s, lax.full_like(s, 1))
    a_s, b_s = lax.div(a, s), lax.div(b, s)
    squared = lax.add(lax.mul(a_s, a_s), lax.mul(b_s, b_s))
    inverse = Pair(lax.div(lax.div(a_s, squared), s), lax.neg(lax.div(lax.div(b_s, squared), s)))
    quarter_turn = lax.select(
        _signbit(b), lax.full_like(b, -np.pi / 2), lax.full_like(b, np.pi / 2)
    )
    # An infinite part (beside a NaN too, which `large` misses): ±0 + i (pi/2) signed as b, a
    # NaN b's imaginary part NaN (Annex G's values); a zero a gives a zero real part.
    infinite = lax.bitwise_or(_is_inf(a), _is_inf(b))
    far = lax.bitwise_or(large, infinite)
    far_re = lax.select(infinite, _copysign(lax.full_like(a, 0), a), inverse.re)
    far_im = lax.add(quarter_turn, lax.select(infinite, lax.full_like(b, 0), inverse.im))
    re = lax.select(lax.eq(a, _c(a, 0)), a, lax.select(far, far_re, re))
    im = lax.select(_is_nan(b), b, lax.select(far, far_im, im))
    return Pair(re, im)


def atan(x: Pair) -> Pair:
    return times_minus_i(atanh(times_i(x)))


def _where(pred, on_true: Pair, on_false: Pair) -> Pair:
    return Pair(
        lax.select(pred, on_true.re, on_false.re), lax.select(pred, on_true.im, on_false.im)
    )


def mul_keeping_infinities(x: Pair, y: Pair) -> Pair:
    """x y as C99's Annex G multiplies (NumPy's power takes it from the C library's cpow):
    where both parts come out NaN but a factor or a partial product is infinite, the product
    is infinite: it is taken again with an infinite factor's parts as ±1 and ±0 and the NaN
    parts of the others as ±0, and scaled by infinity."""
    a, b, c, d = x.re, x.im, y.re, y.im
    partials = ac, bd, ad, bc = lax.mul(a, c), lax.mul(b, d), lax.mul(a, d), lax.mul(b, c)
    product = Pair(lax.sub(ac, bd), lax.add(ad, bc))
    lost = lax.bitwise_and(_is_nan(product.re), _is_nan(product.im))
    infinite_x = lax.bitwise_or(_is_inf(a), _is_inf(b))
    infinite_y = lax.bitwise_or(_is_inf(c), _is_inf(d))

    def boxed(part, infinite_factor):
        ones, zeros = lax.full_like(part, 1), lax.full_like(part, 0)
        unit = lax.select(_is_inf(part), ones, zeros)
        return _copysign(
            lax.select(infinite_factor, unit, lax.select(_is_nan(part), zeros, part)), part
        )

    unit_x = Pair(boxed(a, infinite_x), boxed(b, infinite_x))
    again = scale(mul(unit_x, Pair(boxed(c, infinite_y), boxed(d, infinite_y))), _c(a, np.inf))
    overflow = functools.reduce(lax.bitwise_or, [_is_inf(p) for p in partials])
    recomputed = functools.reduce(lax.bitwise_or, [infinite_x, infinite_y, overflow])
    return _where(lax.bitwise_and(lost, recomputed), again, product)


def power(x: Pair, y: Pair) -> Pair:
    """x ** y as NumPy's power computes it: 1 where y = 0; at x = 0, 0 where Re y > 0,
    NaN + NaN i otherwise; for a whole real y with |y| < 100, by repeated squaring (so
    (1 + 1j) ** 2 is 2j exactly, where exp(y log x) leaves 1e-16 in the real part);
    elsewhere exp(y log x)."""
    result = exp(mul_keeping_infinities(y, log(x)))
    real_exponent = lax.eq(y.im, _c(y.im, 0))
    n = lax.abs(y.re)
    whole = lax.bitwise_and(
        real_exponent, lax.bitwise_and(lax.eq(y.re, lax.floor(y.re)), lax.lt(n, _c(n, 100)))
    )
    n = lax.select(whole, n, lax.full_like(n, 0))
    # NumPy's loop: a running product from 1 times x^(2^k) for each bit k of |y|, except
    # that y = 1, 2 and 3 are x, x x and x (x x) (which differ from it only in zeros' signs
    # and where a part is infinite).
    squared, square = one_like(x), x
    for bit in range(7):  # (|y| < 100 < 2^7)
        taken = lax.eq(lax.rem(lax.floor(lax.mul(n, _c(n, 2.0**-bit))), _c(n, 2)), _c(n, 1))
        squared = _where(taken, mul(squared, square), squared)
        if bit == 0:
            one_or_three = lax.bitwise_or(lax.eq(y.re, _c(y.re, 1)), lax.eq(y.re, _c(y.re, 3)))
            squared = _where(one_or_three, x, squared)
        square = mul(square, square)
    squared = _where(lax.eq(y.re, _c(y.re, 2)), mul(x, x), squared)
    squared = _where(lax.lt(y.re, _c(y.re, 0)), div(one_like(x), squared), squared)
    result = _where(whole, squared, result)
    base_zero = lax.bitwise_and(lax.eq(x.re, _c(x.re, 0)), lax.eq(x.im, _c(x.im, 0)))
    positive = lax.gt(y.re, _c(y.re, 0))
    at_zero = lax.select(positive, lax.full_like(result.re, 0), lax.full_like(result.re, np.nan))
    result = _where(base_zero, Pair(at_zero, at_zero), result)
    exponent_zero = lax.bitwise_and(real_exponent, lax.eq(y.re, _c(y.re, 0)))
    return _where(exponent_zero, one_like(x), result)


def integer_power(x: Pair, n: int) -> Pair:
    """x ** n as NumPy's power computes a whole exponent below 100 in magnitude: x, x x and
    x (x x) for n = 1, 2 and 3, else a running product from 1 times x^(2^k) for each bit k of
    |n| (divided into 1 for n < 0), and 0 ** n 0 for n > 0, NaN + NaN i for n < 0; the
    products' zeros' signs and infinities are NumPy's. Larger |n| are `power`'s exp(n log x),
    as there."""
    if n == 0:
        return one_like(x)
    if abs(n) >= 100:
        exponent = Pair(lax.full_like(x.re, n), lax.full_like(x.im, 0))
        return power(x, exponent)
    if n == 1:
        result = x
    elif n == 2:
        result = mul(x, x)
    elif n == 3:
        result = mul(x, mul(x, x))
    else:
        result, base, k = one_like(x), x, abs(n)
        while k:
            if k & 1:
                result = mul(result, base)
            k >>= 1
            if k:
                base = mul(base, base)
        if n < 0:
            result = div(one_like(x), result)
    zero = lax.bitwise_and(lax.eq(x.re, _c(x.re, 0)), lax.eq(x.im, _c(x.im, 0)))
    at_zero = lax.full_like(x.re, 0 if n > 0 else np.nan)
    return each_part(lambda part: lax.select(zero, at_zero, part), result)


def sign(x: Pair) -> Pair:
    """z / |z| as (u, v) / sqrt(u² + v²) with u = a / m and v = b / m, m the larger part's
    magnitude: one of u and v is ±1, so nothing overflows and a subnormal z keeps its
    precision. +0 at 0; as NumPy has it, an infinite part gives ±1 on its axis, two of them
    NaN + NaN i."""
    a, b = x.re, x.im
    abs_a, abs_b = lax.abs(a), lax.abs(b)
    m = lax.max(abs_a, abs_b)
    zero = lax.eq(m, _c(m, 0))
    safe = lax.select(zero, lax.full_like(m, 1), m)
    u, v = lax.div(a, safe), lax.div(b, safe)
    modulus_ = lax.sqrt(lax.add(lax.mul(u, u), lax.mul(v, v)))
    zeros = lax.full_like(m, 0)
    re = lax.select(zero, zeros, lax.div(u, modulus_))
    im = lax.select(zero, zeros, lax.div(v, modulus_))
    infinite_a, infinite_b = lax.eq(abs_a, _c(a, np.inf)), lax.eq(abs_b, _c(b, np.inf))
    on_axis = lax.select(lax.bitwise_and(infinite_a, infinite_b), lax.full_like(m, np.nan), zeros)
    re = lax.select(infinite_b, on_axis, lax.select(infinite_a, lax.clamp(-1.0, a, 1.0), re))
    im = lax.select(infinite_a, on_axis, lax.select(infinite_b, lax.clamp(-1.0, b, 1.0), im))
    return Pair(re, im)


def _unary(fn: Callable) -> Callable:
    return lambda out_avals, x, **params: fn(x)


def _broadcast_to(value, shape):
    return value if value.shape == tuple(shape) else lax.broadcast_in_dim(value, shape, ())


def _binary(fn: Callable) -> Callable:
    def rule(out_avals, x, y):
        shape = out_avals[0].shape
        x, y = (each_part(lambda p: _broadcast_to(p, shape), v) for v in (x, y))
        return fn(x, y)

    return rule


for _name, _fn in {
    "neg": neg,
    "conj": lambda x: Pair(x.re, lax.neg(x.im)),
    "real": lambda x: x.re,
    "imag": lambda x: x.im,
    "abs": modulus,
    "sign": sign,
    "exp": exp,
    "exp2": lambda x: exp(scale(x, _c(x.re, np.log(2)))),
    "log": log,
    "log1p": log1p,
    "expm1": expm1,
    "sqrt": sqrt,
    "rsqrt": lambda x: div(one_like(x), sqrt(x)),
    "sin": sin,
    "cos": cos,
    "tan": tan,
    "sinh": sinh,
    "cosh": cosh,
    "tanh": tanh,
    "asin": asin,
    "acos": acos,
    "atan": atan,
    "asinh": asinh,
    "acosh": acosh,
    "atanh": atanh,
    "logistic": logistic,
    "stop_gradient": lambda x: x,
    "sharding_constraint": lambda x: x,
}.items():
    rules[_name] = _unary(_fn)

for _name, _fn in {
    "add": add,
    "sub": sub,
    "mul": mul,
    "div": div,
    "pow": power,
    "eq": lambda x, y: lax.bitwise_and(lax.eq(x.re, y.re), lax.eq(x.im, y.im)),
    "ne": lambda x, y: lax.bitwise_or(lax.ne(x.re, y.re), lax.ne(x.im, y.im)),
}.items():
    rules[_name] = _binary(_fn)


def _complex_rule(out_avals, x, y):
    shape = out_avals[0].shape
    return Pair(_broadcast_to(x, shape), _broadcast_to(y, shape))


rules["complex"] = _complex_rule


def _iota_rule(out_avals, *, dtype, shape, dimension):
    """The count as the real part, 0 as the imaginary one."""
    re = lax.broadcasted_iota(dtypes.real_dtype(dtype), shape, dimension)
    return Pair(re, lax.full_like(re, 0))


rules["iota"] = _iota_rule
rules["integer_pow"] = lambda out_avals, x, *, y: integer_power(x, y)


def _convert_rule(out_avals, x, *, new_dtype, weak_type):
    if dtypes.is_complex(new_dtype):
        part = dtypes.real_dtype(new_dtype)
        x = _parts(x)
        return Pair(lax.convert_element_type(x.re, part), lax.convert_element_type(x.im, part))
    if new_dtype == dtypes.bool_:
        return lax.bitwise_or(lax.ne(x.re, _c(x.re, 0)), lax.ne(x.im, _c(x.im, 0)))
    # A complex value converts to a real dtype through its real part.
    return lax.convert_element_type(x.re, new_dtype)


rules["convert_element_type"] = _convert_rule


def _bitcast_rule(out_avals, x, *, new_dtype):
    """Reinterpret the interleaved parts' bytes (a complex result: as its parts' dtype)."""
    source = _interleave(x) if isinstance(x, Pair) else x
    target = dtypes.real_dtype(new_dtype)
    shape = out_avals[0].shape + ((2,) if dtypes.is_complex(new_dtype) else ())
    if source.dtype.itemsize < target.itemsize:
        ratio = target.itemsize // source.dtype.itemsize
        source = lax.reshape(source, (source.size // ratio, ratio))
    out = lax.reshape(lax.bitcast_convert_type(source, target), shape)
    return _split(out) if dtypes.is_complex(new_dtype) else out


rules["bitcast_convert_type"] = _bitcast_rule


# ---------------------------------------------------------------------------------------------
# Primitives that act on the parts separately: data movement and sums, the collectives among
# them too (each part is summed or moved across the devices on its own). Real operands
# (indices, selectors) are shared by both parts.

_PARTWISE = (
    "broadcast_in_dim reshape transpose squeeze rev slice dynamic_slice "
    "dynamic_update_slice concatenate pad gather scatter scatter_add select_n reduce_sum "
    "cumsum reduce_window_sum psum psum_scatter all_gather ppermute all_to_all pbroadcast"
).split()


def _part_params(params: dict, which: str) -> dict:
    """The parameters for one part: a gather's fill value is a parameter, not an operand, so
    each part fills with its own part of it (2.5 fills as 2.5 + 0j)."""
    fill = params.get("fill_value")
    if fill is None:
        return params
    return {**params, "fill_value": getattr(complex(fill), "real" if which == "re" else "imag")}


def _partwise(name: str) -> Callable:
    prim = PRIMITIVES[name]

    def rule(out_avals, *operands, **params):
        def part(which):
            return [getattr(v, which) if isinstance(v, Pair) else v for v in operands]

        re = prim.bind(*part("re"), **_part_params(params, "re"))
        im = prim.bind(*part("im"), **_part_params(params, "im"))
        if prim.multiple_results:
            return [Pair(r, i) for r, i in zip(re, im)]
        return Pair(re, im)

    return rule


def _scatter_pairs_rule(name: str) -> Callable:
    """The updates landing on an element multiply it (scatter_mul) or are compared with it
    (scatter_min/max, NumPy's order of complex numbers) in turn, as complex numbers: each
    result's parts from the last one's (`<name>_pairs`), as the reference does."""

    def rule(out_avals, operand, indices, updates, **params):
        parts = [_interleave(_parts(operand)), indices, _interleave(_parts(updates))]
        return _split(PAIRS[name].bind(*parts, **params))

    return rule


def _bilinear(name: str) -> Callable:
    """dot_general and convolutions: (a + bi)(c + di) as four real products (fewer when an
    operand is real)."""
    prim = PRIMITIVES[name]

    def rule(out_avals, x, y, *, preferred_element_type, **params):
        preferred = preferred_element_type and dtypes.real_dtype(preferred_element_type)

        def product(u, v):
            if u is None or v is None:
                return None
            return prim.bind(u, v, preferred_element_type=preferred, **params)

        def total(terms, signs):
            out = None
            for term, sign_ in zip(terms, signs):
                if term is None:
                    continue
                if out is None:
                    out = term if sign_ > 0 else lax.neg(term)
                else:
                    out = lax.add(out, term) if sign_ > 0 else lax.sub(out, term)
            return out

        a, b = (x.re, x.im) if isinstance(x, Pair) else (x, None)
        c, d = (y.re, y.im) if isinstance(y, Pair) else (y, None)
        re = total([product(a, c), product(b, d)], [1, -1])
        im = total([product(a, d), product(b, c)], [1, 1])
        return Pair(re, lax.full_like(re, 0) if im is None else im)

    return rule


def _sort_rule(out_avals, *operands, num_keys, **params):
    """Complex operands (never keys) travel as their two parts."""
    flat = []
    for v in operands:
        flat += [v.re, v.im] if isinstance(v, Pair) else [v]
    results = iter(sort_p.bind(*flat, num_keys=num_keys, **params))
    return [
        Pair(next(results), next(results)) if isinstance(v, Pair) else next(results)
        for v in operands
    ]


def _moved(x, axes):
    """`x` with `axes` first, flattened into one leading axis."""
    rest = [d for d in range(x.ndim) if d not in axes]
    moved = lax.transpose(x, tuple(axes) + tuple(rest))
    size = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    return lax.reshape(moved, (size,) + tuple(x.shape[d] for d in rest))


def _reduce_prod_rule(out_avals, x, *, axes):
    """A product tree: pair up the factors, multiply the halves, until one remains. An odd
    factor out is carried to the next round as it is (a product with 1 + 0j would turn an
    infinite part's partner into NaN)."""
    z = each_part(lambda p: _moved(p, axes), x)
    while z.re.shape[0] > 1:
        n = z.re.shape[0]
        paired = n - n % 2
        even = each_part(lambda p, n=paired: lax.slice_in_dim(p, 0, n, 2, 0), z)
        odd = each_part(lambda p, n=paired: lax.slice_in_dim(p, 1, n, 2, 0), z)
        products = mul(even, odd)
        if n % 2:
            left = each_part(lambda p, n=n: lax.slice_in_dim(p, n - 1, n, 1, 0), z)
            products = Pair(
                lax.concatenate([products.re, left.re], 0),
                lax.concatenate([products.im, left.im], 0),
            )
        z = products
    if z.re.shape[0] == 0:
        shape = out_avals[0].shape
        return Pair(lax.full(shape, 1, z.re.dtype), lax.full(shape, 0, z.im.dtype))
    return each_part(lambda p: lax.index_in_dim(p, 0, 0, False), z)


def _shifted(p, fill, shift: int, axis: int, reverse: bool):
    """`p` moved `shift` places along `axis` (back when `reverse`), `fill` in the gap (all
    of it when `shift` reaches past the end, as for an empty axis)."""
    n = p.shape[axis]
    shift = min(shift, n)
    config = [(0, 0, 0)] * p.ndim
    config[axis] = (0, shift, 0) if reverse else (shift, 0, 0)
    start = shift if reverse else 0
    kept = lax.slice_in_dim(p, start, start + n - shift, 1, axis)
    return lax.pad(kept, _c(p, fill), config)


def _cumprod_rule(out_avals, x, *, axis, reverse):
    """Prefix products by doubling: after step k each element holds the product of the 2^k
    elements ending at it. The first 2^k elements, which have no earlier factor, are kept as
    they are (a product with 1 + 0j would turn an infinite part's partner into NaN)."""
    z, shift = x, 1
    n = x.re.shape[axis]
    position = lax.broadcasted_iota(np.int32, x.re.shape, axis)
    while shift < n:
        earlier = Pair(
            _shifted(z.re, 1, shift, axis, reverse), _shifted(z.im, 0, shift, axis, reverse)
        )
        has_earlier = (
            lax.lt(position, lax.full_like(position, n - shift))
            if reverse
            else lax.ge(position, lax.full_like(position, shift))
        )
        product = mul(z, earlier)
        z = Pair(
            lax.select(has_earlier, product.re, z.re), lax.select(has_earlier, product.im, z.im)
        )
        shift *= 2
    return z


for _name in _PARTWISE:
    rules[_name] = _partwise(_name)
for _name in ("scatter_mul", "scatter_min", "scatter_max"):
    rules[_name] = _scatter_pairs_rule(_name)
rules["dot_general"] = _bilinear("dot_general")
rules["conv_general_dilated"] = _bilinear("conv_general_dilated")
rules["sort"] = _sort_rule
rules["reduce_prod"] = _reduce_prod_rule
rules["cumprod"] = _cumprod_rule


# ---------------------------------------------------------------------------------------------
# Fourier transforms. An axis whose length has only prime factors up to _LARGEST_RADIX is
# transformed by radix passes (`lax.fft_passes`): Stockham's autosort steps, one loop kernel
# each, which vectorize over the columns after the axis, or with few columns over the
# positions of the butterflies. Any other length is Bluestein's convolution, done by radix
# passes over about twice the length (`_bluestein`). (The four-step method with radix passes
# and a blocked transpose between them was slower: the transpose of 2^20 points alone took
# twice as long as the ten passes, its rows 4 KiB apart contending for cache sets.)

_LARGEST_RADIX = 13  # the largest prime a radix pass takes (its DFT is written out in scalars)


def _turns(rows, columns, n: int, inverse: bool) -> np.ndarray:
    """exp(∓2πi r c / n) for the outer product of `rows` and `columns`, in complex128 (the
    angle reduced mod n first, so it is exact to rounding for any n). Multiples of a quarter
    turn are exactly 0 and ±1 (cos(π/2) is 6e-17 in floating point, which gave fft([1, 2, 3,
    4])[2] an imaginary part of -7e-16)."""
    turns = np.multiply.outer(rows, columns) % n
    angle = 2 * np.pi * turns / n
    sign = 1.0 if inverse else -1.0
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * turns) % n == 0
    quadrant = (4 * turns) // n
    cos = np.where(quarter, np.array([1.0, 0.0, -1.0, 0.0])[quadrant % 4], cos)
    sin = np.where(quarter, np.array([0.0, 1.0, 0.0, -1.0])[quadrant % 4], sin)
    return cos + 1j * sign * sin


def _twiddles(rows, columns, n: int, inverse: bool, dtype) -> Pair:
    """`_turns` as a Pair of constants of `dtype`."""
    turns = _turns(rows, columns, n, inverse)
    parts = turns.real.astype(dtype), turns.imag.astype(dtype)
    return Pair(*(Array(np.ascontiguousarray(p)) for p in parts))


def _radices(n: int) -> list[int] | None:
    """The radices of the passes transforming n points, or None where n has a prime factor
    larger than _LARGEST_RADIX. The odd primes go first and the powers of two as fours, then
    an eight last (or a two, or a four): a pass's classes are the product of the later
    radices, and with 3 to 7 of them (a four before the last four) its loop is too short to
    vectorize and its points too far apart to interleave."""
    odd = []
    for p in range(3, _LARGEST_RADIX + 1, 2):  # (odd composites find no factor left)
        while n % p == 0:
            odd.append(p)
            n //= p
    twos = n.bit_length() - 1
    if n != 1 << twos:
        return None
    if twos < 3:
        return odd + ([n] if n > 1 else [])
    fours, two = divmod(twos - 3, 2)
    return odd + [2] * two + [4] * fours + [8]


def _radix_passes(z: Pair, inverse: bool, interleaved: tuple | None = None, scale=1.0):
    """The DFT along the middle axis of parts shaped (G, n, B), times `scale`: a Pair, or
    given `interleaved`, one array of that shape holding the parts interleaved."""
    n = z.re.shape[1]
    dtype = z.re.dtype
    length, stride = 1, n
    radices = _radices(n)
    for i, radix in enumerate(radices):
        stride //= radix
        factors = _twiddles(np.arange(1, radix), np.arange(length), length * radix, inverse, dtype)
        last = i == len(radices) - 1
        parts = fft_passes.fft_radix_pass(
            z.re,
            z.im,
            factors.re,
            factors.im,
            radix=radix,
            stride=stride,
            inverse=inverse,
            interleaved=interleaved if last else None,
            scale=scale if last else 1.0,
        )
        if last and interleaved is not None:
            return parts[0]
        z = Pair(*parts)
        length *= radix
    return z


def _reshape(z: Pair, shape) -> Pair:
    if z.interleaved is not None:
        return Pair.of_interleaved(lax.reshape(z.interleaved, tuple(shape) + (2,)))
    return each_part(lambda p: lax.reshape(p, tuple(shape)), z)


def _one_or_two_points(z: Pair) -> Pair:
    """The DFT along the middle axis of parts shaped (G, n, B) for n of 1 or 2: the points
    themselves, or their sum and difference. Nothing is multiplied, as in the reference's FFT:
    a product with 0 would make NaN of an infinite part and spread a NaN part to the other
    part of every output (fft([nan]) was nan + nan j, fft([inf]) inf + nan j)."""
    if z.re.shape[1] == 1:
        return z
    first, second = (
        each_part(lambda p, i=i: lax.slice_in_dim(p, i, i + 1, 1, 1), z) for i in (0, 1)
    )
    total, difference = add(first, second), sub(first, second)
    return Pair(
        lax.concatenate([total.re, difference.re], 1),
        lax.concatenate([total.im, difference.im], 1),
    )


def _convolution_length(n: int) -> int:
    """The smallest m >= 2n - 1 that is 8 times a number with no prime factor above 7.
    Bluestein's convolution of n points needs at least 2n - 1; such lengths are at most a few
    percent longer for long axes (a power of two can be twice as long) and their radix passes
    take about as long per point, and with the factor 8 every pass but the last has at least 8
    classes, so none is unrolled (an unrolled pass with the chirp's products fused into its
    loads took a second to compile)."""
    least = -(-(2 * n - 1) // 8)
    best = 1 << (least - 1).bit_length()
    odd3 = 1
    while odd3 < best:
        odd5 = odd3
        while odd5 < best:
            odd7 = odd5
            while odd7 < best:
                twos = (-(-least // odd7) - 1).bit_length()  # the fewest with odd7 2^twos >= least
                best = min(best, odd7 << twos)
                odd7 *= 7
            odd5 *= 5
        odd3 *= 3
    return 8 * best


def _chirp(n: int, inverse: bool) -> np.ndarray:
    """c[t] = exp(∓πi t² / n) for t < n in complex128, its angle taken from the exact integer
    t² mod 2n: π t² / n rounded as a float errs by about eps t² / n radians, 1e-11 near
    t = n = 10^4, which float64 transforms would show."""
    t = np.arange(n, dtype=np.int64)
    return _turns(t * t % (2 * n), 1, 2 * n, inverse)


def _bluestein(z: Pair, inverse: bool, scale: float) -> Pair:
    """The DFT along the middle axis of parts shaped (G, n, B), times `scale`, by Bluestein's
    chirp-z transform. With c = `_chirp(n)`, jk = (j² + k² - (k - j)²) / 2 turns the DFT into a
    convolution:

        X[k] = c[k] sum_j (c[j] x[j]) conj(c[k - j]),

    computed as a cyclic one of m >= 2n - 1 points (the c[j] x[j] padded with zeros, conj c
    wrapped around so that it holds conj c[-t] = conj c[t] at m - t): radix passes forward, a
    product with the spectrum of that wrapped conj c, and radix passes back. The spectrum is
    computed here in float64 with the inverse's 1 / m and `scale` in it, and rounded once; the
    products with c fuse into the first pass's loads and into the reader of the result."""
    n = z.re.shape[1]
    m = _convolution_length(n)
    dtype = z.re.dtype
    chirp = _chirp(n, inverse)
    wrapped = np.zeros(m, np.complex128)
    wrapped[:n] = np.conj(chirp)
    wrapped[m - n + 1 :] = np.conj(chirp[:0:-1])
    spectrum = np.fft.fft(wrapped) * (scale / m)

    def along_axis(values: np.ndarray, shape) -> Pair:
        parts = values.real.astype(dtype), values.imag.astype(dtype)
        return Pair(*(lax.broadcast_in_dim(Array(part), shape, (1,)) for part in parts))

    chirped = mul(z, along_axis(chirp, z.re.shape))
    padding = [(0, 0, 0), (0, m - n, 0), (0, 0, 0)]
    padded = each_part(lambda p: lax.pad(p, _c(p, 0), padding), chirped)
    forward = _radix_passes(padded, inverse=False)
    convolved = _radix_passes(mul(forward, along_axis(spectrum, forward.re.shape)), inverse=True)
    kept = each_part(lambda p: lax.slice_in_dim(p, 0, n, 1, 1), convolved)
    return mul(kept, along_axis(chirp, kept.re.shape))


def _dft_axis(z: Pair, axis: int, inverse: bool, interleaved: bool = False, scale=1.0) -> Pair:
    """The DFT along `axis` times `scale`, on the parts reshaped to (G, n, B) with the axis in
    the middle (no transposes); by radix passes, the last writes the parts interleaved where
    asked to (the transform's result, which the program's output holds so)."""
    shape = z.re.shape
    n = shape[axis]
    columns = _reshape(z, (math.prod(shape[:axis]), n, math.prod(shape[axis + 1 :])))
    if n <= 2:
        z = _one_or_two_points(columns)
        if scale != 1:
            z = each_part(lambda p: lax.mul(p, _c(p, scale)), z)
    elif _radices(n) is None:
        z = _bluestein(columns, inverse, scale)
    elif interleaved:
        return Pair.of_interleaved(_radix_passes(columns, inverse, shape + (2,), scale))
    else:
        z = _radix_passes(columns, inverse, None, scale)
    return _reshape(z, shape)


def _halves(n: int) -> bool:
    """Whether a real transform of length n goes through a complex one of length n / 2."""
    return n % 2 == 0 and n >= 4


def _rfft_last(x, n: int) -> Pair:
    """The non-negative frequencies of real x's last axis from one complex transform of the
    h = n / 2 points x[2j] + i x[2j+1] (`lax.fft_passes.fft_real_pass`)."""
    last = x.ndim - 1
    half = n // 2
    z = Pair(lax.slice_in_dim(x, 0, n, 2, last), lax.slice_in_dim(x, 1, n, 2, last))
    spectrum = _reshape(_dft_axis(z, last, False), (math.prod(x.shape[:-1]), half))
    factors = _turns(np.arange(half), 1, n, False) / 2j
    table = Pair(*(Array(part.astype(x.dtype)) for part in (factors.real, factors.imag)))
    shape = x.shape[:-1] + (half + 1, 2)
    return Pair.of_interleaved(
        fft_passes.fft_real_pass(spectrum.re, spectrum.im, table.re, table.im, shape=shape)
    )


def _irfft_last(z: Pair, n: int, scale: float):
    """n real points from the h + 1 stored frequencies along z's last axis, times `scale`:
    `lax.fft_passes.fft_real_inverse_pass` gives the Z whose inverse transform of length h
    holds them as x[2j] + i x[2j+1], which its last radix pass writes as the output (or
    Bluestein's convolution returns, for the output's kernel to interleave)."""
    lead = z.re.shape[:-1]
    half = n // 2
    rows = _reshape(z, (math.prod(lead), half + 1))
    factors = 1j * scale * _turns(np.arange(half), 1, n, True)
    dtype = z.re.dtype
    table = Pair(*(Array(part.astype(dtype)) for part in (factors.real, factors.imag)))
    parts = fft_passes.fft_real_inverse_pass(rows.re, rows.im, table.re, table.im, scale=scale)
    packed = _reshape(Pair(*parts), (math.prod(lead), half, 1))
    if _radices(half) is None:
        return lax.reshape(_interleave(_bluestein(packed, True, 1.0)), lead + (n,))
    return _radix_passes(packed, True, lead + (n,))


def _fft_rule(out_avals, x, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    inverse = fft_type in (FftType.IFFT, FftType.IRFFT)
    ndim = x.re.ndim if isinstance(x, Pair) else x.ndim
    axes = list(range(ndim - k, ndim))
    n = fft_lengths[-1]
    last = ndim - 1
    scale = 1 / math.prod(fft_lengths) if inverse else 1.0
    if fft_type == FftType.RFFT and _halves(n):
        z = _rfft_last(x, n)
        for axis in reversed(axes[:-1]):
            z = _dft_axis(z, axis, False, axis == axes[0])
        return z
    z = _parts(x)
    if fft_type == FftType.RFFT:
        for axis in reversed(axes):
            z = _dft_axis(z, axis, False)
            if axis == last:
                z = each_part(lambda p: lax.slice_in_dim(p, 0, n // 2 + 1, 1, last), z)
        return z
    if fft_type == FftType.IRFFT:
        for axis in axes[:-1]:
            z = _dft_axis(z, axis, True)
        if _halves(n):
            return _irfft_last(z, n, scale)
        # The stored halves of a Hermitian spectrum: the rest is their mirror image's
        # conjugate; the imaginary parts of the real frequencies (0 and n / 2) do not count.
        stored = z.re.shape[-1]
        real_bins = np.zeros(stored, bool)
        real_bins[0] = True
        real_bins[-1] = n % 2 == 0
        keep = lax.broadcast_in_dim(Array(~real_bins), z.im.shape, (last,))
        z = Pair(z.re, lax.select(keep, z.im, lax.full_like(z.im, 0)))
        mirrored = each_part(
            lambda p: lax.rev(lax.slice_in_dim(p, 1, n - stored + 1, 1, last), (last,)), z
        )
        full = Pair(
            lax.concatenate([z.re, mirrored.re], last),
            lax.concatenate([z.im, lax.neg(mirrored.im)], last),
        )
        return _dft_axis(full, last, True, scale=scale).re
    for axis in reversed(axes):
        first = axis == axes[0]  # transformed last
        z = _dft_axis(z, axis, inverse, first, scale if first else 1.0)
    return z


rules["fft"] = _fft_rule


def _through_pairs(name: str) -> Callable:
    """A decomposition of complex matrices as its `_pairs` form (LAPACK's complex routines on
    the interleaved parts), its complex results split into parts again."""
    prim = PAIRS[name]

    def rule(out_avals, *operands, **params):
        outs = prim.bind(*(_interleave(_parts(v)) for v in operands), **params)
        outs = outs if prim.multiple_results else [outs]
        parts = [_split(o) if dtypes.is_complex(a.dtype) else o for o, a in zip(outs, out_avals)]
        return parts if prim.multiple_results else parts[0]

    return rule


def _eig_rule(out_avals, a, **params):
    """Complex matrices go to zgeev as interleaved parts; a real matrix's geev returns its
    vectors packed: column j of a complex pair (imaginary part > 0) is v_j + i v_(j+1), its
    partner's the conjugate, and a real eigenvalue's column is real."""
    if isinstance(a, Pair):
        return _through_pairs("eig")(out_avals, a, **params)
    real, imaginary, packed = eig_parts_p.bind(a)
    values = Pair(real, imaginary)
    if not params["compute_right_eigenvectors"]:
        return [values]
    last = packed.ndim - 1
    shape = packed.shape
    rows = tuple(range(last - 1)) + (last,)
    imaginary = lax.broadcast_in_dim(imaginary, shape, rows)
    first, second = lax.gt(imaginary, _c(imaginary, 0)), lax.lt(imaginary, _c(imaginary, 0))
    previous = _shifted(packed, 0, 1, last, False)  # column j holds column j - 1
    following = _shifted(packed, 0, 1, last, True)  # column j holds column j + 1
    zero = lax.full_like(packed, 0)
    re = lax.select(second, previous, packed)
    im = lax.select(first, following, lax.select(second, lax.neg(packed), zero))
    return [values, Pair(re, im)]


rules["eig"] = _eig_rule
for _name in ("lu", "triangular_solve", "cholesky", "qr", "eigh", "svd", "schur"):
    rules[_name] = _through_pairs(_name)


# ---------------------------------------------------------------------------------------------
# Control flow and calls: their programs are lowered as they are staged again through the
# public loop and branch functions, with Pairs traveling as pytrees.


def _cond_rule(out_avals, index, *operands, branches):
    functions = [lambda *ops, b=b: _evaluate_closed(b, ops) for b in branches]
    return list(lax.switch(index, functions, *operands))


def _while_rule(out_avals, *operands, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts = list(operands[:cond_nconsts])
    body_consts = list(operands[cond_nconsts : cond_nconsts + body_nconsts])
    carry = list(operands[cond_nconsts + body_nconsts :])
    return list(
        lax.while_loop(
            lambda c: _evaluate_closed(cond_jaxpr, cond_consts + list(c))[0],
            lambda c: _evaluate_closed(body_jaxpr, body_consts + list(c)),
            carry,
        )
    )


def _scan_rule(out_avals, *operands, jaxpr, num_consts, num_carry, length, reverse, unroll):
    consts = list(operands[:num_consts])
    init = list(operands[num_consts : num_consts + num_carry])
    xs = list(operands[num_consts + num_carry :])

    def body(carry, x):
        outs = _evaluate_closed(jaxpr, consts + list(carry) + list(x))
        return outs[:num_carry], outs[num_carry:]

    carry, ys = lax.scan(body, init, xs, length=length, reverse=reverse, unroll=unroll)
    return list(carry) + list(ys)


def _call_rule(param: str) -> Callable:
    return lambda out_avals, *operands, **params: _evaluate_closed(params[param], operands)


rules["cond"] = _cond_rule
rules["while"] = _while_rule
rules["scan"] = _scan_rule
for _name, _param in (
    ("jit", "jaxpr"),
    ("checkpoint", "jaxpr"),
    ("custom_jvp_call", "call_jaxpr"),
    ("custom_vjp_call", "call_jaxpr"),
    ("custom_vmap_call", "call_jaxpr"),
    ("linear_solve", "call_jaxpr"),
):
    rules[_name] = _call_rule(_param)
