"""One test recipe per primitive: how to draw valid operands, and an independent reference.

`RECIPES[name]` says how the generic rule checks (`funcgrad.tools.rule_checks`) exercise the
primitive `name`: `case` draws the shapes, dtypes and params of one example, `operand(case, i)`
draws operand i's values inside the domain where the primitive is smooth, `fun` applies it
through the public lax API, and `reference` computes the same thing independently (NumPy,
SciPy's special functions or a written formula, in float64). `WITHOUT_RECIPE` gives the reason
for each primitive the generic checks cannot run, and `Recipe.reasons` the reason for each
rule of a recipe that they skip; the suite fails on a primitive with neither.

`COMPILED_BACKENDS` lists the jit backends whose column the generic jit check fills, each
compared with eager execution; a new backend is one more entry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import scipy.linalg
import scipy.special
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad as fg
from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import GpuDevice
from funcgrad.devices import gpu_available
from funcgrad.lax import random_bits
from funcgrad.lax.elementwise import ge_p
from funcgrad.tools.strategies import arrays, axes, shapes

# The real GPU joins where CuPy finds one, so the same checks run there.
CUDA_BACKENDS = ["cuda_emulator"] + (["cuda"] if gpu_available() else [])
COMPILED_BACKENDS = ["numpy", "llvm"] + CUDA_BACKENDS

# Primitives a compiled backend does not handle yet, each with what is missing: their jit
# checks are expected failures that report when the gap closes (none today).
COMPILED_GAPS: dict[tuple[str, str], str] = {}

FLOATS = (dtypes.float32, dtypes.float64)
COMPLEXES = (dtypes.complex64, dtypes.complex128)
INTS = (dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32)
SIGNED_INTS = (dtypes.int8, dtypes.int32, dtypes.int64)

_TOLERANCE = {
    "float64": dict(rtol=1e-10, atol=1e-12),
    "float32": dict(rtol=1e-5, atol=1e-6),
    "float16": dict(rtol=2e-3, atol=2e-3),
    "bfloat16": dict(rtol=2e-2, atol=2e-2),
    "complex128": dict(rtol=1e-10, atol=1e-12),
    "complex64": dict(rtol=2e-5, atol=2e-6),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """The static part of one example: operand shapes and dtypes, and the params."""

    shapes: tuple
    dtypes: tuple
    params: dict = dataclasses.field(default_factory=dict)

    @property
    def arity(self) -> int:
        return len(self.shapes)

    def in_float64(self) -> Case:
        """The same example with float operands in float64, for finite differences."""
        widened = tuple(
            np.dtype(dtypes.float64)
            if dtypes.is_float(d)
            else np.dtype(dtypes.complex128)
            if np.dtype(d).kind == "c"
            else d
            for d in self.dtypes
        )
        return dataclasses.replace(self, dtypes=widened)


Domain = tuple  # (low, high) of an operand's values


@dataclasses.dataclass(frozen=True)
class Recipe:
    fun: Callable
    reference: Callable
    case: st.SearchStrategy
    domains: tuple = ((-10.0, 10.0),)
    values: Callable | None = None  # (case, i) -> strategy, for operands a domain cannot say
    jvp_order: int = 2
    smooth_at: Callable | None = None  # (*operands, **params) -> bool: differentiable there
    reasons: dict = dataclasses.field(default_factory=dict)  # rule -> why it is not checked
    rtol_scale: float = 1.0
    # The case for derivative checks; by default the same example in float64.
    derivative_case: Callable = Case.in_float64

    def operand(self, case: Case, i: int) -> st.SearchStrategy:
        if self.values is not None:
            drawn = self.values(case, i)
            if drawn is not None:
                return drawn
        low, high = self.domains[min(i, len(self.domains) - 1)]
        return arrays(case.dtypes[i], case.shapes[i], min_value=low, max_value=high)

    def smooth(self, *operands, **params) -> bool:
        return self.smooth_at is None or bool(self.smooth_at(*operands, **params))

    def tolerance(self, dtype) -> dict:
        tolerance = _TOLERANCE.get(np.dtype(dtype).name, dict(rtol=0, atol=0))
        return {k: v * self.rtol_scale for k, v in tolerance.items()}


# ---------------------------------------------------------------------------------------------
# Building blocks


def _same_shape_case(arity: int, dtype_choices, max_dims: int = 3, max_side: int = 4):
    return st.builds(
        lambda dtype, shape: Case((shape,) * arity, (np.dtype(dtype),) * arity),
        st.sampled_from(dtype_choices),
        shapes(1, max_dims, 1, max_side),
    )


def elementwise(fun, reference, arity=1, dtype_choices=FLOATS, domains=((-10.0, 10.0),), **kw):
    return Recipe(
        fun=fun,
        reference=reference,
        case=_same_shape_case(arity, dtype_choices),
        domains=domains,
        **kw,
    )


def _away_from(points: Callable, margin: float = 1e-3) -> Callable:
    """smooth_at: every value of the first operand lies `margin` away from `points(x)`."""
    return lambda x, *rest, **params: np.all(np.abs(x - points(x)) > margin)


def _distinct(x, margin: float = 1e-3) -> bool:
    flat = np.sort(np.ravel(x))
    return flat.size < 2 or np.min(np.diff(flat)) > margin


NOT_DIFFERENTIABLE = {
    "jvp": "the output is integer or boolean: there is no tangent to compare",
    "transpose": "not linear and not differentiable",
}
ZERO_DERIVATIVE = "the derivative is zero wherever it exists; finite differences check that"


def _cases_with(dtype_choices, max_dims=3, max_side=4, min_dims=1, params=None, arity=1):
    """Cases of `arity` same-shaped operands whose params are drawn from the shape."""

    @st.composite
    def draw(draw):
        dtype = np.dtype(draw(st.sampled_from(dtype_choices)))
        shape = draw(shapes(min_dims, max_dims, 1, max_side))
        drawn = draw(params(shape)) if params is not None else {}
        return Case((shape,) * arity, (dtype,) * arity, drawn)

    return draw()


def _axis(shape):
    return st.integers(0, len(shape) - 1)


def _accumulate(ufunc):
    def reference(x, axis, reverse):
        if reverse:
            return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis), axis)
        return ufunc.accumulate(x, axis=axis)

    return reference


def _shift_reference(kind: str):
    def reference(x, s):
        bits = x.dtype.itemsize * 8
        x = np.asarray(x)
        s_clipped = np.clip(s, 0, bits - 1).astype(x.dtype)
        in_range = (s >= 0) & (s < bits)
        if kind == "left":
            return np.where(in_range, np.left_shift(x, s_clipped), 0).astype(x.dtype)
        if kind == "arithmetic":
            signed = x.view(np.dtype(f"i{x.dtype.itemsize}"))
            shifted = np.right_shift(signed, s_clipped.astype(signed.dtype))
            fill = np.where(signed < 0, -1, 0).astype(signed.dtype)
            return np.where(in_range, shifted, fill).astype(signed.dtype).view(x.dtype)
        unsigned = x.view(np.dtype(f"u{x.dtype.itemsize}"))
        shifted = np.right_shift(unsigned, s_clipped.astype(unsigned.dtype))
        return np.where(in_range, shifted, 0).astype(unsigned.dtype).view(x.dtype)

    return reference


def _shift_values(case, i):
    if i == 1:
        bits = np.dtype(case.dtypes[0]).itemsize * 8
        return arrays(case.dtypes[1], case.shapes[1], min_value=0, max_value=bits + 2)
    return None


def _population_count(x):
    unsigned = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.vectorize(lambda v: bin(int(v)).count("1"), otypes=[x.dtype])(unsigned)


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _finite_or_not(case, i):
    elements = st.floats(allow_nan=True, allow_infinity=True, width=case.dtypes[i].itemsize * 8)
    return hnp.arrays(case.dtypes[i], case.shapes[i], elements=elements)


def _unique_floats(case, i, bound=10.0):
    elements = st.floats(-bound, bound, width=case.dtypes[i].itemsize * 8)
    return hnp.arrays(case.dtypes[i], case.shapes[i], elements=elements, unique=True)


# ---------------------------------------------------------------------------------------------
# Elementwise primitives

_UNARY = {
    # name: (lax function, reference, domain, options)
    "neg": (lax.neg, np.negative, (-10, 10), {}),
    "abs": (lax.abs, np.abs, (-10, 10), dict(smooth_at=_away_from(np.zeros_like, 0.1))),
    "sin": (lax.sin, np.sin, (-10, 10), {}),
    "cos": (lax.cos, np.cos, (-10, 10), {}),
    "tan": (lax.tan, np.tan, (-1.4, 1.4), {}),
    "asin": (lax.asin, np.arcsin, (-0.9, 0.9), {}),
    "acos": (lax.acos, np.arccos, (-0.9, 0.9), {}),
    "atan": (lax.atan, np.arctan, (-10, 10), {}),
    "sinh": (lax.sinh, np.sinh, (-5, 5), {}),
    "cosh": (lax.cosh, np.cosh, (-5, 5), {}),
    "tanh": (lax.tanh, np.tanh, (-5, 5), {}),
    "asinh": (lax.asinh, np.arcsinh, (-10, 10), {}),
    "acosh": (lax.acosh, np.arccosh, (1.1, 10), {}),
    "atanh": (lax.atanh, np.arctanh, (-0.9, 0.9), {}),
    "exp": (lax.exp, np.exp, (-10, 10), {}),
    "exp2": (lax.exp2, np.exp2, (-10, 10), {}),
    "expm1": (lax.expm1, np.expm1, (-10, 10), {}),
    "log": (lax.log, np.log, (0.1, 10), {}),
    "log1p": (lax.log1p, np.log1p, (-0.9, 10), {}),
    "log10": (fnp.log10, np.log10, (0.1, 10), {}),
    "log2": (fnp.log2, np.log2, (0.1, 10), {}),
    "logistic": (lax.logistic, lambda x: 1 / (1 + np.exp(-x)), (-10, 10), {}),
    "sqrt": (lax.sqrt, np.sqrt, (0.1, 10), {}),
    "rsqrt": (lax.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 10), {}),
    "cbrt": (lax.cbrt, np.cbrt, (-10, 10), dict(smooth_at=_away_from(np.zeros_like, 0.1))),
    "erf": (lax.erf, scipy.special.erf, (-3, 3), {}),
    "erfc": (lax.erfc, scipy.special.erfc, (-3, 3), {}),
    "erf_inv": (lax.erf_inv, scipy.special.erfinv, (-0.9, 0.9), {}),
    "lgamma": (lax.lgamma, scipy.special.gammaln, (0.1, 10), {}),
    "digamma": (lax.digamma, scipy.special.psi, (0.1, 10), dict(jvp_order=1)),
    "sign": (lax.sign, np.sign, (-10, 10), dict(smooth_at=_away_from(np.zeros_like))),
    "floor": (lax.floor, np.floor, (-10, 10), dict(smooth_at=_away_from(np.round))),
    "ceil": (lax.ceil, np.ceil, (-10, 10), dict(smooth_at=_away_from(np.round))),
    "round": (
        lax.round,
        _round_half_away,
        (-10, 10),
        dict(smooth_at=_away_from(lambda x: np.floor(x) + 0.5)),
    ),
}

_ZERO_DERIVATIVE_MUTATION = {"mutate jvp": ZERO_DERIVATIVE}

RECIPES: dict[str, Recipe] = {}

# Unary primitives checked on complex operands too (both parts drawn from the domain, which
# keeps them off the branch cuts of log, sqrt and their kin, and off the poles of tan); abs
# of a complex number is its modulus.
_ALSO_COMPLEX = set("neg abs sin cos tan sinh cosh exp exp2 expm1 log log1p sqrt rsqrt".split())

for _name, (_fun, _reference, _domain, _options) in _UNARY.items():
    _options = dict(_options)
    if _name in ("sign", "floor", "ceil", "round"):
        _options["reasons"] = _ZERO_DERIVATIVE_MUTATION
    _choices = FLOATS + COMPLEXES if _name in _ALSO_COMPLEX else FLOATS
    RECIPES[_name] = elementwise(
        _fun, _reference, domains=(_domain,), dtype_choices=_choices, **_options
    )

_BINARY_FLOAT = {
    "add": (lax.add, np.add, ((-10, 10),), {}),
    "sub": (lax.sub, np.subtract, ((-10, 10),), {}),
    "mul": (lax.mul, np.multiply, ((-10, 10),), {}),
    "div": (lax.div, np.divide, ((-10, 10), (0.5, 10)), {}),
    "max": (
        lax.max,
        np.maximum,
        ((-10, 10),),
        dict(smooth_at=lambda x, y: np.all(abs(x - y) > 1e-3)),
    ),
    "min": (
        lax.min,
        np.minimum,
        ((-10, 10),),
        dict(smooth_at=lambda x, y: np.all(abs(x - y) > 1e-3)),
    ),
    "pow": (lax.pow, np.power, ((0.5, 5), (-3, 3)), {}),
    "atan2": (
        lax.atan2,
        np.arctan2,
        ((-10, 10),),
        dict(
            smooth_at=lambda y, x: (
                np.all(np.hypot(x, y) > 0.1) and np.all((x > 0) | (np.abs(y) > 1e-2))
            )
        ),
    ),
    "rem": (
        lax.rem,
        np.fmod,
        ((-10, 10), (0.5, 5)),
        dict(smooth_at=lambda x, y: np.all(np.abs(x / y - np.round(x / y)) > 1e-3)),
    ),
    "nextafter": (lax.nextafter, np.nextafter, ((-10, 10),), dict(jvp_order=1)),
}

for _name, (_fun, _reference, _domains, _options) in _BINARY_FLOAT.items():
    _choices = FLOATS + COMPLEXES if _name in ("add", "sub", "mul", "div", "pow") else FLOATS
    RECIPES[_name] = elementwise(
        _fun, _reference, arity=2, domains=_domains, dtype_choices=_choices, **_options
    )

# The parts of complex numbers. abs of a complex number is its modulus, smooth away from 0.
RECIPES["real"] = elementwise(lax.real, np.real, dtype_choices=COMPLEXES)
RECIPES["imag"] = elementwise(lax.imag, np.imag, dtype_choices=COMPLEXES)
RECIPES["conj"] = elementwise(lax.conj, np.conj, dtype_choices=COMPLEXES)
RECIPES["complex"] = elementwise(
    lax.complex, lambda x, y: x + 1j * y, arity=2, dtype_choices=FLOATS
)

for _name, _fun, _reference in [
    ("eq", lax.eq, np.equal),
    ("ne", lax.ne, np.not_equal),
    ("lt", lax.lt, np.less),
    ("le", lax.le, np.less_equal),
    ("gt", lax.gt, np.greater),
    ("ge", lax.ge, np.greater_equal),
]:
    RECIPES[_name] = elementwise(
        _fun,
        _reference,
        arity=2,
        dtype_choices=FLOATS + INTS,
        domains=((-3, 3),),
        reasons=NOT_DIFFERENTIABLE,
    )

for _name, _fun, _reference in [
    ("and", lax.bitwise_and, np.bitwise_and),
    ("or", lax.bitwise_or, np.bitwise_or),
    ("xor", lax.bitwise_xor, np.bitwise_xor),
]:
    RECIPES[_name] = elementwise(
        _fun,
        _reference,
        arity=2,
        dtype_choices=INTS + (dtypes.bool_,),
        domains=((None, None),),
        reasons=NOT_DIFFERENTIABLE,
    )

RECIPES["not"] = elementwise(
    lax.bitwise_not,
    np.invert,
    dtype_choices=INTS + (dtypes.bool_,),
    domains=((None, None),),
    reasons=NOT_DIFFERENTIABLE,
)
RECIPES["population_count"] = elementwise(
    lax.population_count,
    _population_count,
    dtype_choices=INTS,
    domains=((None, None),),
    reasons=NOT_DIFFERENTIABLE,
)
for _name, _fun, _kind in [
    ("shift_left", lax.shift_left, "left"),
    ("shift_right_arithmetic", lax.shift_right_arithmetic, "arithmetic"),
    ("shift_right_logical", lax.shift_right_logical, "logical"),
]:
    RECIPES[_name] = elementwise(
        _fun,
        _shift_reference(_kind),
        arity=2,
        dtype_choices=INTS,
        domains=((None, None),),
        values=_shift_values,
        reasons=NOT_DIFFERENTIABLE,
    )
RECIPES["is_finite"] = elementwise(
    lax.is_finite, np.isfinite, values=_finite_or_not, reasons=NOT_DIFFERENTIABLE
)
RECIPES["integer_pow"] = Recipe(
    fun=lambda x, y: lax.integer_pow(x, y),
    reference=lambda x, y: np.power(x, float(y)),
    case=_cases_with(
        FLOATS, params=lambda shape: st.fixed_dictionaries({"y": st.sampled_from([-2, 0, 1, 2, 3])})
    ),
    domains=((0.5, 3.0),),
)
RECIPES["clamp"] = Recipe(
    fun=lambda low, x, high: lax.clamp(low, x, high),
    reference=lambda low, x, high: np.minimum(np.maximum(x, low), high),
    case=_same_shape_case(3, FLOATS + SIGNED_INTS),
    domains=((-10, -1), (-10, 10), (1, 10)),
    smooth_at=lambda low, x, high: (
        np.all(np.abs(x - low) > 1e-3) and np.all(np.abs(x - high) > 1e-3)
    ),
)
RECIPES["select_n"] = Recipe(
    fun=lambda which, *cases: lax.select_n(which, *cases),
    reference=lambda which, *cases: np.choose(which.astype(np.int64), cases),
    case=st.builds(
        lambda dtype, shape, n, which_dtype: Case(
            (shape,) * (n + 1),
            (np.dtype(which_dtype if n > 2 else dtypes.bool_),) + (np.dtype(dtype),) * n,
        ),
        st.sampled_from(FLOATS),
        shapes(1, 3, 1, 4),
        st.integers(2, 3),
        st.sampled_from([dtypes.int32]),
    ),
    values=lambda case, i: (
        arrays(case.dtypes[0], case.shapes[0], min_value=0, max_value=case.arity - 2)
        if i == 0
        else None
    ),
)
RECIPES["convert_element_type"] = Recipe(
    fun=lambda x, new_dtype: lax.convert_element_type(x, new_dtype),
    reference=lambda x, new_dtype: x.astype(new_dtype),
    # Widening float32 to float64 keeps the output exact, and a linear function's central
    # difference is exact at any step, so float32 inputs check the derivative fully.
    derivative_case=lambda c: Case(
        c.shapes, (np.dtype(FLOATS[0]),), {"new_dtype": np.dtype(FLOATS[1])}
    ),
    case=_cases_with(FLOATS).map(
        lambda c: dataclasses.replace(
            c, params={"new_dtype": np.dtype(FLOATS[0] if c.dtypes[0] == FLOATS[1] else FLOATS[1])}
        )
    ),
    rtol_scale=10,
)
RECIPES["bitcast_convert_type"] = Recipe(
    fun=lambda x, new_dtype: lax.bitcast_convert_type(x, new_dtype),
    reference=lambda x, new_dtype: x.astype(
        {4: np.float32, 8: np.float64}[new_dtype.itemsize]
    ).view(new_dtype),
    case=_cases_with(FLOATS).map(
        lambda c: dataclasses.replace(c, params={"new_dtype": np.dtype(f"i{c.dtypes[0].itemsize}")})
    ),
    reasons=NOT_DIFFERENTIABLE,
)
RECIPES["reduce_precision"] = Recipe(
    fun=lambda x: lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
    reference=lambda x: x.astype(np.float16).astype(x.dtype),
    case=_same_shape_case(1, FLOATS),
    smooth_at=_away_from(np.zeros_like, 1e-3),
    values=lambda case, i: arrays(
        case.dtypes[i], case.shapes[i], min_value=-10, max_value=10
    ).filter(lambda x: np.all(np.abs(x) > 1e-3)),
    reasons={
        "jvp": "rounding: its derivative is the identity by convention, which finite differences "
        "of a step function cannot check",
        "transpose": "rounding is linear only by that same convention",
    },
)
RECIPES["stop_gradient"] = elementwise(
    lax.stop_gradient,
    lambda x: x,
    reasons={
        "jvp": "zero by definition (differentiation is stopped), not the function's derivative",
        "transpose": "its jvp is a symbolic zero, so no cotangent ever reaches a transpose",
    },
)


def _constrained_where_it_is(x):
    """x constrained to a layout that fits every shape: whole on one device, the one a
    concrete x is on (a GPU's array stays there), the first CPU device for a traced x."""
    device = x.device if isinstance(x, fg.Array) else fg.devices("cpu")[0]
    return lax.with_sharding_constraint(x, fg.sharding.SingleDeviceSharding(device))


RECIPES["sharding_constraint"] = elementwise(_constrained_where_it_is, lambda x: x)


# ---------------------------------------------------------------------------------------------
# Reductions, scans and sorting


def _reduction(fun, reference, dtype_choices=FLOATS, domain=(-10, 10), **kw):
    return Recipe(
        fun=fun,
        reference=reference,
        case=_cases_with(
            dtype_choices,
            params=lambda shape: st.fixed_dictionaries({"axes": axes(len(shape), min_size=1)}),
        ),
        domains=(domain,),
        **kw,
    )


RECIPES["reduce_sum"] = _reduction(lax.reduce_sum, lambda x, axes: np.sum(x, axis=axes))
RECIPES["reduce_prod"] = _reduction(
    lax.reduce_prod, lambda x, axes: np.prod(x, axis=axes), domain=(0.5, 2.0)
)
RECIPES["reduce_max"] = _reduction(
    lax.reduce_max, lambda x, axes: np.max(x, axis=axes), smooth_at=lambda x, axes: _distinct(x)
)
RECIPES["reduce_min"] = _reduction(
    lax.reduce_min, lambda x, axes: np.min(x, axis=axes), smooth_at=lambda x, axes: _distinct(x)
)
RECIPES["reduce_and"] = _reduction(
    lax.reduce_and,
    lambda x, axes: np.all(x, axis=axes),
    (dtypes.bool_,),
    reasons=NOT_DIFFERENTIABLE,
)
RECIPES["reduce_or"] = _reduction(
    lax.reduce_or, lambda x, axes: np.any(x, axis=axes), (dtypes.bool_,), reasons=NOT_DIFFERENTIABLE
)
for _name, _fun, _reference in [
    ("argmax", lax.argmax, np.argmax),
    ("argmin", lax.argmin, np.argmin),
]:
    RECIPES[_name] = Recipe(
        fun=lambda x, axis, _fun=_fun: _fun(x, axis, dtypes.int32),
        reference=lambda x, axis, _reference=_reference: _reference(x, axis=axis).astype(np.int32),
        case=_cases_with(
            FLOATS + SIGNED_INTS, params=lambda shape: st.fixed_dictionaries({"axis": _axis(shape)})
        ),
        reasons=NOT_DIFFERENTIABLE,
    )


def _cumulative(fun, reference, domain=(-10, 10), **kw):
    return Recipe(
        fun=lambda x, axis, reverse: fun(x, axis, reverse),
        reference=reference,
        case=_cases_with(
            FLOATS,
            params=lambda shape: st.fixed_dictionaries(
                {"axis": _axis(shape), "reverse": st.booleans()}
            ),
        ),
        domains=(domain,),
        **kw,
    )


RECIPES["cumsum"] = _cumulative(lax.cumsum, _accumulate(np.add))
RECIPES["cumprod"] = _cumulative(lax.cumprod, _accumulate(np.multiply), domain=(0.5, 2.0))
RECIPES["cummax"] = _cumulative(
    lax.cummax, _accumulate(np.maximum), smooth_at=lambda x, axis, reverse: _distinct(x)
)
RECIPES["cummin"] = _cumulative(
    lax.cummin, _accumulate(np.minimum), smooth_at=lambda x, axis, reverse: _distinct(x)
)
RECIPES["cumlogsumexp"] = _cumulative(lax.cumlogsumexp, _accumulate(np.logaddexp))

RECIPES["sort"] = Recipe(
    fun=lambda x, dimension: lax.sort(x, dimension),
    reference=lambda x, dimension: np.sort(x, axis=dimension),
    case=_cases_with(
        FLOATS, params=lambda shape: st.fixed_dictionaries({"dimension": _axis(shape)})
    ),
    smooth_at=lambda x, dimension: _distinct(x),
)
RECIPES["top_k"] = Recipe(
    fun=lambda x, k: lax.top_k(x, k),
    reference=lambda x, k: (
        -np.sort(-x, axis=-1)[..., :k],
        np.argsort(-x, axis=-1, kind="stable")[..., :k].astype(np.int32),
    ),
    case=_cases_with(
        FLOATS, params=lambda shape: st.fixed_dictionaries({"k": st.integers(1, shape[-1])})
    ),
    values=_unique_floats,
    smooth_at=lambda x, k: _distinct(x),
)


# ---------------------------------------------------------------------------------------------
# Shapes and indexing


@st.composite
def _broadcast_case(draw):
    shape = draw(shapes(1, 3, 1, 3))
    lead = draw(st.integers(2, 3))
    out_shape = (lead,) + tuple(3 if side == 1 else side for side in shape)
    params = {"shape": out_shape, "broadcast_dimensions": tuple(range(1, len(shape) + 1))}
    return Case((shape,), (np.dtype(draw(st.sampled_from(FLOATS))),), params)


RECIPES["broadcast_in_dim"] = Recipe(
    fun=lambda x, shape, broadcast_dimensions: lax.broadcast_in_dim(x, shape, broadcast_dimensions),
    reference=lambda x, shape, broadcast_dimensions: np.broadcast_to(x, shape),
    case=_broadcast_case(),
)
RECIPES["reshape"] = Recipe(
    fun=lambda x, new_sizes: lax.reshape(x, new_sizes),
    reference=lambda x, new_sizes: np.reshape(x, new_sizes),
    case=_cases_with(
        FLOATS,
        params=lambda shape: (
            st.sampled_from([(math.prod(shape),), shape[::-1], (1,) + shape])
            .filter(lambda sizes: tuple(sizes) != shape)
            .map(lambda sizes: {"new_sizes": tuple(sizes)})
        ),
    ),
)
RECIPES["transpose"] = Recipe(
    fun=lambda x, permutation: lax.transpose(x, permutation),
    reference=lambda x, permutation: np.transpose(x, permutation),
    case=_cases_with(
        FLOATS,
        min_dims=2,
        params=lambda shape: (
            st.permutations(range(len(shape)))
            .filter(lambda p: list(p) != sorted(p))
            .map(lambda p: {"permutation": tuple(p)})
        ),
    ),
)
RECIPES["rev"] = Recipe(
    fun=lambda x, dimensions: lax.rev(x, dimensions),
    reference=lambda x, dimensions: np.flip(x, dimensions),
    case=_cases_with(
        FLOATS, params=lambda shape: axes(len(shape), min_size=1).map(lambda a: {"dimensions": a})
    ),
)


@st.composite
def _squeeze_case(draw):
    shape = list(draw(shapes(1, 3, 2, 3)))
    where = draw(st.lists(st.integers(0, len(shape)), min_size=1, max_size=2))
    for position in sorted(where, reverse=True):
        shape.insert(position, 1)
    ones = tuple(i for i, side in enumerate(shape) if side == 1)
    dims = draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
    return Case(
        (tuple(shape),),
        (np.dtype(draw(st.sampled_from(FLOATS))),),
        {"dimensions": tuple(sorted(dims))},
    )


RECIPES["squeeze"] = Recipe(
    fun=lambda x, dimensions: lax.squeeze(x, dimensions),
    reference=lambda x, dimensions: np.squeeze(x, dimensions),
    case=_squeeze_case(),
)


@st.composite
def _slice_params(draw, shape):
    starts, limits, strides = [], [], []
    for side in shape:
        start = draw(st.integers(0, side - 1))
        starts.append(start)
        limits.append(draw(st.integers(start + 1, side)))
        strides.append(draw(st.integers(1, 2)))
    return {
        "start_indices": tuple(starts),
        "limit_indices": tuple(limits),
        "strides": tuple(strides),
    }


RECIPES["slice"] = Recipe(
    fun=lambda x, start_indices, limit_indices, strides: lax.slice(
        x, start_indices, limit_indices, strides
    ),
    reference=lambda x, start_indices, limit_indices, strides: x[
        tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))
    ],
    case=_cases_with(FLOATS, params=_slice_params).filter(
        lambda c: any(
            start > 0 or limit < side or stride > 1
            for start, limit, stride, side in zip(
                c.params["start_indices"],
                c.params["limit_indices"],
                c.params["strides"],
                c.shapes[0],
            )
        )
    ),
)


