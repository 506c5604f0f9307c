"""The compiler's vectorizable transcendentals against float64 NumPy: error in ulp over dense
sweeps, random arguments over many magnitudes, and special values (inf, NaN, signed zeros,
subnormals, the overflow and underflow thresholds)."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.compiler import mathlib

rng = np.random.default_rng(0)

# The documented bounds of funcgrad/compiler/mathlib.py, plus half an ulp for the reference.
BOUNDS = {
    ("exp", np.float32): 1.7,
    ("log", np.float32): 2.7,
    ("tanh", np.float32): 1.8,
    ("exp", np.float64): 1.5,
    ("log", np.float64): 2.5,
    ("log1p", np.float32): 4.5,
    ("log1p", np.float64): 3.5,
    ("expm1", np.float32): 4.5,
    ("expm1", np.float64): 3.5,
    ("sin", np.float32): 0.51,
    ("cos", np.float32): 0.51,
    ("tan", np.float32): 0.51,
}
FUNCTIONS = {
    "exp": (fnp.exp, np.exp),
    "log": (fnp.log, np.log),
    "tanh": (fnp.tanh, np.tanh),
    "log1p": (fnp.log1p, np.log1p),
    "expm1": (fnp.expm1, np.expm1),
    "sin": (fnp.sin, np.sin),
    "cos": (fnp.cos, np.cos),
    "tan": (fnp.tan, np.tan),
}


def arguments(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    specials = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        info.smallest_subnormal,
        info.tiny,
        info.max,
        -info.max,
        88.72,
        88.73,
        -103.9,
        -104.0,
        709.78,
        -745.1,
        1.0,
        -1.0,
        0.625,
    ]
    return np.concatenate(
        [
            specials,
            np.linspace(-120, 100, 40001),
            rng.standard_normal(20000) * 10,
            np.exp(rng.uniform(-80, 80 if dtype != np.float32 else 18, 20000)),
        ]
    ).astype(dtype)


@pytest.mark.parametrize(("name", "dtype"), sorted(BOUNDS, key=str))
def test_error_in_ulp_and_special_values(name, dtype):
    assert mathlib.handles(name, np.dtype(dtype))
    ours, reference = FUNCTIONS[name]
    x = arguments(dtype)
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", "llvm")
    try:
        got = np.asarray(fg.jit(ours)(x))
        negative_zero = np.asarray(fg.jit(ours)(np.array([-0.0], dtype)))[0]
    finally:
        fg.config.update("jit_backend", previous)
    with np.errstate(all="ignore"):
        exact = reference(x.astype(np.float64))
    rounded = exact.astype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(rounded))
    np.testing.assert_array_equal(got[np.isinf(rounded)], rounded[np.isinf(rounded)])
    finite = np.isfinite(rounded)
    if name in ("sin", "cos", "tan"):
        # The documented range of the argument reduction; beyond it values stay in range.
        far = np.isfinite(x) & (np.abs(x) >= 1e8)
        assert not np.isnan(got[far]).any()
        if name != "tan":
            assert (np.abs(got[far]) <= 1).all()
        finite &= ~far
    spacing = np.maximum(
        np.spacing(np.abs(rounded[finite])).astype(np.float64), np.finfo(dtype).smallest_subnormal
    )
    error = np.abs(got[finite].astype(np.float64) - exact[finite]) / spacing
    assert error.max() <= BOUNDS[name, dtype], (x[finite][error.argmax()], error.max())
    expected_zero = {"exp": 1.0, "log": -np.inf, "cos": 1.0}.get(name, -0.0)
    assert negative_zero == expected_zero and np.signbit(negative_zero) == np.signbit(expected_zero)
