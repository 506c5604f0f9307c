"""Derivative checks that users (and funcgrad's own suites) call from their tests.

`check_grads` checks forward mode against central finite differences, and reverse mode through
the adjoint identity <u, J v> = <J^T u, v> with J v from the same finite differences, recursively
up to `order`.
Run it on float64 inputs: finite differences in float32 are too noisy to check anything.

Complex values follow the convention of reverse mode: the pullback is the transpose of the
derivative, not its adjoint, so the identity checked is Re<u, J v> = Re<conj(J^T conj(u)), v>
with <x, y> = sum(conj(x) y); for real values it is the plain one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import dtypes, tree_util
from funcgrad.interpreters.ad import float0

_DEFAULT_EPS = {np.dtype(np.float64): 1e-5, np.dtype(np.float32): 1e-2}
_DEFAULT_TOL = {np.dtype(np.float64): 1e-5, np.dtype(np.float32): 2e-2}
for _real, _complex in ((np.float64, np.complex128), (np.float32, np.complex64)):
    _DEFAULT_EPS[np.dtype(_complex)] = _DEFAULT_EPS[np.dtype(_real)]
    _DEFAULT_TOL[np.dtype(_complex)] = _DEFAULT_TOL[np.dtype(_real)]


def _inexact(dtype) -> bool:
    return dtypes.is_inexact(dtype)


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _leaves_np(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in tree_util.tree_leaves(tree)]


def _inner(xs, ys) -> float:
    """Re sum(conj(x) y) over the leaves (float0 ones skipped), in double precision."""
    total = 0.0
    for x, y in zip(_leaves_np(xs), _leaves_np(ys)):
        if x.dtype == float0 or y.dtype == float0:
            continue
        total += float(np.real(np.sum(np.conj(_wide(x)) * _wide(y))))
    return total


def _conj(tree):
    """The tree with its complex leaves conjugated."""
    return tree_util.tree_map(lambda x: np.conj(x) if np.asarray(x).dtype.kind == "c" else x, tree)


def _random_like(tree, rng: np.random.Generator):
    def draw(x):
        x = np.asarray(x)
        if not _inexact(x.dtype):
            return np.zeros(x.shape, float0)
        if x.dtype.kind == "c":
            parts = rng.standard_normal((2,) + x.shape)
            return (parts[0] + 1j * parts[1]).astype(x.dtype)
        return rng.standard_normal(x.shape).astype(x.dtype)

    return tree_util.tree_map(draw, tree)


def _axpy(a: float, xs, ys):
    def combine(x, y):
        x = np.asarray(x)
        if x.dtype == float0:
            return np.asarray(y)
        return (np.asarray(y) + a * _wide(x)).astype(np.asarray(y).dtype)

    return tree_util.tree_map(combine, xs, ys)


def _assert_close(actual, expected, atol: float, rtol: float, what: str) -> None:
    for a, e in zip(_leaves_np(actual), _leaves_np(expected)):
        if a.dtype == float0:
            continue
        np.testing.assert_allclose(_wide(a), _wide(e), atol=atol, rtol=rtol, err_msg=what)


def _tolerance(args, given: float | None, table: dict) -> float:
    """The loosest default among the float arguments' dtypes (float16 and bfloat16 take
    float32's). Integer and boolean arguments (a step count, an index) have no say: with them
    float64 data keeps float64's tight settings."""
    if given is not None:
        return given
    float_dtypes = [
        dtype
        for dtype in (np.asarray(x).dtype for x in tree_util.tree_leaves(args))
        if _inexact(dtype)
    ]
    return max(
        (table.get(d, table[np.dtype(np.float32)]) for d in float_dtypes),
        default=table[np.dtype(np.float64)],
    )


def check_jvp(f: Callable, args: Sequence, atol=None, rtol=None, eps=None, seed: int = 0) -> None:
    """The jvp of f at args along a random tangent equals a central finite difference."""
    from funcgrad.transforms.autodiff import jvp

    rng = np.random.default_rng(seed)
    eps = _tolerance(args, eps, _DEFAULT_EPS)
    atol = _tolerance(args, atol, _DEFAULT_TOL)
    rtol = _tolerance(args, rtol, _DEFAULT_TOL)
    tangent = _random_like(tuple(args), rng)
    _, tangent_out = jvp(f, tuple(args), tangent)
    difference = _numerical_jvp(f, tuple(args), tangent, eps)
    _assert_close(tangent_out, difference, atol, rtol, "jvp vs central finite difference")