def _pad_reference(x, value, padding_config):
    for axis, (low, high, interior) in enumerate(padding_config):
        side = x.shape[axis]
        dilated_shape = list(x.shape)
        dilated_shape[axis] = side + max(side - 1, 0) * interior
        dilated = np.full(dilated_shape, value, x.dtype)
        index = [slice(None)] * x.ndim
        index[axis] = slice(None, None, interior + 1)
        dilated[tuple(index)] = x
        pad_width = [(0, 0)] * x.ndim
        pad_width[axis] = (max(low, 0), max(high, 0))
        x = np.pad(dilated, pad_width, constant_values=value)
        crop = [slice(None)] * x.ndim
        crop[axis] = slice(max(-low, 0), x.shape[axis] - max(-high, 0))
        x = x[tuple(crop)]
    return x


RECIPES["pad"] = Recipe(
    fun=lambda x, value, padding_config: lax.pad(x, value, padding_config),
    reference=lambda x, value, padding_config: _pad_reference(x, value[()], padding_config),
    case=st.builds(
        lambda dtype, shape, config: Case(
            (shape, ()), (np.dtype(dtype),) * 2, {"padding_config": config}
        ),
        st.sampled_from(FLOATS),
        shapes(1, 3, 2, 4),
        st.just(None),
    ).flatmap(
        lambda c: st.tuples(
            *[
                st.tuples(st.integers(-1, 2), st.integers(-1, 2), st.integers(0, 1))
                for _ in c.shapes[0]
            ]
        ).map(lambda config: dataclasses.replace(c, params={"padding_config": config}))
    ),
)


