"""Composition properties of the transformations, on random small programs.

Hypothesis builds programs from a menu of funcgrad.numpy, lax and nn functions, control flow
(cond, switch, scan, fori_loop, while_loop), checkpoint, nested jit and custom_jvp/custom_vjp
pieces, and every transformation is checked against a definition that needs none: jit against
eager, derivatives against finite differences and against each other, vmap against a loop of
the lanes, staged programs (optimized or not) against the function. Random stacks of up to four
transformations are checked against the same stack with jit and checkpoint left out and vmap
replaced by a loop. The regressions at the end are the minimal forms of what these found.

A program is `f(x, y)`: `x` of a random small shape, `y` a short vector; each op maps the running
value `h` (and `y`) to a new value, so shapes change along the way. Values come from a seeded
NumPy generator rather than from hypothesis, so that they are generic (no ties, no zeros at
kinks) and finite differences are meaningful.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import lax, nn
from funcgrad.compiler.passes import dead_code_elimination, optimize
from funcgrad.ir import eval_jaxpr
from funcgrad.test_util import check_grads
from tests.checks import check_batching

MAX_SIZE = 24  # elements of any intermediate value
TOL = dict(rtol=1e-10, atol=1e-10)


class Op(NamedTuple):
    name: str
    fn: Callable  # (h, y) -> new h

    def __repr__(self) -> str:
        return self.name


class Features(NamedTuple):
    """What a test may put in a program: custom_vjp has no forward mode, while_loop no reverse."""

    forward: bool = True
    reverse: bool = True


DEFAULT_FEATURES = Features()


def run(ops, h, y):
    for op in ops:
        h = op.fn(h, y)
    return h


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _rng(draw) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**16)))


# ---------------------------------------------------------------------------------------------
# The menu. Each builder takes (draw, shape, y_len, depth, features) and returns (Op, new shape),
# or None where it does not apply to `shape`.

UNARY = {
    "sin": fnp.sin,
    "cos": fnp.cos,
    "tanh": fnp.tanh,
    "sigmoid": nn.sigmoid,
    "softplus": nn.softplus,
    "gelu": nn.gelu,
    "tame_cube": lambda h: h**3 / (1.0 + fnp.square(h)),
    "hypot1": lambda h: fnp.sqrt(h * h + 1.0),
    "log1p_sq": lambda h: fnp.log1p(h * h),
    "gauss": lambda h: fnp.exp(-h * h),
    "arctan": fnp.arctan,
    "lorentz": lambda h: 1.0 / (1.0 + h * h),
    "logaddexp": lambda h: fnp.logaddexp(h, -0.5 * h),
    "where_smooth": lambda h: fnp.where(h > 0, fnp.sin(h), fnp.tanh(h)),
    "clip": lambda h: fnp.clip(h, -1.5, 1.5),
    "erf": lax.erf,
    "max_self": lambda h: fnp.maximum(h, 0.5 * h),
    "pow": lambda h: fnp.power(h * h + 1.0, 0.3),
    "exp_base": lambda h: fnp.power(1.5, fnp.tanh(h)),
    "integer_pow": lambda h: lax.integer_pow(1.0 + h * h, -2),
    "lgamma": lambda h: lax.lgamma(h * h + 1.0),
    "digamma": lambda h: lax.digamma(h * h + 1.0),
    "expm1": lambda h: fnp.expm1(fnp.sin(h)),
}


def _unary(draw, shape, y_len, depth, feats):
    name = draw(st.sampled_from(sorted(UNARY)))
    fun = UNARY[name]
    return Op(name, lambda h, y: fun(h)), shape


def _with_y(draw, shape, y_len, depth, feats):
    kinds = ["scale"]
    if shape and shape[-1] == y_len:
        kinds += ["add", "dot"]
    if len(shape) < 3 and _size(shape) * y_len <= MAX_SIZE:
        kinds.append("outer")
    kind = draw(st.sampled_from(kinds))
    if kind == "scale":
        return Op("h*mean(cos y)", lambda h, y: h * fnp.mean(fnp.cos(y))), shape
    if kind == "add":
        return Op("h+sin(y)", lambda h, y: h + fnp.sin(y)), shape
    if kind == "dot":
        return Op("h@y", lambda h, y: h @ y), shape[:-1]
    return Op("outer(h,y)", lambda h, y: h[..., None] * y), shape + (y_len,)


def _self_binary(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(0, len(shape) - 1))
    kind = draw(st.sampled_from(["mul_flip", "max_flip", "div", "arctan2"]))
    if kind == "mul_flip":
        return Op(f"h*cos(flip(h,{axis}))", lambda h, y: h * fnp.cos(fnp.flip(h, axis))), shape
    if kind == "max_flip":
        return Op(f"max(h,flip(h,{axis})/2)", lambda h, y: fnp.maximum(h, fnp.flip(h, axis) / 2)), (
            shape
        )
    if kind == "div":
        return Op("h/(2+cos h)", lambda h, y: h / (2.0 + fnp.cos(h))), shape
    return Op("arctan2(h,1+h^2)", lambda h, y: fnp.arctan2(h, 1.0 + h * h)), shape


def _mask(draw, shape, y_len, depth, feats):
    mask = _rng(draw).random(shape) < 0.5
    if draw(st.booleans()):
        return Op("where(mask,h,sin h)", lambda h, y: fnp.where(mask, h, fnp.sin(h))), shape
    return Op("select(mask,h,2h)", lambda h, y: lax.select(mask, h, 2.0 * h)), shape


def _axis_arg(draw, ndim):
    if draw(st.booleans()):
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), unique=True))
    return None if not axes else tuple(axes)


REDUCTIONS = {
    "sum": fnp.sum,
    "mean": fnp.mean,
    "max": fnp.max,
    "min": fnp.min,
    "prod": fnp.prod,
    "var": fnp.var,
    "logsumexp": nn.logsumexp,
}


def _reduction(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    name = draw(st.sampled_from(sorted(REDUCTIONS)))
    axis = _axis_arg(draw, len(shape))
    keepdims = draw(st.booleans())
    fun = REDUCTIONS[name]
    new_shape = np.sum(np.zeros(shape), axis=axis, keepdims=keepdims).shape
    op = Op(
        f"{name}(axis={axis},keepdims={keepdims})", lambda h, y: fun(h, axis, keepdims=keepdims)
    )
    return op, new_shape


def _normalize(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    name = draw(st.sampled_from(["softmax", "log_softmax"]))
    fun = getattr(nn, name)
    return Op(f"{name}(axis={axis})", lambda h, y: fun(h, axis=axis)), shape


CUMULATIVE = {
    "cumsum": lax.cumsum,
    "cumprod": lax.cumprod,
    "cummax": lax.cummax,
    "cumlogsumexp": lax.cumlogsumexp,
}


def _cumulative(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(0, len(shape) - 1))
    if draw(st.booleans()):
        return Op(f"fnp.cumsum(axis={axis})", lambda h, y: fnp.cumsum(h, axis)), shape
    name = draw(st.sampled_from(sorted(CUMULATIVE)))
    reverse = draw(st.booleans())
    fun = CUMULATIVE[name]
    return Op(f"{name}(axis={axis},reverse={reverse})", lambda h, y: fun(h, axis, reverse)), shape


def _sort(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    descending = draw(st.booleans())
    op = Op(
        f"sort(axis={axis},descending={descending})",
        lambda h, y: fnp.sort(h, axis=axis, descending=descending),
    )
    return op, shape


def _permute(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    kind = draw(
        st.sampled_from(["take_along_argsort", "top_k", "roll", "associative_scan", "sort_key_val"])
    )
    if kind == "sort_key_val":

        def fn(h, y):
            return lax.sort_key_val(fnp.cos(h), h, dimension=axis)[1]

        return Op(f"sort_key_val(cos h,h,dimension={axis})", fn), shape
    if kind == "take_along_argsort":

        def fn(h, y):
            return fnp.take_along_axis(h, fnp.argsort(fnp.cos(h), axis=axis), axis)

        return Op(f"take_along_axis(argsort(cos h),axis={axis})", fn), shape
    if kind == "top_k":
        k = draw(st.integers(1, shape[-1]))
        return Op(f"top_k({k})", lambda h, y: lax.top_k(h, k)[0]), shape[:-1] + (k,)
    if kind == "roll":
        shift = draw(st.integers(-3, 3))
        return Op(f"roll({shift},axis={axis})", lambda h, y: fnp.roll(h, shift, axis)), shape
    reverse = draw(st.booleans())

    def fn(h, y):
        return lax.associative_scan(lambda a, b: a * 0.5 + b, h, reverse=reverse, axis=axis)

    return Op(f"associative_scan(a/2+b,axis={axis},reverse={reverse})", fn), shape


def _shape_of(fn, shape, y_len) -> tuple | None:
    """The shape `fn` gives, found by running it on zeros (None if its params do not fit)."""
    try:
        return tuple(np.shape(fn(fnp.zeros(shape, np.float64), fnp.zeros(y_len, np.float64))))
    except ValueError:
        return None


def _window(draw, shape, y_len, depth, feats):
    """Windowed ops, whose transposes and batching rules have the most index bookkeeping."""
    if not shape:
        return None
    kind = draw(st.sampled_from(["pool", "lax.pad", "conv"]))
    small = st.integers(1, 2)
    if kind == "conv" and len(shape) <= 3:  # 1-d, on (batch, features, width), as 3-d
        lhs_shape = (1,) * (3 - len(shape)) + shape
        n, c, w = lhs_shape
        groups = draw(st.sampled_from([g for g in (1, 2, 3) if c % g == 0]))
        batch_groups = 1 if groups > 1 else draw(st.sampled_from([b for b in (1, 2) if n % b == 0]))
        out_features = groups * batch_groups * draw(small)
        kernel = _rng(draw).standard_normal((out_features, c // groups, draw(st.integers(1, w))))
        padding = draw(st.sampled_from(["SAME", "VALID", ((1, 0),), ((0, 2),)]))
        strides, lhs_dil, rhs_dil = (draw(small),), (draw(small),), (draw(small),)

        def fn(h, y):
            return lax.conv_general_dilated(
                fnp.reshape(h, lhs_shape),
                lax.convert_element_type(kernel / np.sqrt(kernel[0].size), h.dtype),
                strides,
                padding,
                lhs_dilation=lhs_dil,
                rhs_dilation=rhs_dil,
                feature_group_count=groups,
                batch_group_count=batch_groups,
            )

        name = (
            f"conv(kernel{kernel.shape},strides={strides},padding={padding},lhs_dil={lhs_dil},"
            f"rhs_dil={rhs_dil},groups={groups},batch_groups={batch_groups})"
        )
    elif kind == "lax.pad":
        config = tuple(
            (draw(st.integers(-1, 2)), draw(st.integers(-1, 2)), draw(st.integers(0, 1)))
            for _ in shape
        )

        def fn(h, y):
            return lax.pad(h, 0.5, config)

        name = f"lax.pad({config})"
    elif kind == "conv":
        return None
    else:
        op = draw(st.sampled_from(["max", "min", "add"]))
        window = tuple(draw(st.integers(1, min(side, 3))) for side in shape)
        strides = tuple(draw(small) for _ in shape)
        if op == "add":  # windows of padding alone would be infinite for max and min
            padding = draw(st.sampled_from(["SAME", "VALID"]))
            base = tuple(draw(small) for _ in shape)
            window_dilation = tuple(draw(small) for _ in shape)
        else:
            padding, base, window_dilation = "VALID", None, None
        computation, init = {"max": (lax.max, -np.inf), "min": (lax.min, np.inf)}.get(
            op, (lax.add, 0.0)
        )

        def fn(h, y):
            return lax.reduce_window(
                h, init, computation, window, strides, padding, base, window_dilation
            )

        name = f"reduce_window_{op}({window},{strides},{padding},{base},{window_dilation})"
    new_shape = _shape_of(fn, shape, y_len)
    if new_shape is None or not 0 < _size(new_shape) <= MAX_SIZE:
        return None
    return Op(name, fn), new_shape


def _reshape(draw, shape, y_len, depth, feats):
    candidates = [(_size(shape),), shape[::-1]]
    if len(shape) < 3:
        i = draw(st.integers(0, len(shape)))
        candidates.append(shape[:i] + (1,) + shape[i:])
    if len(shape) >= 2:
        candidates.append(shape[:-2] + (shape[-2] * shape[-1],))
    new_shape = tuple(draw(st.sampled_from(candidates)))
    return Op(f"reshape{new_shape}", lambda h, y: fnp.reshape(h, new_shape)), new_shape


def _transpose(draw, shape, y_len, depth, feats):
    if len(shape) < 2:
        return None
    perm = tuple(draw(st.permutations(range(len(shape)))))
    new_shape = tuple(shape[p] for p in perm)
    if draw(st.booleans()):
        return Op(f"transpose{perm}", lambda h, y: fnp.transpose(h, perm)), new_shape
    return Op(".T", lambda h, y: h.T), shape[::-1]


def _slice(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    step = draw(st.sampled_from([1, 1, 2, -1, -2]))
    start = draw(st.integers(-n, n - 1))
    stop = draw(st.one_of(st.none(), st.integers(-n - 1, n)))
    length = len(range(n)[start:stop:step])
    if length == 0:
        return None
    index = (slice(None),) * axis + (slice(start, stop, step),)
    new_shape = shape[:axis] + (length,) + shape[axis + 1 :]
    return Op(f"h[{index}]", lambda h, y: h[index]), new_shape


def _int_index(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(0, len(shape) - 1))
    i = draw(st.integers(-shape[axis], shape[axis] - 1))
    index = (slice(None),) * axis + (i,)
    return Op(f"h[{index}]", lambda h, y: h[index]), shape[:axis] + shape[axis + 1 :]


def _gather(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    k = draw(st.integers(1, 4))
    if _size(shape) // n * k > MAX_SIZE:
        return None
    idx = _rng(draw).integers(-n, n, size=k)  # duplicates and negative indices
    new_shape = shape[:axis] + (k,) + shape[axis + 1 :]
    mode = draw(st.sampled_from([None, None, "clip", "fill"]))
    if mode is not None:  # out-of-bounds indices too
        idx = _rng(draw).integers(-n - 2, n + 2, size=k)

        def fn(h, y):
            return fnp.take(h, idx, axis=axis, mode=mode, fill_value=0.5)

        return Op(f"take({idx.tolist()},axis={axis},mode={mode})", fn), new_shape
    if draw(st.booleans()):
        op = Op(f"take({idx.tolist()},axis={axis})", lambda h, y: fnp.take(h, idx % n, axis=axis))
        return op, new_shape
    index = (slice(None),) * axis + (idx,)
    return Op(f"h[{index}]", lambda h, y: h[index]), new_shape


def _dynamic_slice(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(0, len(shape) - 1))
    size = draw(st.integers(1, shape[axis]))

    def fn(h, y):
        start = fnp.argmax(fnp.ravel(h))  # data-dependent (and clamped to stay in bounds)
        return lax.dynamic_slice_in_dim(h, start, size, axis)

    new_shape = shape[:axis] + (size,) + shape[axis + 1 :]
    return Op(f"dynamic_slice(argmax,{size},axis={axis})", fn), new_shape


def _scatter(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    n = shape[0]
    rng = _rng(draw)
    if draw(st.booleans()):
        axis = draw(st.integers(0, len(shape) - 1))
        size = draw(st.integers(1, shape[axis]))

        def fn(h, y):
            start = fnp.argmin(fnp.ravel(h))
            update = fnp.sin(lax.slice_in_dim(h, 0, size, axis=axis))
            return lax.dynamic_update_slice_in_dim(h, update, start, axis)

        return Op(f"dynamic_update_slice(argmin,{size},axis={axis})", fn), shape
    if draw(st.booleans()):
        idx = rng.integers(-n, n, size=draw(st.integers(1, 3)))
        return Op(f"at[{idx.tolist()}].add", lambda h, y: h.at[idx].add(fnp.sin(h[idx]))), shape
    # Unique indices (in a random place among slices) for the updates that are not sums.
    axis = draw(st.integers(0, len(shape) - 1))
    unique = rng.permutation(shape[axis])[: draw(st.integers(1, shape[axis]))]
    index = (slice(None),) * axis + (unique,)
    if draw(st.booleans()):
        index = (Ellipsis, *index[axis:]) if axis == len(shape) - 1 else index
    method = draw(st.sampled_from(["set", "multiply", "min", "max", "add"]))

    def fn(h, y):
        return getattr(h.at[index], method)(fnp.cos(h[index]), unique_indices=True)

    return Op(f"at[{index}].{method}(cos)", fn), shape


def _fancy_index(draw, shape, y_len, depth, feats):
    """NumPy indexing with several advanced indices, None and strides mixed in."""
    if len(shape) < 2:
        return None
    rng = _rng(draw)
    k = draw(st.integers(1, 3))
    first = rng.integers(-shape[0], shape[0], size=k)
    last = rng.integers(-shape[-1], shape[-1], size=k)
    kind = draw(st.sampled_from(["separated", "adjacent", "newaxis_stride", "2d"]))
    if kind == "separated":  # advanced indices apart: their axis goes first
        index = (first, *(slice(None),) * (len(shape) - 2), last)
    elif kind == "adjacent":
        index = (slice(None, None, -1), rng.integers(0, shape[1], size=(k, 2)))
    elif kind == "newaxis_stride":
        index = (None, slice(None, None, 2), Ellipsis, None)
    else:
        index = (rng.integers(0, shape[0], size=(2, k)),)
    new_shape = _shape_of(lambda h, y: h[index], shape, y_len)
    if new_shape is None or not 0 < _size(new_shape) <= MAX_SIZE:
        return None
    return Op(f"h[{index}]", lambda h, y: h[index]), new_shape


def _concatenate(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    if draw(st.booleans()) and len(shape) < 3 and 2 * _size(shape) <= MAX_SIZE:
        new_shape = list(shape)
        new_shape.insert(axis % (len(shape) + 1), 2)
        op = Op(f"stack(axis={axis})", lambda h, y: fnp.stack([h, fnp.cos(h)], axis=axis))
        return op, tuple(new_shape)
    if 2 * _size(shape) > MAX_SIZE:
        return None
    new_shape = list(shape)
    new_shape[axis] *= 2
    op = Op(f"concatenate(axis={axis})", lambda h, y: fnp.concatenate([h, fnp.sin(h)], axis))
    return op, tuple(new_shape)


def _pad(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    widths = [tuple(draw(st.lists(st.integers(0, 1), min_size=2, max_size=2))) for _ in shape]
    new_shape = tuple(s + lo + hi for s, (lo, hi) in zip(shape, widths))
    if _size(new_shape) > MAX_SIZE:
        return None
    return Op(f"pad({widths})", lambda h, y: fnp.pad(h, widths, constant_values=0.5)), new_shape


def _matmul(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    kind = draw(st.sampled_from(["matmul", "einsum_gram", "einsum_vec"]))
    n = shape[-1]
    if kind == "einsum_gram" and len(shape) >= 2:
        new_shape = shape[:-1] + (shape[-2],)
        if _size(new_shape) > MAX_SIZE:
            return None
        return Op("h@h^T", lambda h, y: fnp.einsum("...ij,...kj->...ik", h, h)), new_shape
    rng = _rng(draw)
    if kind == "einsum_vec":
        w = rng.standard_normal(n)

        def fn(h, y):
            return fnp.einsum("...i,i->...", h, w.astype(h.dtype))

        return Op("einsum(...i,i)", fn), shape[:-1]
    k = draw(st.integers(1, 3))
    new_shape = shape[:-1] + (k,)
    if _size(new_shape) > MAX_SIZE:
        return None
    w = rng.standard_normal((n, k)) / np.sqrt(n)
    return Op(f"h@W{w.shape}", lambda h, y: h @ w.astype(h.dtype)), new_shape


def _broadcast(draw, shape, y_len, depth, feats):
    k = draw(st.integers(1, 3))
    if len(shape) >= 3 or _size(shape) * k > MAX_SIZE:
        return None
    new_shape = (k,) + shape
    return Op(f"broadcast_to{new_shape}", lambda h, y: fnp.broadcast_to(h, new_shape)), new_shape


# Control flow and the higher-order transformations wrap sub-programs drawn recursively.


AUX = {  # a second output of a nested program: unused (a zero cotangent), used, or an integer
    "unused": (lambda h: fnp.sum(h * h), False),
    "used": (lambda h: fnp.sum(h * h), True),
    "int": (lambda h: fnp.argmax(fnp.ravel(h)), True),
}


def _with_aux(draw, name: str, sub, transform: Callable, with_y: bool = True) -> Op:
    """An op running `sub` under `transform`, with `y` as an argument or closed over, and
    perhaps a second output that the op uses or drops."""
    aux_name = draw(st.sampled_from([None, *sorted(AUX)]))
    closure = not with_y or draw(st.booleans())
    aux, used = AUX[aux_name] if aux_name else (None, False)

    def inner(h, y):
        out = run(sub, h, y)
        return out if aux is None else (out, aux(h))

    def fn(h, y):
        outs = transform(lambda h: inner(h, y))(h) if closure else transform(inner)(h, y)
        if aux is None:
            return outs
        return outs[0] + 0.1 * outs[1] if used else outs[0]

    extras = "".join([f",aux={aux_name}" if aux else "", ",closure" if closure else ""])
    return Op(f"{name}{list(sub)}{extras}", fn)


def _jit(draw, shape, y_len, depth, feats):
    sub, new_shape = _chain(draw, shape, y_len, depth + 1, feats)
    return _with_aux(draw, "jit", sub, fg.jit), new_shape


POLICIES = {
    "default": None,
    "everything": fg.checkpoint_policies.everything_saveable,
    "nothing": fg.checkpoint_policies.nothing_saveable,
    "dots": fg.checkpoint_policies.dots_saveable,
}


def _checkpoint(draw, shape, y_len, depth, feats):
    sub, new_shape = _chain(draw, shape, y_len, depth + 1, feats)
    policy = draw(st.sampled_from(sorted(POLICIES)))
    transform = functools.partial(fg.checkpoint, policy=POLICIES[policy])
    return _with_aux(draw, f"checkpoint[{policy}]", sub, transform), new_shape


def _cond(draw, shape, y_len, depth, feats):
    # The second branch runs the first after an elementwise op, so both give one shape.
    first, new_shape = _chain(draw, shape, y_len, depth + 1, feats)
    pre, _ = _unary(draw, shape, y_len, depth, feats)
    second = (pre, *first)
    if draw(st.booleans()):

        def cond(branch_fn):
            return lambda h: lax.cond(
                fnp.sum(h) > 0, branch_fn, lambda a: branch_fn(run((pre,), a, None)), h
            )

        return _with_aux(draw, f"cond(sum>0,pre={pre})", first, cond, with_y=False), new_shape
    third = (Op("neg", lambda h, y: -h), *first)

    def fn(h, y):
        index = fnp.argmax(fnp.ravel(h)) % 3
        branches = [functools.partial(run, ops) for ops in (first, second, third)]
        return lax.switch(index, branches, h, y)

    return Op(f"switch(argmax%3,{list(first)},{list(second)},{list(third)})", fn), new_shape


def _scan(draw, shape, y_len, depth, feats):
    reverse = draw(st.booleans())
    if shape and draw(st.booleans()):
        # Over the leading axis: the carry has the shape of the body's output, and an integer
        # carry counts the iterations.
        sub, out_shape = _chain(draw, shape[1:], y_len, depth + 1, feats)

        def fn(h, y):
            def body(carry, x):
                c, count = carry
                c = 0.5 * fnp.sin(c) + run(sub, x, y)
                return (c, count + 1), fnp.tanh(c)

            init = fnp.mean(y) * fnp.ones(out_shape, h.dtype)
            (carry, count), ys = lax.scan(body, (init, 0), h, reverse=reverse)
            return ys + carry * count

        return Op(f"scan(xs,reverse={reverse}){list(sub)}", fn), shape[:1] + out_shape
    sub, _ = _chain(draw, shape, y_len, depth + 1, feats, preserve=True)
    length = draw(st.integers(0, 3))
    if draw(st.booleans()):

        def fn(h, y):
            def body(c, _):
                return 0.5 * run(sub, c, y) + 0.5 * c, None

            return lax.scan(body, h, None, length=length, reverse=reverse)[0]

        return Op(f"scan(length={length}){list(sub)}", fn), shape

    def fn(h, y):
        return lax.fori_loop(0, length, lambda i, c: 0.5 * run(sub, c, y) + c / (1.0 + i), h)

    return Op(f"fori_loop(0,{length}){list(sub)}", fn), shape


def _map(draw, shape, y_len, depth, feats):
    if not shape:
        return None
    sub, out_shape = _chain(draw, shape[1:], y_len, depth + 1, feats)
    return Op(f"map{list(sub)}", lambda h, y: lax.map(lambda a: run(sub, a, y), h)), (
        shape[:1] + out_shape
    )


def _while(draw, shape, y_len, depth, feats):
    if feats.reverse:
        return None
    sub, _ = _chain(draw, shape, y_len, depth + 1, feats, preserve=True)
    trips = draw(st.integers(0, 3))

    def fn(h, y):
        def body(state):
            i, c = state
            return i + 1, 0.5 * run(sub, c, y) + 0.5 * c

        return lax.while_loop(lambda state: state[0] < trips, body, (0, h))[1]

    return Op(f"while(trips={trips}){list(sub)}", fn), shape


@fg.custom_jvp
def _softplus_cj(x):
    return fnp.logaddexp(x, 0.0)


@_softplus_cj.defjvp
def _softplus_cj_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus_cj(x), t * nn.sigmoid(x)


def _custom(draw, shape, y_len, depth, feats):
    kinds = ["softplus_cj", "custom_jvp"] + ([] if feats.forward else ["custom_vjp"])
    kind = draw(st.sampled_from(kinds))
    if kind == "softplus_cj":
        return Op("softplus_cj", lambda h, y: _softplus_cj(h)), shape
    if kind == "custom_jvp":  # its rule differentiates `sub` in forward mode
        feats = feats._replace(forward=True)
    sub, new_shape = _chain(draw, shape, y_len, depth + 1, feats)

    def plain(h, y, n):  # integer `n` and second output have float0 tangents and cotangents
        return run(sub, h, y) + 0.01 * n, fnp.argmin(fnp.ravel(h))

    # An opaque function's body differentiates to zero, so that a transformation which
    # differentiates the body instead of applying the rule gives a wrong derivative.
    opaque = draw(st.booleans())

    def body(h, y, n):
        return (
            fg.tree_util.tree_map(lax.stop_gradient, plain(h, y, n)) if opaque else plain(h, y, n)
        )

    if kind == "custom_jvp":
        # The rule is the program's own jvp: the true derivative, through the custom machinery.
        wrapped = fg.custom_jvp(body)
        wrapped.defjvp(lambda primals, tangents: fg.jvp(plain, primals, tangents))
    else:

        def bwd(res, cts):
            h, y, n = res
            return (*fg.vjp(lambda h, y: plain(h, y, n)[0], h, y)[1](cts[0]), None)

        wrapped = fg.custom_vjp(body)
        wrapped.defvjp(lambda h, y, n: (plain(h, y, n), (h, y, n)), bwd)

    def fn(h, y):
        out, k = wrapped(h, y, fnp.argmax(fnp.ravel(h)))
        return out + 0.01 * k

    return Op(f"{kind}{'[opaque]' if opaque else ''}{list(sub)}", fn), new_shape


SIMPLE = [
    _unary,
    _with_y,
    _reduction,
    _reshape,
    _slice,
    _matmul,
    _self_binary,
    _mask,
    _normalize,
    _cumulative,
    _sort,
    _permute,
    _transpose,
    _int_index,
    _gather,
    _fancy_index,
    _dynamic_slice,
    _scatter,
    _window,
    _concatenate,
    _pad,
    _broadcast,
]
NESTED = [_jit, _cond, _scan, _checkpoint, _custom, _map, _while]
SHAPE_PRESERVING = {_unary, _self_binary, _mask, _normalize, _cumulative, _sort, _scatter}
MAX_DEPTH = 2


def _op(draw, shape, y_len, depth, feats, preserve=False):
    builders = SIMPLE + (NESTED if depth < MAX_DEPTH else [])
    if preserve:
        builders = [b for b in builders if b in SHAPE_PRESERVING or b in NESTED]
    for _ in range(10):
        built = draw(st.sampled_from(builders))(draw, shape, y_len, depth, feats)
        if built is not None and (not preserve or built[1] == shape):
            return built
    return Op("sin", lambda h, y: fnp.sin(h)), shape


def _chain(draw, shape, y_len, depth, feats, preserve=False):
    ops = []
    for _ in range(draw(st.integers(1, 4 if depth == 0 else 2))):
        op, shape = _op(draw, shape, y_len, depth, feats, preserve)
        ops.append(op)
    return tuple(ops), tuple(shape)


class Case(NamedTuple):
    ops: tuple
    x: np.ndarray
    y: np.ndarray
    out_shape: tuple

    def f(self, x, y):
        return run(self.ops, fnp.asarray(x), fnp.asarray(y))

    def loss(self, x, y):
        return fnp.sum(fnp.sin(self.f(x, y)))


@st.composite
def cases(draw, feats: Features = DEFAULT_FEATURES, dtypes=(np.float64,)):
    x_shape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 3))))
    y_len = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(dtypes))
    ops, out_shape = _chain(draw, x_shape, y_len, 0, feats)
    rng = _rng(draw)
    x, y = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(y_len).astype(dtype)
    note(f"program {list(ops)} on x{x_shape}, y({y_len},) of {np.dtype(dtype)} -> {out_shape}")
    return Case(ops, x, y, out_shape)


BOTH_FLOATS = (np.float64, np.float32)


def tolerance(case) -> dict:
    return TOL if case.x.dtype == np.float64 else dict(rtol=2e-4, atol=2e-4)


def assert_trees_close(actual, expected, **tol):
    actual_leaves, actual_tree = fg.tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = fg.tree_util.tree_flatten(expected)
    assert actual_tree == expected_tree
    for a, e in zip(actual_leaves, expected_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(a, e, **(tol or TOL))


# ---------------------------------------------------------------------------------------------
# The properties


@given(cases(Features(forward=False, reverse=False), BOTH_FLOATS))
def test_jit_equals_eager(case):
    expected = case.f(case.x, case.y)
    assert np.asarray(expected).shape == case.out_shape
    jitted = fg.jit(case.f)
    assert_trees_close(jitted(case.x, case.y), expected, **tolerance(case))
    assert_trees_close(fg.jit(jitted)(case.x, case.y), expected, **tolerance(case))
    lowered = jitted.lower(case.x, case.y)
    assert lowered.as_text(optimized=True, source_info=True)
    assert_trees_close(lowered.compile()(case.x, case.y), expected, **tolerance(case))


def _derived(case, kind: str) -> Callable:
    """The program, or one a transformation derives from it (passes see those too)."""
    if kind == "plain":
        return case.f
    if kind == "grad":
        return fg.grad(case.loss, argnums=(0, 1))
    if kind == "jvp":
        return lambda x, y: fg.jvp(case.f, (x, y), (fnp.cos(x), fnp.sin(y)))
    return fg.vmap(case.f, in_axes=(0, None))  # "vmap", over a batch of one lane and its double


@given(st.data(), st.sampled_from(["plain", "grad", "jvp", "vmap"]))
def test_staged_program_optimized_or_not_evaluates_to_the_function(data, kind):
    features = Features(forward=kind != "grad", reverse=kind == "grad")
    case = data.draw(cases(features))
    fun = _derived(case, kind)
    x = np.stack([case.x, 2 * case.x]) if kind == "vmap" else case.x
    expected = fun(x, case.y)
    closed = fg.make_jaxpr(fun)(x, case.y)
    args = (fnp.asarray(x), fnp.asarray(case.y))
    out_tree = fg.tree_util.tree_structure(expected)
    for program in (closed, optimize(closed)):
        outs = eval_jaxpr(program.jaxpr, program.consts, *args)
        assert_trees_close(fg.tree_util.tree_unflatten(out_tree, outs), expected)


@given(cases(Features(forward=False)), st.booleans())
def test_reverse_mode_matches_finite_differences(case, second_order):
    check_grads(case.f, (case.x, case.y), order=2 if second_order else 1, modes=("rev",))


@given(cases(Features(reverse=False)), st.booleans())
def test_forward_mode_matches_finite_differences(case, second_order):
    check_grads(case.f, (case.x, case.y), order=2 if second_order else 1, modes=("fwd",))


@given(cases(Features(forward=False)))
def test_grad_commutes_with_jit(case):
    grad = fg.grad(case.loss, argnums=(0, 1))
    expected = grad(case.x, case.y)
    assert_trees_close(fg.grad(fg.jit(case.loss), argnums=(0, 1))(case.x, case.y), expected)
    assert_trees_close(fg.jit(grad)(case.x, case.y), expected)


@given(cases(Features()))
def test_jacfwd_equals_jacrev_and_hessian_is_symmetric(case):
    args = (case.x, case.y)
    assert_trees_close(
        fg.jacfwd(case.f, argnums=(0, 1))(*args), fg.jacrev(case.f, argnums=(0, 1))(*args)
    )
    hessian = np.asarray(fg.hessian(case.loss)(*args))
    n = case.x.size
    flat = hessian.reshape(n, n)
    np.testing.assert_allclose(flat, flat.T, **TOL)
    assert_trees_close(hessian, fg.jacrev(fg.jacfwd(case.loss))(*args))


@given(cases(Features()))
def test_linearize_equals_jvp(case):
    rng = np.random.default_rng(0)
    tangents = (rng.standard_normal(case.x.shape), rng.standard_normal(case.y.shape))
    out, f_jvp = fg.linearize(case.f, case.x, case.y)
    expected_out, expected_tangent = fg.jvp(case.f, (case.x, case.y), tangents)
    assert_trees_close(out, expected_out)
    assert_trees_close(f_jvp(*tangents), expected_tangent)
    assert_trees_close(fg.jit(f_jvp)(*tangents), expected_tangent)
    # The linear function maps a batch of tangents lane by lane; so does the pullback.
    check_batching(f_jvp, [np.stack([tangents[0], -tangents[0]]), tangents[1]], [0, None], **TOL)
    _, pullback = fg.vjp(case.f, case.x, case.y)
    cotangents = np.stack([np.cos(np.asarray(out)), np.ones(case.out_shape)], axis=-1)
    check_batching(pullback, [cotangents], [-1], **TOL)
    assert_trees_close(fg.jit(pullback)(cotangents[..., 0]), pullback(cotangents[..., 0]))


@st.composite
def batched_cases(draw, feats: Features = DEFAULT_FEATURES, dtypes=(np.float64,)):
    """A case, its inputs given a batch axis (`x`, `y` or both), and the out axis."""
    case = draw(cases(feats, dtypes))
    size = draw(st.integers(1, 3))
    batched = draw(st.sampled_from([(True, True), (True, False), (False, True)]))
    rng = _rng(draw)
    args, in_axes = [], []
    for value, is_batched in zip((case.x, case.y), batched):
        if not is_batched:
            args.append(value)
            in_axes.append(None)
            continue
        axis = draw(st.integers(0, value.ndim))
        shape = list(value.shape)
        shape.insert(axis, size)
        args.append(rng.standard_normal(shape).astype(value.dtype))
        in_axes.append(axis - (value.ndim + 1) if draw(st.booleans()) else axis)
    out_ndim = len(case.out_shape)
    out_axis = draw(st.integers(-out_ndim - 1, out_ndim))
    return case, args, in_axes, out_axis


@given(batched_cases(Features(forward=False, reverse=False), BOTH_FLOATS))
def test_vmap_equals_a_loop_of_lanes(batched):
    case, args, in_axes, out_axis = batched
    check_batching(case.f, args, in_axes, out_axis, **tolerance(case))
    check_batching(fg.jit(case.f), args, in_axes, out_axis, **tolerance(case))
    vmapped = fg.vmap(case.f, in_axes=tuple(in_axes), out_axes=out_axis)
    assert_trees_close(fg.jit(vmapped)(*args), vmapped(*args), **tolerance(case))


@given(batched_cases(Features(forward=False)))
def test_vmap_of_grad_is_per_example_gradients(batched):
    case, args, in_axes, _ = batched
    grad = fg.grad(case.loss, argnums=(0, 1))
    check_batching(grad, args, in_axes, 0, **TOL)
    # The gradient of a sum over lanes stacks the lanes' gradients of batched arguments and
    # sums those of unbatched ones.
    size = {np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None}.pop()
    lanes = [
        grad(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)])
        for i in range(size)
    ]
    total = fg.grad(
        lambda x, y: fnp.sum(fg.vmap(case.loss, in_axes=tuple(in_axes))(x, y)), argnums=(0, 1)
    )(*args)
    for i, axis in enumerate(in_axes):
        per_lane = [np.asarray(g[i]) for g in lanes]
        expected = sum(per_lane) if axis is None else np.stack(per_lane, axis=axis)
        np.testing.assert_allclose(np.asarray(total[i]), expected, **TOL)


# ---------------------------------------------------------------------------------------------
# Random stacks of transformations. Each stage maps g(x, y) -> array to a new such function; the
# reference stack replaces jit and checkpoint by the identity and vmap by a loop of the lanes,
# and differentiates the same way, so any disagreement is a composition bug.


def _tangent_like(v):
    return fnp.full_like(v, 0.7)


def _looped(g, argnum: int, axis: int):
    """The reference for vmap over one argument: a loop of the lanes, stacked."""

    def g_loop(*args):
        lanes = []
        for i in range(args[argnum].shape[axis]):
            lane_args = list(args)
            lane_args[argnum] = fnp.take(args[argnum], i, axis=axis)
            lanes.append(g(*lane_args))
        return fnp.stack(lanes)

    return g_loop


def _stage_fns(stage: str, axis):
    """(transformed, reference) for one stage, each mapping g to a new g."""
    if stage == "jit":
        return fg.jit, lambda g: g
    if stage == "checkpoint":
        return fg.checkpoint, lambda g: g
    if stage in ("vmap", "vmap_y"):
        argnum = 0 if stage == "vmap" else 1
        in_axes = (axis, None) if argnum == 0 else (None, axis)
        return lambda g: fg.vmap(g, in_axes=in_axes), lambda g: _looped(g, argnum, axis)

    def derivative(g):
        if stage == "grad":
            return fg.grad(lambda x, y: fnp.sum(fnp.sin(g(x, y))))
        if stage == "jvp":
            return lambda x, y: fg.jvp(g, (x, y), (_tangent_like(x), _tangent_like(y)))[1]
        if stage == "linearize":
            return lambda x, y: fg.linearize(g, x, y)[1](_tangent_like(x), _tangent_like(y))
        if stage == "jacfwd":
            return fg.jacfwd(g, argnums=1)
        if stage == "jacrev":
            return fg.jacrev(g, argnums=1)
        return lambda x, y: fg.vjp(g, x, y)[1](fnp.cos(g(x, y)))[0]  # "vjp"

    return derivative, derivative


STAGES = ["jit", "checkpoint", "vmap", "vmap_y", "grad", "jvp", "linearize", "vjp", "jacfwd"]
STAGES += ["jacrev"]


def _batched(value: np.ndarray, axis: int, size: int) -> np.ndarray:
    return np.stack([value * (1 + 0.25 * i) for i in range(size)], axis)


@st.composite
def stacks(draw):
    stages = draw(st.lists(st.sampled_from(STAGES), min_size=1, max_size=4))
    # linearize is forward mode, but funcgrad's partial evaluation refuses while_loop outright.
    forward = any(s in ("jvp", "linearize", "jacfwd") for s in stages)
    reverse = any(s in ("grad", "vjp", "linearize", "jacrev") for s in stages)
    case = draw(cases(Features(forward=forward, reverse=reverse)))
    x, y = case.x, case.y
    axes = []
    for stage in stages:  # inner first: each vmap adds an axis to its argument
        axis = None
        if stage == "vmap":
            axis = draw(st.integers(0, x.ndim))
            x = _batched(x, axis, draw(st.integers(1, 3)))
        elif stage == "vmap_y":
            axis = draw(st.integers(0, y.ndim))
            y = _batched(y, axis, draw(st.integers(1, 3)))
        axes.append(axis)
    note(f"stages {stages} with vmap axes {axes}")
    return case, list(zip(stages, axes)), x, y


@given(stacks())
def test_random_transformation_stacks_agree_with_their_definitions(stack):
    case, stages, x, y = stack
    g, g_ref = case.f, case.f
    for stage, axis in stages:
        transform, reference = _stage_fns(stage, axis)
        g, g_ref = transform(g), reference(g_ref)
    out = g(x, y)
    assert_trees_close(out, g_ref(x, y), rtol=1e-9, atol=1e-9)
    shape = fg.eval_shape(g, x, y)
    assert (shape.shape, shape.dtype) == (out.shape, out.dtype)


# ---------------------------------------------------------------------------------------------
# Regressions: the minimal forms of what the properties above found


def test_dead_code_elimination_keeps_what_a_pruned_call_reads():
    # The call's rule drops its unused first operand; the second must stay live.
    second = fg.jit(lambda a, b: b)
    closed = fg.make_jaxpr(lambda x, y: second(fnp.sin(x), fnp.cos(y)))(1.0, 2.0)
    pruned = dead_code_elimination(closed)
    assert [eqn.primitive.name for eqn in pruned.jaxpr.eqns] == ["cos", "jit"]
    (out,) = eval_jaxpr(pruned.jaxpr, pruned.consts, fnp.asarray(1.0), fnp.asarray(2.0))
    np.testing.assert_allclose(np.asarray(out), np.cos(2.0), rtol=1e-6)


def test_grad_of_jvp_through_nested_checkpoints():
    # The jvp of the inner checkpoint leaves an equation with no outputs that reads a tangent;
    # splitting the outer one must keep it off the known side.
    outer = fg.checkpoint(fg.checkpoint(lambda h: fnp.clip(h, -1.5, 1.5)))
    tangent_out = fg.grad(lambda x: fg.jvp(outer, (x,), (np.float64(1.0),))[1])
    assert float(tangent_out(np.float64(0.3))) == 0.0
    assert float(fg.grad(lambda x: fg.jvp(outer, (x,), (x,))[1])(np.float64(0.3))) == 1.0


def _two_branches(h):
    # Branch 1 saves one more residual than branch 0, padded with zeros where branch 0 runs.
    branches = [fnp.arctan, lambda a: fnp.arctan(fnp.arctan(a))]
    return lax.switch((h > 0).astype(np.int32), branches, h)


def test_second_derivatives_through_a_vmapped_switch_are_finite():
    xs = np.array([0.3, -0.2])
    expected = [float(fg.grad(fg.grad(_two_branches))(x)) for x in xs]
    per_lane = fg.grad(lambda x: fnp.sum(fg.vmap(fg.grad(_two_branches))(x)))(xs)
    np.testing.assert_allclose(np.asarray(per_lane), expected, rtol=1e-12)
    hessian_diagonal = fg.vmap(fg.hessian(_two_branches))(xs)
    np.testing.assert_allclose(np.asarray(hessian_diagonal), expected, rtol=1e-12)


def test_custom_jvp_rule_with_a_vmapped_switch_under_grad():
    # The rule's tangents pass through the batched switch's lane masks inside the linear program.
    wrapped = fg.custom_jvp(_two_branches)
    wrapped.defjvp(lambda primals, tangents: fg.jvp(_two_branches, primals, tangents))
    xs = np.array([0.3, -0.2])
    expected = [float(fg.grad(_two_branches)(x)) for x in xs]
    got = fg.grad(lambda x: fnp.sum(fg.vmap(wrapped)(x)))(xs)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12)


def test_stop_gradient_of_a_tangent_transposes_as_the_identity():
    square = fg.custom_jvp(lambda x: x * x)
    square.defjvp(lambda primals, tangents: (square(*primals), lax.stop_gradient(tangents[0])))
    assert float(fg.grad(square)(3.0)) == 1.0
    assert float(fg.grad(fg.grad(square))(3.0)) == 0.0


def _sin_scaled(x, n):
    return fnp.sin(x) * n, fnp.argmax(fnp.ravel(x))


_sin_scaled_vjp = fg.custom_vjp(_sin_scaled)
_sin_scaled_vjp.defvjp(
    lambda x, n: (_sin_scaled(x, n), (x, n)),
    lambda res, cts: (cts[0] * fnp.cos(res[0]) * res[1], None),
)
_sin_scaled_jvp = fg.custom_jvp(_sin_scaled)
_sin_scaled_jvp.defjvp(lambda primals, tangents: fg.jvp(_sin_scaled, primals, tangents))


def test_custom_rules_with_integer_arguments_and_outputs_under_grad_and_vmap():
    xs = np.arange(6.0).reshape(2, 3) / 7
    ns = np.arange(6).reshape(2, 3)
    expected = np.cos(xs) * ns
    for custom in (_sin_scaled_vjp, _sin_scaled_jvp):

        def loss(x, custom=custom):
            return fnp.sum(custom(x, ns)[0])

        def vmapped_loss(x, custom=custom):
            return fnp.sum(fg.vmap(custom)(x, ns)[0])

        def twice_vmapped_loss(x, custom=custom):
            return fnp.sum(fg.vmap(fg.vmap(custom))(x, ns)[0])

        for fun in (loss, vmapped_loss, twice_vmapped_loss):
            np.testing.assert_allclose(np.asarray(fg.grad(fun)(xs)), expected, rtol=1e-12)
        per_example = fg.vmap(fg.grad(lambda x, n, custom=custom: fnp.sum(custom(x, n)[0])))
        np.testing.assert_allclose(np.asarray(per_example(xs, ns)), expected, rtol=1e-12)


def _halving(h, trips: int, body):
    return lax.while_loop(
        lambda state: state[0] < trips, lambda state: (state[0] + 1, body(state[1])), (0, h)
    )[1]


def test_jacfwd_through_nested_while_loops():
    # The inner loop's jvp carries primals and tangents together; under jacfwd's vmap only the
    # tangents are batched, which the outer loop must see to keep its primal carry unbatched.
    def f(x):
        return _halving(x, 2, lambda c: 0.5 * _halving(c, 2, fnp.sin) + 0.5 * c)

    x = np.array([0.3, -0.4])
    expected = np.diag([float(fg.jvp(f, (v,), (np.float64(1.0),))[1]) for v in x])
    np.testing.assert_allclose(np.asarray(fg.jacfwd(f)(x)), expected, rtol=1e-12)


def test_vmap_passes_unmapped_arguments_through_as_they_are():
    # As in JAX, so a Python int can reach a jitted function's static argument.
    power_sum = fg.jit(lambda x, k: fnp.sum(x**k), static_argnums=(1,))
    xs = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(np.asarray(fg.vmap(power_sum, (0, None))(xs, 2)), [5.0, 50.0])
    per_example = fg.vmap(fg.grad(power_sum), (0, None))(xs, 3)
    np.testing.assert_allclose(np.asarray(per_example), 3 * xs**2)
