"""optimizers: first-order optimizers as triples of pure functions, for notebooks written
against `example_libraries.optimizers`.

An optimizer is `(init_fun, update_fun, get_params)`:

    opt_init, opt_update, get_params = optimizers.adam(1e-3)
    opt_state = opt_init(params)
    opt_state = opt_update(step, grads, opt_state)     # step: the iteration index, from 0
    params = get_params(opt_state)

Each optimizer is written for one array (its state a small pytree of arrays beside the
parameter); the `optimizer` decorator makes it work on any pytree of parameters, keeping the
state of every leaf in one `OptimizerState`. That state is a pytree, so `update_fun` can be
jitted with the step index traced, and `unpack_optimizer_state` turns it into plain
containers that pickle (`pack_optimizer_state` is the inverse).

A step size is a number or a schedule, a function of the step index: `constant`,
`exponential_decay`, `inverse_time_decay`, `polynomial_decay`, `piecewise_constant`. (The
richer, composable optimizers are `funcgrad.optim`.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import tree_util

__all__ = [
    "JoinPoint",
    "Optimizer",
    "OptimizerState",
    "adagrad",
    "adam",
    "adamax",
    "clip_grads",
    "constant",
    "exponential_decay",
    "inverse_time_decay",
    "l2_norm",
    "make_schedule",
    "momentum",
    "nesterov",
    "optimizer",
    "pack_optimizer_state",
    "piecewise_constant",
    "polynomial_decay",
    "rmsprop",
    "rmsprop_momentum",
    "sgd",
    "sm3",
    "unpack_optimizer_state",
]

Array = Any
Params = Any  # any pytree of arrays
State = Any  # one parameter's state: a pytree of arrays
Updates = Params  # gradients, shaped as the parameters
Step = int  # the iteration index, from 0; a traced integer inside jit
Schedule = Callable[[Step], float]


class OptimizerState(NamedTuple):
    """Every parameter's state, flattened: `packed_state[i]` holds the leaves of the i-th
    parameter leaf's state, `tree_def` the parameters' structure and `subtree_defs[i]` the
    structure of the i-th state. Only `packed_state` holds arrays: the structures are the
    pytree's static part, so a jitted update retraces only when they change."""

    packed_state: Any
    tree_def: Any
    subtree_defs: Any


tree_util.register_pytree_node(
    OptimizerState,
    lambda state: ((state.packed_state,), (state.tree_def, state.subtree_defs)),
    lambda structures, children: OptimizerState(children[0], *structures),
)

InitFn = Callable[[Params], OptimizerState]
UpdateFn = Callable[[Step, Updates, OptimizerState], OptimizerState]
ParamsFn = Callable[[OptimizerState], Params]


class Optimizer(NamedTuple):
    init_fn: InitFn
    update_fn: UpdateFn
    params_fn: ParamsFn


def optimizer(
    opt_maker: Callable[..., tuple[Callable, Callable, Callable]],
) -> Callable[..., Optimizer]:
    """Make an optimizer written for single arrays work on pytrees of parameters.

    `opt_maker(*args, **kwargs)` returns `(init, update, get_params)` for one array: `init(x0)`
    gives its state (a pytree of arrays), `update(i, g, state)` the next state, and
    `get_params(state)` the array. The decorated maker returns the `Optimizer` whose functions
    apply these to every leaf of a parameter pytree.
    """

    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs) -> Optimizer:
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            x0_leaves, tree_def = tree_util.tree_flatten(x0_tree)
            flat_states = [tree_util.tree_flatten(init(x0)) for x0 in x0_leaves]
            return _packed(flat_states, tree_def)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            packed_state, tree_def, subtree_defs = opt_state
            grad_leaves, grad_def = tree_util.tree_flatten(grad_tree)
            if grad_def != tree_def:
                raise TypeError(
                    f"the optimizer's update_fun got gradients of structure {grad_def}, but its "
                    f"state was initialized for parameters of structure {tree_def}; the two "
                    "must match"
                )
            flat_states = []
            for g, leaves, subtree_def in zip(grad_leaves, packed_state, subtree_defs):
                new_state = update(i, g, tree_util.tree_unflatten(subtree_def, leaves))
                new_leaves, new_def = tree_util.tree_flatten(new_state)
                if new_def != subtree_def:
                    raise TypeError(
                        f"the optimizer's update returned a state of structure {new_def} for a "
                        f"state of structure {subtree_def}; it must keep its structure"
                    )
                flat_states.append((new_leaves, new_def))
            return _packed(flat_states, tree_def)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            packed_state, tree_def, subtree_defs = opt_state
            params = [
                get_params(tree_util.tree_unflatten(subtree_def, leaves))
                for leaves, subtree_def in zip(packed_state, subtree_defs)
            ]
            return tree_util.tree_unflatten(tree_def, params)

        return Optimizer(tree_init, tree_update, tree_get_params)

    return tree_opt_maker