def _index_values(case, i):
    if i == 0:
        return None
    return arrays(case.dtypes[i], (), min_value=-1, max_value=max(case.shapes[0]) + 1)


def _clamped_starts(shape, sizes, starts):
    """Negative starts count from the end (as Python's); then the window is moved inside."""
    starts = [int(s) + side if s < 0 else int(s) for s, side in zip(starts, shape)]
    return [int(np.clip(s, 0, side - size)) for s, side, size in zip(starts, shape, sizes)]


@st.composite
def _dynamic_slice_case(draw, update: bool):
    shape = draw(shapes(1, 3, 2, 4))
    sizes = tuple(draw(st.integers(1, side)) for side in shape)
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    index_dtype = np.dtype(draw(st.sampled_from([dtypes.int32, dtypes.int64])))
    operands = (shape, sizes) if update else (shape,)
    return Case(
        operands + ((),) * len(shape),
        (dtype,) * len(operands) + (index_dtype,) * len(shape),
        {} if update else {"slice_sizes": sizes},
    )


def _dynamic_slice_reference(x, *starts, slice_sizes):
    begin = _clamped_starts(x.shape, slice_sizes, starts)
    return x[tuple(slice(b, b + size) for b, size in zip(begin, slice_sizes))]


def _dynamic_update_slice_reference(x, update, *starts):
    begin = _clamped_starts(x.shape, update.shape, starts)
    out = x.copy()
    out[tuple(slice(b, b + size) for b, size in zip(begin, update.shape))] = update
    return out