def _numerical_jvp(f: Callable, args: tuple, tangent, eps: float):
    """The central finite difference of f at args along tangent, in float64."""

    def difference(p, m):
        if np.asarray(p).dtype == float0:  # a cotangent of an integer input
            return np.asarray(p)
        return (_wide(np.asarray(p)) - _wide(np.asarray(m))) / (2 * eps)

    plus = f(*_axpy(eps, tangent, args))
    minus = f(*_axpy(-eps, tangent, args))
    return tree_util.tree_map(difference, plus, minus)


def check_vjp(f: Callable, args: Sequence, atol=None, rtol=None, eps=None, seed: int = 0) -> None:
    """The vjp of f is the adjoint of its derivative: <u, J v> == <vjp(u), v>, with J v taken
    by central finite differences, so reverse mode is checked without forward mode (a
    custom_vjp function has no jvp) and a wrong jvp rule cannot hide behind its transpose."""
    from funcgrad.transforms.autodiff import vjp

    rng = np.random.default_rng(seed + 1)
    eps = _tolerance(args, eps, _DEFAULT_EPS)
    atol = _tolerance(args, atol, _DEFAULT_TOL)
    rtol = _tolerance(args, rtol, _DEFAULT_TOL)
    tangent = _random_like(tuple(args), rng)
    tangent_out = _numerical_jvp(f, tuple(args), tangent, eps)
    out_again, pullback = vjp(f, *args)
    out = f(*args)
    _assert_close(out_again, out, atol, rtol, "vjp primal output vs the function's output")
    cotangent = _random_like(out, rng)
    cotangent_in = _conj(pullback(tree_util.tree_map(_as_array, _conj(cotangent))))
    lhs = _inner(tangent_out, cotangent)
    rhs = _inner(tangent, cotangent_in)
    scale = max(1.0, abs(lhs), abs(rhs))
    np.testing.assert_allclose(
        lhs / scale, rhs / scale, atol=atol, rtol=rtol, err_msg="<u, J v> vs <J^T u, v>"
    )


def _none_if_float0(x):
    return None if x.dtype == float0 else x


def _as_array(x):
    from funcgrad.lax.base import asarray

    return x if np.asarray(x).dtype == float0 else asarray(x)


def check_grads(
    f: Callable,
    args: Sequence,
    order: int,
    modes: Sequence[str] = ("fwd", "rev"),
    atol: float | None = None,
    rtol: float | None = None,
    eps: float | None = None,
) -> None:
    """Check derivatives of `f` at `args` up to `order`, in forward and/or reverse mode.

    Higher orders check the derivative functions themselves: the jvp of the jvp, the vjp of
    the vjp, so a wrong second derivative is caught even where the first is right.
    """
    from funcgrad.transforms.autodiff import jvp, vjp

    args = tuple(args)
    for mode in modes:
        if mode not in ("fwd", "rev"):
            raise ValueError(f"unknown mode {mode!r}; use 'fwd' and/or 'rev'")
    if "fwd" in modes:
        check_jvp(f, args, atol, rtol, eps)
        if order > 1:
            tangent = _random_like(args, np.random.default_rng(order))

            def f_jvp(*primals):
                return jvp(f, primals, tangent)[1]

            check_grads(f_jvp, args, order - 1, ("fwd",), atol, rtol, eps)
    if "rev" in modes:
        check_vjp(f, args, atol, rtol, eps)
        if order > 1:
            out = f(*args)
            cotangent = tree_util.tree_map(
                _as_array, _random_like(out, np.random.default_rng(order + 7))
            )

            def f_vjp(*primals):
                # float0 cotangents of integer inputs are not differentiable outputs: drop them.
                cotangents_in = vjp(f, *primals)[1](cotangent)
                return tree_util.tree_map(_none_if_float0, cotangents_in)

            check_grads(f_vjp, args, order - 1, ("rev",), atol, rtol, eps)
