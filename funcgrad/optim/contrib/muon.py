"""Muon (Jordan et al. 2024): momentum orthogonalized per weight matrix. The (Nesterov)
momentum of a matrix parameter is replaced by the nearest semi-orthogonal matrix U V^T of
its SVD U S V^T, approximated by a few Newton-Schulz iterations X <- a X + (b A + c A^2) X,
A = X X^T, from X normalized to norm at most 1; the quintic's coefficients push every
singular value towards 1. Parameters that are not matrices take AdamW in `muon`.

A parameter of higher rank is a batch of matrices through `MuonDimensionNumbers`: the axes
summed over by the layer (reduction, the fan-in) and the axes it produces (output); any
others are batch axes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
)
from funcgrad.optim.optimizers import adamw
from funcgrad.optim.transforms import (
    ScalarOrSchedule,
    _bias_corrected,
    _cast,
    _count,
    _ema,
    _map,
    _next,
    _stateless,
    _zeros,
    add_decayed_weights,
    scale_by_learning_rate,
)
from funcgrad.optim.wrappers import partition

_STANDARD_COEFFS = (3.4445, -4.775, 2.0315)
_DION_COEFFS = (
    (4.0848, -6.8946, 2.927),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)
_PRESETS = {"standard": _STANDARD_COEFFS, "dion": _DION_COEFFS}
_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")


class MuonDimensionNumbers(NamedTuple):
    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


class MuonState(NamedTuple):
    count: Any
    mu: Any
    ns_coeffs: Any  # (steps, 3): the coefficients of each Newton-Schulz step


def _is_dims(x) -> bool:
    return x is None or isinstance(x, MuonDimensionNumbers)


def _axes(x, dims: MuonDimensionNumbers) -> tuple[tuple[int, ...], tuple[int, ...]]:
    def normal(axes):
        axes = (axes,) if isinstance(axes, int) else tuple(axes)
        return tuple(a % x.ndim for a in axes)

    reduction, output = normal(dims.reduction_axis), normal(dims.output_axis)
    if set(reduction) & set(output):
        raise ValueError(
            f"muon: reduction axes {reduction} and output axes {output} overlap for a "
            f"parameter of shape {tuple(x.shape)}"
        )
    return reduction, output


def _as_matrices(x, dims: MuonDimensionNumbers | None):
    """x as (batch, fan_in, fan_out) and the function putting such an array back."""
    if dims is None:
        if x.ndim != 2:
            raise ValueError(
                f"muon: a parameter of shape {tuple(x.shape)} is not a matrix; give "
                "MuonDimensionNumbers for it (weight_dimension_numbers) or leave it to AdamW"
            )
        dims = MuonDimensionNumbers()
    reduction, output = _axes(x, dims)
    batch = tuple(a for a in range(x.ndim) if a not in reduction + output)
    order = batch + reduction + output
    sizes = [math.prod(x.shape[a] for a in group) for group in (batch, reduction, output)]
    moved_shape = tuple(x.shape[a] for a in order)
    inverse = tuple(order.index(a) for a in range(x.ndim))

    def back(y):
        return fnp.transpose(y.reshape(moved_shape), inverse)

    return fnp.transpose(x, order).reshape(sizes), back


def _fans(x, dims) -> tuple[int, int]:
    reduction, output = _axes(x, dims or MuonDimensionNumbers())
    return math.prod(x.shape[a] for a in reduction), math.prod(x.shape[a] for a in output)


def _newton_schulz_step(x, coeffs, a=None):
    if a is None:
        a = x @ fnp.conj(fnp.swapaxes(x, -1, -2))
    b = coeffs[1] * a + coeffs[2] * (a @ a)
    return coeffs[0] * x + b @ x


def _first_step(x, coeffs, preconditioning, eps):
    """The first iteration, folding the normalization of "aol" and "schatten" into the
    X X^T it computes anyway."""
    a = x @ fnp.conj(fnp.swapaxes(x, -1, -2))
    if preconditioning == "aol":
        s = lax.rsqrt(fnp.maximum(fnp.sum(fnp.abs(a), axis=-1), eps))[..., None]
        x, a = x * s, a * s * fnp.swapaxes(s, -1, -2)
    elif preconditioning == "schatten":
        s = lax.rsqrt(fnp.maximum(fnp.sqrt(fnp.sum(fnp.abs(a) ** 2, axis=(-2, -1))), eps))
        s = s[..., None, None]
        x, a = x * s, a * s * s
    return _newton_schulz_step(x, coeffs, a)


def orthogonalize_via_newton_schulz(
    x,
    ns_coeffs,
    ns_steps: int = 5,
    preconditioning: str = "frobenius",
    eps: float = 1e-8,
    dimension_numbers: MuonDimensionNumbers | None = None,
):
    """The approximate orthogonal factor U V^T of x (a matrix, or a batch of them through
    dimension_numbers): x normalized by its Frobenius or spectral norm ("aol" and
    "schatten" normalize inside the first step), then ns_steps Newton-Schulz iterations
    with the coefficients (a, b, c), one triple for all or one per step."""
    if preconditioning not in _PRECONDITIONINGS:
        raise ValueError(
            f"muon: preconditioning must be one of {_PRECONDITIONINGS}, got {preconditioning!r}"
        )
    coeffs = fnp.asarray(ns_coeffs)
    if coeffs.ndim not in (1, 2) or coeffs.shape[-1] != 3:
        raise ValueError(f"muon: ns_coeffs must have shape (3,) or (n, 3), got {coeffs.shape}")
    x = fnp.asarray(x)
    matrices, back = _as_matrices(x, dimension_numbers)
    coeffs = coeffs.astype(matrices.dtype)
    per_step = [coeffs] * ns_steps if coeffs.ndim == 1 else list(coeffs)
    wide = matrices.shape[1] > matrices.shape[2]
    if wide:  # iterate on the smaller Gram matrix
        matrices = fnp.swapaxes(matrices, 1, 2)
    if preconditioning == "frobenius":
        norms = fnp.sqrt(fnp.sum(fnp.abs(matrices) ** 2, axis=(1, 2), keepdims=True))
        matrices = matrices / (norms + eps)
    elif preconditioning == "spectral":
        norms = fnp.linalg.norm(matrices, 2, axis=(1, 2), keepdims=True)
        matrices = matrices / (norms + eps)
    for i, step_coeffs in enumerate(per_step):
        if i == 0:
            matrices = _first_step(matrices, step_coeffs, preconditioning, eps)
        else:
            matrices = _newton_schulz_step(matrices, step_coeffs)
    if wide:
        matrices = fnp.swapaxes(matrices, 1, 2)
    return back(matrices)


def _dims_per_leaf(dims, tree) -> list:
    """The dimension numbers of each leaf of `tree`, from one for all, a tree (prefix) of
    them (None for the default of a matrix), or a function of the tree returning one."""
    if callable(dims):
        dims = dims(tree)
    count = len(tree_util.tree_leaves(tree))
    if _is_dims(dims):
        return [dims] * count
    full = tree_util.tree_broadcast(dims, tree, is_leaf=_is_dims)
    return tree_util.tree_leaves(full, is_leaf=_is_dims)


def _per_leaf(f, updates, dims_list):
    leaves, treedef = tree_util.tree_flatten(updates)
    return tree_util.tree_unflatten(treedef, [f(u, d) for u, d in zip(leaves, dims_list)])


def scale_by_muon(
    ns_coeffs=_STANDARD_COEFFS,
    ns_steps: int = 5,
    beta: float = 0.95,
    eps: float = 1e-8,
    mu_dtype=None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    weight_dimension_numbers=None,
) -> GradientTransformation:
    """Each leaf's bias-corrected momentum (Nesterov's look-ahead by default) orthogonalized
    by `orthogonalize_via_newton_schulz`; with adaptive, O times <m_hat, O>. ns_coeffs is
    one (a, b, c) triple or one per step (the last ns_steps rows are used)."""

    def init(params):
        coeffs = fnp.asarray(ns_coeffs)
        if coeffs.ndim not in (1, 2) or coeffs.shape[-1] != 3:
            raise ValueError(f"muon: ns_coeffs must have shape (3,) or (n, 3), got {coeffs.shape}")
        if coeffs.ndim == 2:
            if coeffs.shape[0] < ns_steps:
                raise ValueError(
                    f"muon: {coeffs.shape[0]} rows of ns_coeffs cannot make {ns_steps} steps"
                )
            coeffs = coeffs[coeffs.shape[0] - ns_steps :]
        return MuonState(_count(), _zeros(params, mu_dtype), coeffs)

    def update(updates, state, params=None):
        dims = _dims_per_leaf(weight_dimension_numbers, updates)
        mu = _ema(updates, state.mu, beta)
        count = _next(state.count)
        if nesterov:
            mu_hat = _map(
                lambda m, g: beta * m + (1 - beta) * g,
                _bias_corrected(mu, beta, _next(count)),
                _bias_corrected(updates, beta, count),
            )
        else:
            mu_hat = _bias_corrected(mu, beta, count)

        def orthogonal(m, d):
            o = orthogonalize_via_newton_schulz(
                m, state.ns_coeffs, ns_steps, preconditioning, eps, d
            )
            return fnp.sum(fnp.conj(m) * o) * o if adaptive else o

        out = _per_leaf(orthogonal, mu_hat, dims)
        return out, MuonState(count, _cast(mu, mu_dtype), state.ns_coeffs)

    return GradientTransformation(init, update)


def scale_by_shape(weight_dimension_numbers=None, consistent_rms: float | None = None):
    """Each leaf times sqrt(max(1, fan_out / fan_in)) (so the update's spectral norm suits the
    layer's shape), or with consistent_rms times sqrt(max(fan_in, fan_out)) * consistent_rms
    (an orthogonal update's root mean square then matches consistent_rms, as AdamW's)."""

    def scaled(u, d):
        fan_in, fan_out = _fans(u, d)
        if consistent_rms is None:
            return u * math.sqrt(max(1.0, fan_out / fan_in))
        return u * (math.sqrt(max(fan_in, fan_out)) * consistent_rms)

    return _stateless(
        lambda updates, params: _per_leaf(
            scaled, updates, _dims_per_leaf(weight_dimension_numbers, updates)
        )
    )


def muon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs=_STANDARD_COEFFS,
    ns_steps: int = 5,
    beta: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    mu_dtype=None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps_root: float = 0.0,
    adam_weight_decay: float = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers=None,
    consistent_rms: float | None = None,
) -> GradientTransformationExtraArgs:
    """Muon on the matrix parameters (every 2-d leaf, or the leaves
    muon_weight_dimension_numbers gives dimension numbers for: a tree like the parameters
    with None for the rest, or a function of them returning one), scaled by
    `scale_by_shape`, with decoupled weight decay (on the leaves weight_decay_mask selects)
    and the learning rate; AdamW with the adam_* settings (its learning rate that of Muon
    unless given) on every other leaf. ns_coeffs may name a preset, "standard" or
    "dion"."""
    if isinstance(ns_coeffs, str):
        if ns_coeffs not in _PRESETS:
            raise ValueError(
                f"muon: ns_coeffs must be one of {sorted(_PRESETS)}, got {ns_coeffs!r}"
            )
        ns_coeffs = _PRESETS[ns_coeffs]
    adam = adamw(
        learning_rate if adam_learning_rate is None else adam_learning_rate,
        adam_b1,
        adam_b2,
        eps,
        adam_eps_root,
        mu_dtype,
        adam_weight_decay,
        nesterov=nesterov,
    )

    def dims_of(tree) -> list:
        if muon_weight_dimension_numbers is None:
            return [
                MuonDimensionNumbers() if fnp.ndim(x) == 2 else None
                for x in tree_util.tree_leaves(tree)
            ]
        return _dims_per_leaf(muon_weight_dimension_numbers, tree)

    def split(tree):
        """The partition of `tree`'s leaves between Muon and AdamW, built for its shapes."""
        dims = dims_of(tree)
        treedef = tree_util.tree_structure(tree)
        labels = tree_util.tree_unflatten(treedef, ["adam" if d is None else "muon" for d in dims])
        muon_dims = [d for d in dims if d is not None]
        mask = weight_decay_mask(tree) if callable(weight_decay_mask) else weight_decay_mask
        if mask is not None:
            flags = tree_util.tree_leaves(tree_util.tree_broadcast(mask, tree))
            mask = [bool(f) for f, d in zip(flags, dims) if d is not None]
        orthogonalized = chain(
            scale_by_muon(
                ns_coeffs,
                ns_steps,
                beta,
                eps,
                mu_dtype,
                nesterov=nesterov,
                adaptive=adaptive,
                preconditioning=preconditioning,
                weight_dimension_numbers=muon_dims,
            ),
            scale_by_shape(muon_dims, consistent_rms),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
        return partition({"muon": orthogonalized, "adam": adam}, labels)

    def init(params):
        return split(params).init(params)

    def update(updates, state, params=None, **extra_args):
        return split(updates).update(updates, state, params, **extra_args)

    return GradientTransformationExtraArgs(init, update)