RECIPES["dynamic_slice"] = Recipe(
    fun=lambda x, *starts, slice_sizes: lax.dynamic_slice(x, starts, slice_sizes),
    reference=_dynamic_slice_reference,
    case=_dynamic_slice_case(update=False),
    values=_index_values,
)
RECIPES["dynamic_update_slice"] = Recipe(
    fun=lambda x, update, *starts: lax.dynamic_update_slice(x, update, starts),
    reference=_dynamic_update_slice_reference,
    case=_dynamic_slice_case(update=True),
    values=lambda case, i: None if i < 2 else _index_values(case, i),
)


@st.composite
def _concatenate_case(draw):
    shape = draw(shapes(1, 3, 1, 3))
    dimension = draw(_axis(shape))
    count = draw(st.integers(2, 3))
    operand_shapes = tuple(
        shape[:dimension] + (draw(st.integers(1, 3)),) + shape[dimension + 1 :]
        for _ in range(count)
    )
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    return Case(operand_shapes, (dtype,) * count, {"dimension": dimension})


RECIPES["concatenate"] = Recipe(
    fun=lambda *xs, dimension: lax.concatenate(xs, dimension),
    reference=lambda *xs, dimension: np.concatenate(xs, dimension),
    case=_concatenate_case(),
)


@st.composite
def _take_case(draw, updates: bool):
    shape = draw(shapes(1, 3, 2, 4))
    index_shape = draw(shapes(1, 2, 1, 3))
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    operand_shapes = (shape, index_shape)
    if updates:
        operand_shapes += (index_shape + shape[1:],)
    return Case(operand_shapes, (dtype, np.dtype(dtypes.int32)) + (dtype,) * updates)


def _row_indices(case, i, unique=False):
    if i != 1:
        return None
    rows = case.shapes[0][0]
    if unique:
        size = math.prod(case.shapes[1])
        return st.permutations(range(rows)).map(
            lambda p: np.array(p[:size], np.int32).reshape(case.shapes[1])
        )
    return arrays(case.dtypes[1], case.shapes[1], min_value=-rows, max_value=rows - 1)


RECIPES["gather"] = Recipe(
    fun=lambda x, rows: x[rows],
    reference=lambda x, rows: x[rows],
    case=_take_case(updates=False),
    values=_row_indices,
)


def _scatter_reference(ufunc):
    def reference(x, rows, updates):
        out = x.copy()
        ufunc.at(out, rows, updates)
        return out

    return reference


def _scatter_set(x, rows, updates):
    out = x.copy()
    out[rows] = updates
    return out


def _scatter_extremum_values(case, i):
    """Rows to scatter to, and operand and updates of whole numbers none of which meet (the
    operand's even, the updates' odd, each array's distinct): where two values meet, min and
    max have no derivative (`smooth_at`). Values drawn freely, even distinct ones, come
    closer than its margin so often that hypothesis gave up on filtering them. Every value
    is exact in each float dtype (bfloat16 holds the integers up to 256)."""
    if i == 1:
        return _row_indices(case, i)
    size = math.prod(case.shapes[i])
    parity = 0 if i == 0 else 1
    return st.permutations(range(parity - 256, 256, 2)).map(
        lambda p: np.array(p[:size], case.dtypes[i]).reshape(case.shapes[i])
    )