def _packed(flat_states: list[tuple[list, Any]], tree_def) -> OptimizerState:
    """The OptimizerState of the parameters' (leaves, structure) states, in leaf order."""
    packed_state = tuple(leaves for leaves, _ in flat_states)
    subtree_defs = tuple(subtree_def for _, subtree_def in flat_states)
    return OptimizerState(packed_state, tree_def, subtree_defs)


# ---------------------------------------------------------------------------------------------
# Optimizers. In each, `step_size(i)` is the step size at iteration i, and the state is the
# parameter x followed by the running statistics named after the paper's symbols.


@optimizer
def sgd(step_size: float | Schedule) -> Optimizer:
    """Gradient descent: x <- x - step_size(i) * g."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0

    def update(i, g, x):
        return x - step_size(i) * g

    def get_params(x):
        return x

    return Optimizer(init, update, get_params)


@optimizer
def momentum(step_size: float | Schedule, mass: float) -> Optimizer:
    """Heavy-ball momentum: v <- mass * v + g, x <- x - step_size(i) * v."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * velocity, velocity

    return Optimizer(init, update, _first)


@optimizer
def nesterov(step_size: float | Schedule, mass: float) -> Optimizer:
    """Nesterov's momentum: v <- mass * v + g, x <- x - step_size(i) * (mass * v + g), the
    step taken from where the velocity is about to carry x."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * (mass * velocity + g), velocity

    return Optimizer(init, update, _first)


@optimizer
def adagrad(step_size: float | Schedule, momentum: float = 0.9) -> Optimizer:
    """Adagrad (Duchi et al., 2011) with momentum: G <- G + g^2, m <- (1 - momentum) *
    g / sqrt(G) + momentum * m (0 where G is 0), x <- x - step_size(i) * m."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + fnp.square(g)
        m = (1.0 - momentum) * (g * _inverse_sqrt_or_zero(g_sq)) + momentum * m
        return x - step_size(i) * m, g_sq, m

    return Optimizer(init, update, _first)


@optimizer
def rmsprop(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8) -> Optimizer:
    """RMSProp: a <- gamma * a + (1 - gamma) * g^2, x <- x - step_size(i) * g / sqrt(a + eps)."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq_grad = state
        avg_sq_grad = avg_sq_grad * gamma + fnp.square(g) * (1.0 - gamma)
        return x - step_size(i) * g / fnp.sqrt(avg_sq_grad + eps), avg_sq_grad

    return Optimizer(init, update, _first)


@optimizer
def rmsprop_momentum(
    step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8, momentum: float = 0.9
) -> Optimizer:
    """RMSProp whose scaled steps pass through momentum: a as in rmsprop, then
    v <- momentum * v + step_size(i) * g / sqrt(a + eps), x <- x - v."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq_grad, mom = state
        avg_sq_grad = avg_sq_grad * gamma + fnp.square(g) * (1.0 - gamma)
        mom = momentum * mom + step_size(i) * g / fnp.sqrt(avg_sq_grad + eps)
        return x - mom, avg_sq_grad, mom

    return Optimizer(init, update, _first)


