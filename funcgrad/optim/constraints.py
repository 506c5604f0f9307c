"""Per-leaf rescaling, clipping and constraints: gradient centralization, block-RMS and
adaptive (unit-wise) clipping, scaling by the parameters' own size, NaNs to zero,
non-negative parameters, and `scale_gradient` for the backward pass alone."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import lax, tree_util
from funcgrad.optim.base import EmptyState, GradientTransformation, abs_sq, check_matches
from funcgrad.optim.transforms import _map, _safe_norm, _stateless
from funcgrad.transforms.custom_derivatives import custom_vjp


class ZeroNansState(NamedTuple):
    found_nan: Any  # per leaf: whether the last update had a NaN there


class NonNegativeParamsState(NamedTuple):
    """keep_params_nonnegative keeps no state."""


AdaptiveGradClipState = EmptyState


def _needs_params(name: str, params) -> None:
    if params is None:
        raise ValueError(f"{name} needs params: call update(grads, state, params)")


def centralize() -> GradientTransformation:
    """Gradient centralization (Yong et al.): each leaf of rank 2 or more minus its mean over
    every axis but the first; vectors and scalars unchanged."""

    def subtract_mean(g):
        if fnp.ndim(g) < 2:
            return g
        return g - fnp.mean(g, axis=tuple(range(1, fnp.ndim(g))), keepdims=True)

    return _stateless(lambda updates, params: _map(subtract_mean, updates))


def clip_by_block_rms(threshold: float) -> GradientTransformation:
    """Each leaf divided by max(1, rms(leaf) / threshold), so no leaf's root mean square
    exceeds threshold."""

    def clip(u):
        rms = fnp.sqrt(fnp.mean(abs_sq(u)))
        return u / fnp.maximum(1.0, rms / threshold).astype(rms.dtype)

    return _stateless(lambda updates, params: _map(clip, updates))


def _safe_rms(x, min_rms: float):
    """The root mean square of x, min_rms where that is smaller."""
    rms = fnp.sqrt(fnp.mean(abs_sq(x)))
    return fnp.where(rms <= min_rms, min_rms, rms).astype(rms.dtype)


def _scale_by_param_block(name: str, size) -> GradientTransformation:
    def update(updates, state, params=None):
        _needs_params(name, params)
        check_matches(updates, params, "gradients", "parameters")
        return _map(lambda u, p: u * size(p).astype(u.dtype), updates, params), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_param_block_norm(min_scale: float = 1e-3) -> GradientTransformation:
    """Each leaf times the l2 norm of its parameter (at least min_scale)."""
    return _scale_by_param_block("scale_by_param_block_norm", lambda p: _safe_norm(p, min_scale))


def scale_by_param_block_rms(min_scale: float = 1e-3) -> GradientTransformation:
    """Each leaf times the root mean square of its parameter (at least min_scale)."""
    return _scale_by_param_block("scale_by_param_block_rms", lambda p: _safe_rms(p, min_scale))


def unitwise_norm(x: Any, axis: int | tuple[int, ...] | None = None) -> Any:
    """The l2 norm per output unit, broadcast to x's shape: over `axis` when given, else over
    everything for scalars and vectors, the input axis 0 of a dense (or multi-head) kernel,
    and the spatial and input axes of HWIO / DHWIO convolution kernels."""
    x = fnp.asarray(x)
    if axis is None:
        squeezed_rank = sum(1 for size in x.shape if size != 1)
        if squeezed_rank <= 1:
            axis = tuple(range(x.ndim))
        elif x.ndim in (2, 3):
            axis = 0
        elif x.ndim in (4, 5):
            axis = tuple(range(x.ndim - 1))
        else:
            raise ValueError(
                f"unitwise_norm: no default unit axes for a parameter of shape {x.shape}; "
                "pass axis= to name the axes to take the norm over"
            )
    squared = fnp.sum(abs_sq(x), axis=axis, keepdims=True)
    return fnp.broadcast_to(fnp.sqrt(squared), x.shape)


def unitwise_clip(g_norm: Any, max_norm: Any, grad: Any, div_eps: float = 1e-6) -> Any:
    """`grad` scaled to norm `max_norm` wherever its unit norm `g_norm` reaches it (all three
    of one shape, as `unitwise_norm` gives them); div_eps only keeps the unused branch of a
    zero norm finite."""
    shapes = {fnp.shape(g_norm), fnp.shape(max_norm), fnp.shape(grad)}
    if len(shapes) != 1:
        raise ValueError(
            "unitwise_clip: g_norm, max_norm and grad must have one shape, got "
            f"{fnp.shape(g_norm)}, {fnp.shape(max_norm)} and {fnp.shape(grad)}"
        )
    grad = fnp.asarray(grad)
    clipped = grad * (max_norm / fnp.maximum(g_norm, div_eps)).astype(grad.dtype)
    return fnp.where(g_norm < max_norm, grad, clipped).astype(grad.dtype)


def adaptive_grad_clip(
    clipping: float, eps: float = 1e-3, axis: int | tuple[int, ...] | None = None
) -> GradientTransformation:
    """Adaptive gradient clipping (Brock et al.): a unit's gradient is scaled down to
    clipping * max(|unit's parameters|, eps) where its norm exceeds that."""

    def update(updates, state, params=None):
        _needs_params("adaptive_grad_clip", params)
        check_matches(updates, params, "gradients", "parameters")

        def clip(g, p):
            g_norm, p_norm = unitwise_norm(g, axis), unitwise_norm(p, axis)
            return unitwise_clip(g_norm, clipping * fnp.maximum(p_norm, eps), g)

        return _map(clip, updates, params), state

    return GradientTransformation(lambda params: EmptyState(), update)


def zero_nans() -> GradientTransformation:
    """NaNs in the updates replaced by 0; the state records, per leaf, whether the last
    update had any."""

    def init(params):
        return ZeroNansState(_map(lambda p: fnp.asarray(False), params))

    def update(updates, state, params=None):
        found = _map(lambda u: fnp.any(fnp.isnan(u)), updates)
        cleaned = _map(lambda u: fnp.where(fnp.isnan(u), 0, u).astype(u.dtype), updates)
        return cleaned, ZeroNansState(found)

    return GradientTransformation(init, update)


def keep_params_nonnegative() -> GradientTransformation:
    """Where an update would take a parameter below 0, it takes it to 0 instead (-param)."""

    def update(updates, state, params=None):
        _needs_params("keep_params_nonnegative", params)
        check_matches(updates, params, "updates", "parameters")
        kept = _map(lambda u, p: fnp.where(p + u < 0, -p, u).astype(u.dtype), updates, params)
        return kept, state

    return GradientTransformation(lambda params: NonNegativeParamsState(), update)


@custom_vjp
def _scale_gradient(inputs, scale):
    return inputs


def _scale_gradient_fwd(inputs, scale):
    return inputs, scale


def _scale_gradient_bwd(scale, cotangents):
    return tree_util.tree_map(lambda c: c * scale, cotangents), None


_scale_gradient.defvjp(_scale_gradient_fwd, _scale_gradient_bwd)


def scale_gradient(inputs, scale: float):
    """`inputs` unchanged on the forward pass, their gradient times `scale` on the backward
    pass (a scale of 0 stops it, 1 leaves the computation untouched)."""
    if isinstance(scale, (int, float)) and scale == 1.0:
        return inputs
    if isinstance(scale, (int, float)) and scale == 0.0:
        return tree_util.tree_map(lax.stop_gradient, inputs)
    return _scale_gradient(inputs, scale)


def _check_batched(name: str, leaves: list) -> None:
    if not leaves:
        return
    batch = fnp.shape(leaves[0])[:1]
    if not all(fnp.ndim(g) >= 1 and fnp.shape(g)[:1] == batch for g in leaves):
        shapes = [tuple(fnp.shape(g)) for g in leaves]
        raise ValueError(
            f"{name}: every gradient needs the same leading batch (example) axis, got shapes "
            f"{shapes}"
        )


def per_example_global_norm_clip(grads, l2_norm_clip: float) -> tuple[Any, Any]:
    """Per-example gradients (every leaf with the examples on axis 0) each scaled down to
    global l2 norm at most l2_norm_clip, then summed over the examples (Abadi et al.'s
    DP-SGD); also the number of examples clipped. A zero gradient is left as it is."""
    leaves, treedef = tree_util.tree_flatten(grads)
    _check_batched("per_example_global_norm_clip", leaves)
    norms = fnp.sqrt(sum(fnp.sum(abs_sq(g).reshape(g.shape[0], -1), axis=1) for g in leaves))
    multipliers = fnp.where(norms == 0, 1.0, fnp.minimum(l2_norm_clip / norms, 1.0))
    clipped = [fnp.tensordot(multipliers.astype(g.dtype), g, axes=1) for g in leaves]
    return tree_util.tree_unflatten(treedef, clipped), fnp.sum(multipliers < 1.0)


def per_example_layer_norm_clip(
    grads, global_l2_norm_clip: float, uniform: bool = True
) -> tuple[Any, Any]:
    """Per-example gradients clipped leaf by leaf (McMahan et al.), then summed over the
    examples: leaf i of K is clipped to C / sqrt(K), or with uniform=False to C * sqrt(D_i /
    D), D_i its size per example of D in all; also the number clipped, per leaf."""
    leaves, treedef = tree_util.tree_flatten(grads)
    _check_batched("per_example_layer_norm_clip", leaves)
    total = sum(g[0].size for g in leaves)
    sums, counts = [], []
    for g in leaves:
        share = 1.0 / len(leaves) if uniform else g[0].size / total
        clipped, count = per_example_global_norm_clip([g], global_l2_norm_clip * share**0.5)
        sums.append(clipped[0])
        counts.append(count)
    return tree_util.tree_unflatten(treedef, sums), tree_util.tree_unflatten(treedef, counts)