_SCATTER_EXTREMUM = dict(
    values=_scatter_extremum_values,
    smooth_at=lambda x, rows, updates: _distinct(np.concatenate([x.ravel(), updates.ravel()])),
)

for _name, _method, _reference, _unique, _options in [
    ("scatter_add", "add", _scatter_reference(np.add), False, {}),
    ("scatter_mul", "multiply", _scatter_reference(np.multiply), True, {}),
    ("scatter", "set", _scatter_set, True, {}),
    ("scatter_min", "min", _scatter_reference(np.minimum), False, _SCATTER_EXTREMUM),
    ("scatter_max", "max", _scatter_reference(np.maximum), False, _SCATTER_EXTREMUM),
]:
    RECIPES[_name] = Recipe(
        fun=lambda x, rows, updates, _method=_method, _unique=_unique: getattr(x.at[rows], _method)(
            updates, unique_indices=_unique
        ),
        reference=_reference,
        case=_take_case(updates=True).filter(
            lambda c, _unique=_unique: not _unique or math.prod(c.shapes[1]) <= c.shapes[0][0]
        ),
        **{"values": lambda case, i, _unique=_unique: _row_indices(case, i, _unique), **_options},
    )


# ---------------------------------------------------------------------------------------------
# Contractions, convolutions and windows


@st.composite
def _dot_general_case(draw):
    sides = st.integers(2, 3)
    batch = [draw(sides) for _ in range(draw(st.integers(0, 1)))]
    contract = [draw(sides) for _ in range(draw(st.integers(1, 2)))]
    lhs_free = [draw(sides) for _ in range(draw(st.integers(0, 1)))]
    rhs_free = [draw(sides) for _ in range(draw(st.integers(0, 1)))]
    # Each operand's axes in a drawn order, and the contracting axes paired in a drawn order.
    lhs_axes = draw(
        st.permutations(
            [("b", i) for i in range(len(batch))]
            + [("c", i) for i in range(len(contract))]
            + [("f", i) for i in range(len(lhs_free))]
        )
    )
    rhs_axes = draw(
        st.permutations(
            [("b", i) for i in range(len(batch))]
            + [("c", i) for i in range(len(contract))]
            + [("g", i) for i in range(len(rhs_free))]
        )
    )
    contract_order = draw(st.permutations(range(len(contract))))
    sizes = {"b": batch, "c": contract, "f": lhs_free, "g": rhs_free}
    lhs_shape = tuple(sizes[k][i] for k, i in lhs_axes)
    rhs_shape = tuple(sizes[k][i] for k, i in rhs_axes)
    numbers = (
        (
            tuple(lhs_axes.index(("c", i)) for i in contract_order),
            tuple(rhs_axes.index(("c", i)) for i in contract_order),
        ),
        (
            tuple(lhs_axes.index(("b", i)) for i in range(len(batch))),
            tuple(rhs_axes.index(("b", i)) for i in range(len(batch))),
        ),
    )
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    return Case((lhs_shape, rhs_shape), (dtype, dtype), {"dimension_numbers": numbers})


def _dot_general_reference(lhs, rhs, dimension_numbers):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    letters = iter("abcdefghijklmnop")
    lhs_letters = [next(letters) for _ in range(lhs.ndim)]
    rhs_letters = [next(letters) for _ in range(rhs.ndim)]
    for l_axis, r_axis in zip(lhs_contract + lhs_batch, rhs_contract + rhs_batch):
        rhs_letters[r_axis] = lhs_letters[l_axis]
    batch = [lhs_letters[a] for a in lhs_batch]
    lhs_free = [c for i, c in enumerate(lhs_letters) if i not in lhs_contract + lhs_batch]
    rhs_free = [c for i, c in enumerate(rhs_letters) if i not in rhs_contract + rhs_batch]
    spec = f"{''.join(lhs_letters)},{''.join(rhs_letters)}->{''.join(batch + lhs_free + rhs_free)}"
    return np.einsum(spec, lhs, rhs)