@optimizer
def adam(
    step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> Optimizer:
    """Adam (Kingma and Ba, 2015): moments m <- b1 * m + (1 - b1) * g and v <- b2 * v +
    (1 - b2) * g^2, debiased by 1 - b^(i + 1), x <- x - step_size(i) * m^ / (sqrt(v^) + eps)."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * fnp.square(g) + b2 * v
        m_hat = m / (1 - _power(b1, m.dtype, i + 1))
        v_hat = v / (1 - _power(b2, m.dtype, i + 1))
        return x - step_size(i) * m_hat / (fnp.sqrt(v_hat) + eps), m, v

    return Optimizer(init, update, _first)


@optimizer
def adamax(
    step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> Optimizer:
    """AdaMax, Adam under the infinity norm: m as in Adam, u <- max(b2 * u, |g|),
    x <- x - step_size(i) / (1 - b1^(i + 1)) * m / (u + eps)."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = fnp.maximum(b2 * u, fnp.abs(g))
        x = x - (step_size(i) / (1 - _power(b1, m.dtype, i + 1))) * m / (u + eps)
        return x, m, u

    return Optimizer(init, update, _first)


@optimizer
def sm3(step_size: float | Schedule, momentum: float = 0.9) -> Optimizer:
    """SM3 (Anil et al., 2019), Adagrad whose accumulator for a k-d parameter is k vectors,
    one per axis: a <- min over axes of the vectors (broadcast) + g^2, m <- (1 - momentum) *
    g / sqrt(a) + momentum * m (0 where a is 0), x <- x - step_size(i) * m, and each vector
    becomes a's maximum over the other axes. A scalar is kept as a 1-d array of one."""
    step_size = make_schedule(step_size)

    def init(x0):
        x_shape = fnp.shape(x0)
        x0 = fnp.atleast_1d(x0)
        per_axis = [fnp.zeros(size, dtype=x0.dtype) for size in x0.shape]
        return x0, fnp.zeros_like(x0), per_axis, x_shape

    def update(i, g, state):
        x, m, per_axis, x_shape = state
        g = fnp.reshape(g, x.shape)
        along = [_along_axis(v, axis, g.ndim) for axis, v in enumerate(per_axis)]
        accumulator = functools.reduce(fnp.minimum, along) + fnp.square(g)
        m = (1.0 - momentum) * (g * _inverse_sqrt_or_zero(accumulator)) + momentum * m
        x = x - step_size(i) * m
        others = [tuple(a for a in range(x.ndim) if a != axis) for axis in range(x.ndim)]
        per_axis = [accumulator.max(axes) for axes in others]
        return x, m, per_axis, x_shape

    def get_params(state):
        x, _, _, x_shape = state
        # Only a scalar changed shape (to (1,)); x_shape's sizes may be traced inside jit.
        return x if x_shape else fnp.reshape(x, ())

    return Optimizer(init, update, get_params)


def _first(state):
    return state[0]


def _inverse_sqrt_or_zero(x):
    """1 / sqrt(x) where x > 0, else 0 (an accumulator of zero gradients takes no step)."""
    positive = x > 0
    return fnp.where(positive, 1.0 / fnp.sqrt(fnp.where(positive, x, 1.0)), 0.0)


def _power(base: float, dtype, exponent):
    """base ** exponent in the moments' dtype, exponent a Python or traced integer."""
    return fnp.asarray(base, dtype) ** exponent


def _along_axis(vector, axis: int, ndim: int):
    """`vector` as an array of `ndim` dimensions, its entries along `axis`."""
    return fnp.reshape(vector, [-1 if a == axis else 1 for a in range(ndim)])


# ---------------------------------------------------------------------------------------------
# Step-size schedules: functions of the step index i (a Python int, or traced inside jit).


def constant(step_size: float) -> Schedule:
    """step_size at every step."""

    def schedule(i):
        return step_size

    return schedule


def exponential_decay(step_size: float, decay_steps: float, decay_rate: float) -> Schedule:
    """step_size * decay_rate ** (i / decay_steps)."""

    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)

    return schedule


def inverse_time_decay(
    step_size: float, decay_steps: float, decay_rate: float, staircase: bool = False
) -> Schedule:
    """step_size / (1 + decay_rate * i / decay_steps), with i / decay_steps rounded down
    under `staircase`."""

    def schedule(i):
        if staircase:
            return step_size / (1 + decay_rate * fnp.floor(i / decay_steps))
        return step_size / (1 + decay_rate * i / decay_steps)

    return schedule