@st.composite
def _fft_case(draw):
    from funcgrad.lax.fft import FftType

    fft_type = draw(st.sampled_from(list(FftType)))
    # 17: compiled, a prime above 13 is Bluestein's convolution, not radix passes.
    lengths = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 17]), min_size=1, max_size=2)))
    lead = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    if fft_type == FftType.IRFFT:
        shape = lead + lengths[:-1] + (lengths[-1] // 2 + 1,)
    else:
        shape = lead + lengths
    choices = FLOATS if fft_type == FftType.RFFT else COMPLEXES
    dtype = np.dtype(draw(st.sampled_from(choices)))
    return Case((shape,), (dtype,), {"fft_type": fft_type, "fft_lengths": lengths})


def _fft_reference(x, fft_type, fft_lengths):
    axes = tuple(range(-len(fft_lengths), 0))
    transform = [np.fft.fftn, np.fft.ifftn, np.fft.rfftn, np.fft.irfftn][int(fft_type)]
    return transform(x, fft_lengths, axes)


RECIPES["fft"] = Recipe(
    fun=lambda x, fft_type, fft_lengths: lax.fft(x, fft_type, fft_lengths),
    reference=_fft_reference,
    case=_fft_case(),
    domains=((-3.0, 3.0),),
    rtol_scale=10,
)


RECIPES["dot_general"] = Recipe(
    fun=lambda lhs, rhs, dimension_numbers: lax.dot_general(lhs, rhs, dimension_numbers),
    reference=_dot_general_reference,
    case=_dot_general_case(),
    rtol_scale=10,
)


@st.composite
def _conv_case(draw):
    batch, channels, features = (
        draw(st.integers(1, 2)),
        draw(st.integers(1, 2)),
        draw(st.integers(1, 2)),
    )
    width, kernel = draw(st.integers(3, 5)), draw(st.integers(1, 2))
    params = {
        "window_strides": (draw(st.integers(1, 2)),),
        "padding": ((draw(st.integers(0, 1)), draw(st.integers(0, 1))),),
        "rhs_dilation": (draw(st.integers(1, 2)),),
    }
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    return Case(((batch, channels, width), (features, channels, kernel)), (dtype, dtype), params)


def _conv_reference(lhs, rhs, window_strides, padding, rhs_dilation):
    (low, high), (stride,), (dilation,) = padding[0], window_strides, rhs_dilation
    padded = np.pad(lhs, ((0, 0), (0, 0), (low, high)))
    kernel = rhs.shape[2]
    span = (kernel - 1) * dilation + 1
    starts = range(0, padded.shape[2] - span + 1, stride)
    out = np.zeros((lhs.shape[0], rhs.shape[0], len(starts)))
    for position, start in enumerate(starts):
        window = padded[:, :, start : start + span : dilation]
        out[:, :, position] = np.einsum("ncw,ocw->no", window, rhs)
    return out


RECIPES["conv_general_dilated"] = Recipe(
    fun=lambda lhs, rhs, window_strides, padding, rhs_dilation: lax.conv_general_dilated(
        lhs, rhs, window_strides, padding, rhs_dilation=rhs_dilation
    ),
    reference=_conv_reference,
    case=_conv_case().filter(
        lambda c: (
            c.shapes[0][2] + sum(c.params["padding"][0])
            >= (c.shapes[1][2] - 1) * c.params["rhs_dilation"][0] + 1
        )
    ),
    rtol_scale=10,
)


@st.composite
def _window_case(draw):
    shape = draw(shapes(1, 2, 3, 5))
    window = tuple(draw(st.integers(1, min(side, 3))) for side in shape)
    strides = tuple(draw(st.integers(1, 2)) for _ in shape)
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    return Case((shape,), (dtype,), {"window": window, "strides": strides})


def _window_reference(ufunc_reduce):
    def reference(x, window, strides):
        views = np.lib.stride_tricks.sliding_window_view(x, window)
        views = views[tuple(slice(None, None, s) for s in strides)]
        return ufunc_reduce(views, axis=tuple(range(x.ndim, 2 * x.ndim)))

    return reference


for _name, _computation, _init, _reduce, _options in [
    ("reduce_window_sum", lax.add, 0.0, np.sum, {}),
    ("reduce_window_max", lax.max, -np.inf, np.max, dict(smooth_at=lambda x, **p: _distinct(x))),
    ("reduce_window_min", lax.min, np.inf, np.min, dict(smooth_at=lambda x, **p: _distinct(x))),
]:
    RECIPES[_name] = Recipe(
        fun=lambda x, window, strides, _computation=_computation, _init=_init: lax.reduce_window(
            x, _init, _computation, window, strides, "VALID"
        ),
        reference=_window_reference(_reduce),
        case=_window_case(),
        **_options,
    )


def _select_and_scatter_add_reference(source, operand, window, strides):
    out = np.zeros(operand.shape)
    views = np.lib.stride_tricks.sliding_window_view(operand, window)
    views = views[tuple(slice(None, None, s) for s in strides)]
    for position in np.ndindex(*views.shape[: operand.ndim]):
        window_values = views[position]
        chosen = np.unravel_index(np.argmax(window_values), window)
        target = tuple(p * s + c for p, s, c in zip(position, strides, chosen))
        out[target] += source[position]
    return out


@st.composite
def _select_and_scatter_case(draw):
    case = draw(_window_case())
    pooled = tuple(
        (side - w) // s + 1
        for side, w, s in zip(case.shapes[0], case.params["window"], case.params["strides"])
    )
    return Case((pooled, case.shapes[0]), case.dtypes * 2, case.params)


RECIPES["select_and_scatter_add"] = Recipe(
    fun=lambda source, operand, window, strides: lax.select_and_scatter_add(
        source, operand, ge_p, window, strides, "VALID"
    ),
    reference=_select_and_scatter_add_reference,
    case=_select_and_scatter_case(),
    smooth_at=lambda source, operand, **p: _distinct(operand),
    values=lambda case, i: _unique_floats(case, i) if i == 1 else None,
)


# ---------------------------------------------------------------------------------------------
# Linear algebra: operands are made well-conditioned (and symmetric or triangular) by the
# recipe's function, and outputs that are unique only up to signs are compared sign-free.


@st.composite
def _matrix_case(draw, rows_at_least_columns: bool = False, extra=None, dtype_choices=FLOATS):
    batch = draw(st.lists(st.integers(1, 2), max_size=1))
    n = draw(st.integers(2, 4))
    m = draw(st.integers(n, 5)) if rows_at_least_columns else n
    dtype = np.dtype(draw(st.sampled_from(dtype_choices)))
    params = draw(extra) if extra is not None else {}
    return Case((tuple(batch) + (m, n),), (dtype,), params)


def _well_conditioned(case, i):
    """Distinct entries (no ties between pivots) of a matrix far from singular; a complex
    matrix has distinct real parts."""
    dtype = np.dtype(case.dtypes[i])
    if dtype.kind == "c":
        part = dataclasses.replace(case, dtypes=(dtypes.real_dtype(dtype),) * case.arity)
        drawn = st.tuples(
            _unique_floats(part, i, 2.0),
            arrays(part.dtypes[i], case.shapes[i], min_value=-2, max_value=2),
        )
        drawn = drawn.map(lambda pair: (pair[0] + 1j * pair[1]).astype(dtype))
    else:
        drawn = _unique_floats(case, i, 2.0)
    return drawn.filter(lambda a: np.all(np.linalg.cond(a) < 100))


def _spd(a):
    """A symmetric positive definite matrix made from any square `a` (funcgrad or NumPy)."""
    n = a.shape[-1]
    module = np if isinstance(a, np.ndarray) else fnp
    return module.matmul(a, module.swapaxes(a, -1, -2)) + n * module.eye(n, dtype=a.dtype)


def _symmetric(a):
    module = np if isinstance(a, np.ndarray) else fnp
    return a + module.swapaxes(a, -1, -2)


RECIPES["cholesky"] = Recipe(
    fun=lambda a: lax.cholesky(_spd(a)),
    reference=lambda a: np.linalg.cholesky(_spd(a)),
    case=_matrix_case(),
    values=_well_conditioned,
    jvp_order=1,
    rtol_scale=100,
)


def _lu_reference(a):
    lus, pivots, permutations = [], [], []
    for matrix in a.reshape((-1,) + a.shape[-2:]):
        lu, pivot = scipy.linalg.lu_factor(matrix)
        permutation = list(range(matrix.shape[0]))
        for i, p in enumerate(pivot):
            permutation[i], permutation[p] = permutation[p], permutation[i]
        lus.append(lu), pivots.append(pivot), permutations.append(permutation)
    batch = a.shape[:-2]
    return (
        np.array(lus).reshape(a.shape),
        np.array(pivots, np.int32).reshape(batch + a.shape[-1:]),
        np.array(permutations, np.int32).reshape(batch + a.shape[-1:]),
    )


def _pivots_decided(a, **params) -> bool:
    """At every step of the elimination the pivot wins by a margin (|re| + |im|, as getrf
    compares): a near tie would let a perturbation pick the other row, a jump."""
    for matrix in np.asarray(a, np.complex128).reshape((-1,) + a.shape[-2:]):
        work = matrix.copy()
        for j in range(min(work.shape)):
            sizes = np.sort(np.abs(work[j:, j].real) + np.abs(work[j:, j].imag))
            if len(sizes) > 1 and sizes[-1] - sizes[-2] < 1e-2:
                return False
            p = j + np.argmax(np.abs(work[j:, j].real) + np.abs(work[j:, j].imag))
            work[[j, p]] = work[[p, j]]
            work[j + 1 :] -= np.outer(work[j + 1 :, j] / work[j, j], work[j])
    return True


RECIPES["lu"] = Recipe(
    fun=lambda a: lax.lu(a),
    reference=_lu_reference,
    case=_matrix_case(dtype_choices=FLOATS + COMPLEXES),
    values=_well_conditioned,
    smooth_at=_pivots_decided,
    jvp_order=1,
    rtol_scale=100,
)


def _positive_diagonal_qr(q, r, module):
    signs = module.sign(module.diagonal(r, axis1=-2, axis2=-1))
    return q * signs[..., None, :], r * signs[..., :, None]


RECIPES["qr"] = Recipe(
    fun=lambda a: _positive_diagonal_qr(*lax.qr(a, full_matrices=False), fnp),
    reference=lambda a: _positive_diagonal_qr(*np.linalg.qr(a), np),
    case=_matrix_case(rows_at_least_columns=True),
    values=_well_conditioned,
    jvp_order=1,
    rtol_scale=100,
)


def _singular_values_gapped(a, **params):
    s = np.linalg.svd(a, compute_uv=False)
    return np.all(s > 1e-2) and _distinct(s, 1e-2)


def _svd_parts(u, s, vh):
    """Singular values and the squared entries of the singular vectors: free of their signs."""
    return s, u * u, vh * vh


RECIPES["svd"] = Recipe(
    fun=lambda a: _svd_parts(*lax.svd(a, full_matrices=False)),
    reference=lambda a: _svd_parts(*np.linalg.svd(a, full_matrices=False)),
    case=_matrix_case(rows_at_least_columns=True),
    values=_well_conditioned,
    smooth_at=_singular_values_gapped,
    jvp_order=1,
    rtol_scale=1000,
)


def _eigenvalues_gapped(a, **params):
    return _distinct(np.linalg.eigvalsh(_symmetric(a)), 1e-2)


RECIPES["eigh"] = Recipe(
    fun=lambda a: (lambda v, w: (w, v * v))(*lax.eigh(_symmetric(a))),
    reference=lambda a: (lambda w, v: (w, v * v))(*np.linalg.eigh(_symmetric(a))),
    case=_matrix_case(),
    values=_well_conditioned,
    smooth_at=_eigenvalues_gapped,
    jvp_order=1,
    rtol_scale=1000,
)


def _eigenvalues_apart(a, **params) -> bool:
    """The eigenvalues of a general matrix stay at least 0.1 apart: where two meet, their
    derivatives do not exist (and finite differences swing)."""
    w = np.linalg.eigvals(a).reshape(-1, a.shape[-1])
    gaps = np.abs(w[:, :, None] - w[:, None, :]) + np.eye(a.shape[-1]) * 1e9
    return bool(np.all(gaps > 0.1))


def _eig_fun(a, compute_right_eigenvectors):
    """The power sums sum(w**k), k = 1..n, of the eigenvalues (they determine them, and do not
    depend on the order LAPACK returns them in, which a perturbation may change), and with
    `compute_right_eigenvectors` the eigenvalues and eigenvectors as they are."""
    outs = lax.eig(a, compute_right_eigenvectors=compute_right_eigenvectors)
    w = outs[0]
    sums = fnp.stack([fnp.sum(w**k, axis=-1) for k in range(1, a.shape[-1] + 1)], -1)
    return [sums] + (list(outs) if compute_right_eigenvectors else [])


def _eig_reference(a, compute_right_eigenvectors):
    w, v = np.linalg.eig(a)
    sums = np.stack([np.sum(w**k, axis=-1) for k in range(1, a.shape[-1] + 1)], -1)
    return [sums] + ([w, v] if compute_right_eigenvectors else [])


RECIPES["eig"] = Recipe(
    fun=_eig_fun,
    reference=_eig_reference,
    case=_matrix_case(extra=st.fixed_dictionaries({"compute_right_eigenvectors": st.booleans()})),
    # Only eigenvalues have derivatives (eigenvectors' normalization has none).
    derivative_case=lambda c: dataclasses.replace(
        Case.in_float64(c), params={"compute_right_eigenvectors": False}
    ),
    values=_well_conditioned,
    smooth_at=_eigenvalues_apart,
    jvp_order=1,
    rtol_scale=1000,
)


def _schur_fun(a, compute_schur_vectors):
    """What any Schur decomposition of `a` has: the traces of T^k, k = 1..n (those of A^k),
    T's entries below its first subdiagonal (zero), and with the vectors Z^H Z (the identity)
    and Z T Z^H (the matrix itself). The form itself is not unique."""
    outs = lax.linalg.schur(a, compute_schur_vectors=compute_schur_vectors)
    form = outs[0]
    checks = [_trace_powers(form, fnp), fnp.tril(form, -2)]
    if compute_schur_vectors:
        z = outs[1]
        z_h = fnp.conj(fnp.swapaxes(z, -1, -2))
        checks += [z_h @ z, z @ form @ z_h]
    return checks


def _schur_reference(a, compute_schur_vectors):
    checks = [_trace_powers(a, np), np.zeros_like(a)]
    if compute_schur_vectors:
        checks += [np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape), a]
    return checks


def _trace_powers(a, module):
    power, traces = a, []
    for _ in range(a.shape[-1]):
        traces.append(module.trace(power, axis1=-2, axis2=-1))
        power = power @ a
    return module.stack(traces, -1)


RECIPES["schur"] = Recipe(
    fun=_schur_fun,
    reference=_schur_reference,
    case=_matrix_case(
        extra=st.fixed_dictionaries({"compute_schur_vectors": st.booleans()}),
        dtype_choices=FLOATS + COMPLEXES,
    ),
    values=_well_conditioned,
    reasons={
        "jvp": "schur has no derivative rule (the Schur form is not unique)",
        "transpose": "schur has no derivative rule, so nothing to transpose",
    },
    rtol_scale=100,
)


@st.composite
def _triangular_solve_case(draw):
    n, k = draw(st.integers(2, 4)), draw(st.integers(1, 3))
    params = {
        "left_side": draw(st.booleans()),
        "lower": draw(st.booleans()),
        "transpose_a": draw(st.booleans()),
    }
    b_shape = (n, k) if params["left_side"] else (k, n)
    dtype = np.dtype(draw(st.sampled_from(FLOATS + COMPLEXES)))
    return Case(((n, n), b_shape), (dtype, dtype), params)


def _triangle(a, lower):
    module = np if isinstance(a, np.ndarray) else fnp
    n = a.shape[-1]
    part = module.tril(a) if lower else module.triu(a)
    return part + 4 * module.eye(n, dtype=a.dtype)


def _triangular_solve_reference(a, b, left_side, lower, transpose_a):
    matrix = _triangle(a, lower)
    if transpose_a:
        matrix = matrix.T
    if left_side:
        return np.linalg.solve(matrix, b)
    return np.linalg.solve(matrix.T, b.T).T


RECIPES["triangular_solve"] = Recipe(
    fun=lambda a, b, left_side, lower, transpose_a: lax.triangular_solve(
        _triangle(a, lower), b, left_side=left_side, lower=lower, transpose_a=transpose_a
    ),
    reference=_triangular_solve_reference,
    case=_triangular_solve_case(),
    domains=((-2, 2),),
    rtol_scale=100,
)


# ---------------------------------------------------------------------------------------------
# Programs as params: control flow, jit, checkpoint and custom derivatives, each with a small
# smooth body whose reference is the same loop or branch in NumPy.


def _cond_fun(flag, x):
    return fg.lax.cond(flag > 0, lambda v: fnp.sin(v) * 2.0, lambda v: fnp.cos(v) - v, x)


def _while_fun(trips, x):
    def body(carry):
        i, v = carry
        return i + 1, fnp.sin(v) * 1.5 + v

    return fg.lax.while_loop(lambda carry: carry[0] < trips, body, (0, x))[1]


def _while_reference(trips, x):
    for _ in range(int(trips)):
        x = np.sin(x) * 1.5 + x
    return x


def _scan_fun(carry, xs):
    return fg.lax.scan(lambda c, x: (c * 0.9 + fnp.sin(x) * c, c * x), carry, xs)


def _scan_reference(carry, xs):
    ys = []
    for x in xs:
        ys.append(carry * x)
        carry = carry * 0.9 + np.sin(x) * carry
    return carry, np.stack(ys)


@st.composite
def _scan_case(draw):
    shape = draw(shapes(1, 2, 1, 3))
    length = draw(st.integers(1, 3))
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    return Case((shape, (length,) + shape), (dtype, dtype))


def _flag_case(flag_dtype, flag_range):
    return st.builds(
        lambda dtype, shape: Case(((), shape), (np.dtype(flag_dtype), np.dtype(dtype))),
        st.sampled_from(FLOATS),
        shapes(1, 2, 1, 3),
    )


def _flag_values(low, high):
    return lambda case, i: (
        arrays(case.dtypes[0], (), min_value=low, max_value=high) if i == 0 else None
    )


def _device_case():
    """A leading axis of one entry per device (pmap maps over the devices)."""
    return st.builds(
        lambda dtype, rest: Case(((fg.device_count("cpu"), *rest),), (dtype,)),
        st.sampled_from(FLOATS),
        shapes(0, 2, 1, 3),
    )


def _devices_holding(x) -> list:
    """Every CPU device, or the GPUs of the kind holding `x` (as many as the CPU's virtual
    devices, for the emulated GPUs)."""
    device = x.device if type(x) is fg.Array else None
    return fg.devices(device.backend if isinstance(device, GpuDevice) else "cpu")


def _pmapped_sin(x):
    return fg.pmap(lambda a: fnp.sin(a) * 2.0, devices=_devices_holding(x)[: x.shape[0]])(x)


def _shard_mapped_sin(x):
    """Each device's rows, on a mesh of the devices `_devices_holding(x)`."""
    mesh = fg.make_mesh((fg.device_count("cpu"),), ("i",), devices=_devices_holding(x))
    spec = fg.sharding.PartitionSpec("i")
    return fg.shard_map(lambda a: fnp.sin(a) * 2.0, mesh=mesh, in_specs=spec, out_specs=spec)(x)


_custom_sin = fg.custom_jvp(lambda x: fnp.sin(x))
_custom_sin.defjvp(
    lambda primals, tangents: (fnp.sin(primals[0]), fnp.cos(primals[0]) * tangents[0])
)

_custom_tanh = fg.custom_vjp(lambda x: fnp.tanh(x))
_custom_tanh.defvjp(
    lambda x: (fnp.tanh(x), fnp.tanh(x)), lambda y, cotangent: ((1 - y * y) * cotangent,)
)

# The vmap rule computes the same values (each lane's sin(x) * y) in one broadcast product.
_custom_vmapped = fg.custom_batching.custom_vmap(lambda x, y: fnp.sin(x) * y)
_custom_vmapped.def_vmap(lambda size, batched, x, y: (fnp.sin(x) * y, batched[0] or batched[1]))


def _shifted(a):
    """a made safely invertible: a + 8 I, diagonally dominant for entries in (-1, 1)."""
    module = np if isinstance(a, np.ndarray) else fnp
    return a + 8 * module.eye(a.shape[-1], dtype=a.dtype)


def _linear_solve_fun(a, b):
    matrix = _shifted(a)
    return fg.lax.custom_linear_solve(
        lambda x: matrix @ x,
        b,
        lambda matvec, y: fnp.linalg.solve(matrix, y),
        lambda vecmat, y: fnp.linalg.solve(matrix.T, y),
    )


@st.composite
def _linear_solve_case(draw):
    n = draw(st.integers(1, 4))
    b_shape = draw(st.sampled_from([(n,), (n, draw(st.integers(1, 3)))]))
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    return Case(((n, n), b_shape), (dtype, dtype))


RECIPES.update(
    {
        "cond": Recipe(
            fun=_cond_fun,
            reference=lambda flag, x: np.sin(x) * 2.0 if flag > 0 else np.cos(x) - x,
            case=_flag_case(dtypes.int32, (-1, 1)),
            values=_flag_values(-1, 1),
        ),
        "while": Recipe(
            fun=_while_fun,
            reference=_while_reference,
            case=_flag_case(dtypes.int32, (0, 3)),
            domains=((-2, 2),),
            values=_flag_values(0, 3),
            reasons={"transpose": "a while loop is not reverse-differentiable (no transpose)"},
        ),
        "scan": Recipe(
            fun=_scan_fun,
            reference=_scan_reference,
            case=_scan_case(),
            domains=((-2, 2),),
        ),
        "jit": Recipe(
            fun=lambda x, y: fg.jit(lambda a, b: fnp.sin(a) * b)(x, y),
            reference=lambda x, y: np.sin(x) * y,
            case=_same_shape_case(2, FLOATS),
        ),
        "checkpoint": Recipe(
            fun=lambda x: fg.checkpoint(lambda a: fnp.sin(a) * a)(x),
            reference=lambda x: np.sin(x) * x,
            case=_same_shape_case(1, FLOATS),
        ),
        "pmap": Recipe(
            fun=_pmapped_sin,
            reference=lambda x: np.sin(x) * 2.0,
            case=_device_case(),
            reasons={"export": "a program over this process's devices is not exported"},
        ),
        "shard_map": Recipe(
            fun=_shard_mapped_sin,
            reference=lambda x: np.sin(x) * 2.0,
            case=_device_case(),
            reasons={"export": "a program over this process's devices is not exported"},
        ),
        "custom_jvp_call": Recipe(
            fun=_custom_sin,
            reference=np.sin,
            case=_same_shape_case(1, FLOATS),
        ),
        "custom_vmap_call": Recipe(
            fun=_custom_vmapped,
            reference=lambda x, y: np.sin(x) * y,
            case=_same_shape_case(2, FLOATS),
        ),
        "linear_solve": Recipe(
            fun=_linear_solve_fun,
            reference=lambda a, b: np.linalg.solve(_shifted(a), b),
            case=_linear_solve_case(),
            domains=((-1, 1), (-2, 2)),
            rtol_scale=100,
        ),
        "custom_vjp_call": Recipe(
            fun=_custom_tanh,
            reference=np.tanh,
            case=_same_shape_case(1, FLOATS),
            reasons={
                "jvp": "a custom_vjp function has no forward-mode rule by design",
                "transpose": "reverse mode runs the user's bwd through custom_lin",
            },
        ),
    }
)