def polynomial_decay(
    step_size: float, decay_steps: float, final_step_size: float, power: float = 1.0
) -> Schedule:
    """From step_size to final_step_size over decay_steps, then final_step_size:
    (step_size - final) * (1 - min(i, decay_steps) / decay_steps) ** power + final."""

    def schedule(i):
        fraction_left = 1 - fnp.minimum(i, decay_steps) / decay_steps
        return fraction_left**power * (step_size - final_step_size) + final_step_size

    return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
    """values[k] for the steps i with boundaries[k - 1] < i <= boundaries[k]: values[0] up to
    and including boundaries[0], the last value after the last boundary."""
    boundaries, values = fnp.array(boundaries), fnp.array(values)
    if boundaries.ndim != 1 or values.ndim != 1:
        raise ValueError(
            f"piecewise_constant: boundaries and values must be sequences (1-d), got shapes "
            f"{boundaries.shape} and {values.shape}"
        )
    if boundaries.shape[0] != values.shape[0] - 1:
        raise ValueError(
            f"piecewise_constant: there must be one value more than boundaries (a value "
            f"before the first boundary and after each), got {boundaries.shape[0]} boundaries "
            f"and {values.shape[0]} values"
        )

    def schedule(i):
        return values[fnp.sum(i > boundaries)]

    return schedule


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """A schedule as it is, a scalar as the constant schedule."""
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if fnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(
        f"a step size must be a scalar or a schedule (a function of the step index), got "
        f"{type(scalar_or_schedule).__name__} of shape {fnp.shape(scalar_or_schedule)}"
    )


# ---------------------------------------------------------------------------------------------
# Utilities


def l2_norm(tree: Any) -> Array:
    """The Euclidean norm of all of a pytree's entries together (for weight decay or
    clipping)."""
    leaves = tree_util.tree_leaves(tree)
    return fnp.sqrt(sum(fnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree: Any, max_norm: float) -> Any:
    """The gradients scaled by max_norm / norm where their joint l2 norm exceeds max_norm."""
    norm = l2_norm(grad_tree)

    def clip(g):
        return fnp.where(norm < max_norm, g, g * (max_norm / norm))

    return tree_util.tree_map(clip, grad_tree)


# ---------------------------------------------------------------------------------------------
# Serialization: an OptimizerState holds structures (PyTreeDefs), which do not pickle; its
# unpacked form holds only containers, arrays and JoinPoints.


class JoinPoint:
    """One parameter's state in an unpacked optimizer state: a leaf of the parameters' tree
    holding the state's own tree, so the two trees stay told apart."""

    def __init__(self, subtree: Any):
        self.subtree = subtree

    def __iter__(self):
        # Unpacked states were once walked as nested containers; a JoinPoint yields its tree.
        yield self.subtree

    def __repr__(self) -> str:
        return f"JoinPoint({self.subtree!r})"


def unpack_optimizer_state(opt_state: OptimizerState) -> Any:
    """The state as the parameters' tree with a JoinPoint for each parameter, holding that
    parameter's state as its own tree."""
    packed_state, tree_def, subtree_defs = opt_state
    join_points = [
        JoinPoint(tree_util.tree_unflatten(subtree_def, leaves))
        for leaves, subtree_def in zip(packed_state, subtree_defs)
    ]
    return tree_util.tree_unflatten(tree_def, join_points)


def pack_optimizer_state(marked_pytree: Any) -> OptimizerState:
    """The OptimizerState that `unpack_optimizer_state` turned into `marked_pytree`."""
    join_points, tree_def = tree_util.tree_flatten(marked_pytree)
    for join_point in join_points:
        if not isinstance(join_point, JoinPoint):
            raise TypeError(
                f"pack_optimizer_state takes the tree unpack_optimizer_state returns, whose "
                f"leaves are all JoinPoints; got a leaf {join_point!r} of type "
                f"{type(join_point).__name__}"
            )
    flat_states = [tree_util.tree_flatten(join_point.subtree) for join_point in join_points]
    return _packed(flat_states, tree_def)