# ---------------------------------------------------------------------------------------------
# Random bits


def _threefry_reference(key1, key2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al., SC'11), one element at a time."""
    mask = 0xFFFFFFFF
    rotations = (13, 15, 26, 6, 17, 29, 16, 24)

    def one(k1, k2, a, b):
        keys = (k1, k2, k1 ^ k2 ^ 0x1BD11BDA)
        a, b = (a + keys[0]) & mask, (b + keys[1]) & mask
        for round_index in range(20):
            a = (a + b) & mask
            r = rotations[round_index % 8]
            b = (((b << r) | (b >> (32 - r))) & mask) ^ a
            if round_index % 4 == 3:
                s = round_index // 4 + 1
                a = (a + keys[s % 3]) & mask
                b = (b + keys[(s + 1) % 3] + s) & mask
        return a, b

    pairs = [one(*map(int, words)) for words in zip(*(v.ravel() for v in (key1, key2, x1, x2)))]
    return (
        np.array([p[0] for p in pairs], np.uint32).reshape(x1.shape),
        np.array([p[1] for p in pairs], np.uint32).reshape(x1.shape),
    )


RECIPES["threefry2x32"] = Recipe(
    fun=lambda *words: lax.threefry2x32(*words),
    reference=_threefry_reference,
    case=_same_shape_case(4, (dtypes.uint32,)),
    domains=((None, None),),
    reasons=NOT_DIFFERENTIABLE,
)


def _keys_case(params: dict):
    """Keys: uint32 arrays of shape (..., 2), with `params`."""
    return st.builds(
        lambda shape: Case((shape + (2,),), (np.dtype(dtypes.uint32),), params),
        shapes(0, 2, 1, 3),
    )


# The key-use markers of key-reuse checking: the identity on keys (funcgrad.key_reuse reads
# them; tests/test_key_reuse.py checks what they record).
RECIPES["random_consume"] = Recipe(
    fun=lambda keys, by: random_bits.random_consume(keys, by),
    reference=lambda keys, by: keys,
    case=_keys_case({"by": "random.normal"}),
    domains=((None, None),),
    reasons=NOT_DIFFERENTIABLE,
)
RECIPES["random_clone"] = Recipe(
    fun=random_bits.random_clone,
    reference=lambda keys: keys,
    case=_keys_case({}),
    domains=((None, None),),
    reasons=NOT_DIFFERENTIABLE,
)


RECIPES["iota"] = Recipe(
    fun=lambda dtype, size: lax.iota(dtype, size),
    reference=lambda dtype, size: np.arange(size, dtype=dtype),
    case=st.builds(
        lambda dtype, size: Case((), (), {"dtype": np.dtype(dtype), "size": size}),
        st.sampled_from(FLOATS + INTS),
        st.integers(2, 6),
    ),
    reasons={"jvp": "it has no operands, so nothing to differentiate"},
)


# ---------------------------------------------------------------------------------------------
# Primitives the generic checks cannot run, each with the reason

_COLLECTIVE = (
    "a collective: it needs a named axis bound by pmap or vmap(axis_name=...), so it is "
    "checked by tests/test_parallel.py, not by a per-primitive recipe"
)

WITHOUT_RECIPE = {
    "all_gather": _COLLECTIVE,
    "all_to_all": _COLLECTIVE,
    "axis_index": _COLLECTIVE,
    "pbroadcast": _COLLECTIVE,
    "pmax": _COLLECTIVE,
    "pmin": _COLLECTIVE,
    "ppermute": _COLLECTIVE,
    "psum": _COLLECTIVE,
    "psum_scatter": _COLLECTIVE,
    "debug_callback": "effect-only: it returns nothing to compare (tests/test_debug.py)",
    "check": "effect-only: it returns nothing to compare (tests/test_checkify.py)",
    "pure_callback": (
        "runs an arbitrary Python function, so there is no operand domain or reference to draw "
        "(tests/test_parity_callback.py checks it on each backend and vmap method)"
    ),
    "io_callback": (
        "runs an arbitrary Python function for its effects (tests/test_parity_callback.py "
        "checks it on each backend, under vmap and differentiation)"
    ),
    "lu_pairs": (
        "the compiler's form of lu on complex matrices (interleaved parts for zgetrf), made "
        "by the complex lowering: the lu recipe's compiled checks reach it"
    ),
    "triangular_solve_pairs": (
        "the compiler's form of triangular_solve on complex matrices (ztrsm), made by the "
        "complex lowering: the triangular_solve recipe's compiled checks reach it"
    ),
    "eigh_pairs": (
        "the compiler's form of eigh on Hermitian matrices (heevd), made by the complex "
        "lowering: tests/test_complex.py compiles complex eigh against the reference"
    ),
    "cholesky_pairs": (
        "the compiler's form of cholesky on complex matrices (zpotrf), made by the complex "
        "lowering: tests/test_complex.py compiles complex cholesky against the reference"
    ),
    "qr_pairs": (
        "the compiler's form of qr on complex matrices (zgeqrf, zungqr), made by the complex "
        "lowering: tests/test_complex.py compiles complex qr against the reference"
    ),
    "svd_pairs": (
        "the compiler's form of svd on complex matrices (zgesdd), made by the complex "
        "lowering: tests/test_complex.py compiles complex svd against the reference"
    ),
    "eig_pairs": (
        "the compiler's form of eig on complex matrices (zgeev), made by the complex "
        "lowering: tests/test_linalg_eig.py compiles complex eig against the reference"
    ),
    "schur_pairs": (
        "the compiler's form of schur on complex matrices (zgees), made by the complex "
        "lowering: the schur recipe's compiled checks reach it"
    ),
    "scatter_mul_pairs": (
        "the compiler's form of scatter_mul on complex values (each element multiplied by its "
        "updates in turn as complex numbers), made by the complex lowering: "
        "tests/test_complex.py compiles complex scatter_mul against the reference"
    ),
    "scatter_min_pairs": (
        "the compiler's form of scatter_min on complex values (each element compared with its "
        "updates in turn in NumPy's order), made by the complex lowering: "
        "tests/test_complex.py compiles complex scatter_min against the reference"
    ),
    "scatter_max_pairs": (
        "the compiler's form of scatter_max on complex values (each element compared with its "
        "updates in turn in NumPy's order), made by the complex lowering: "
        "tests/test_complex.py compiles complex scatter_max against the reference"
    ),
    "eig_parts": (
        "the compiler's form of eig (LAPACK geev's packed outputs), made by the complex "
        "lowering: the eig recipe's compiled checks reach it"
    ),
    "fft_radix_pass": (
        "a pass of the compiler's fft, made by the complex lowering: the fft recipe's compiled "
        "checks reach it, and tests/test_fft_passes.py checks it against NumPy's transforms"
    ),
    "fft_real_pass": (
        "the last pass of the compiler's rfft, made by the complex lowering: the fft recipe's "
        "compiled checks reach it, and tests/test_fft_passes.py checks it against NumPy's rfft"
    ),
    "fft_real_inverse_pass": (
        "the first pass of the compiler's irfft, made by the complex lowering: the fft recipe's "
        "compiled checks reach it, and tests/test_fft_passes.py checks it against NumPy's irfft"
    ),
    "platform_index": (
        "its value is the platform a program runs on, so eager and compiled runs differ by "
        "design; tests/test_lax_parity.py checks platform_dependent eagerly and compiled for "
        "the host and the emulated GPU"
    ),
    "custom_lin": (
        "internal to reverse mode of custom_vjp functions: the custom_vjp_call recipe reaches it "
        "through vjp, and tests/test_custom_derivatives.py checks it"
    ),
}
