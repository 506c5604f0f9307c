"""Looking into optimizer states: map a function over the parts that mirror the parameters
(`tree_map_params`), record a measurement of each step's updates (`snapshot`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from funcgrad import tree_util
from funcgrad.optim.base import GradientTransformation


@tree_util.register_pytree_node_class
class _ParamsPlaceholder:
    """Stands for the parameters in a state made by init: a tree node with no leaves, so the
    tree_maps of init keep it where a parameter-shaped tree goes."""

    def tree_flatten(self):
        return (), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls()


def tree_map_params(
    initable,
    f: Callable[..., Any],
    state,
    /,
    *rest,
    transform_non_params: Callable[[Any], Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
):
    """`f` over every part of `state` shaped like the parameters (moments, traces, ...),
    leaf by leaf with the leaves of `rest`; the other parts unchanged, or mapped by
    transform_non_params. `initable` is the transformation (or its init) that made `state`:
    its init run on a placeholder shows which parts mirror the parameters. Parts that init
    builds other than by mapping over the parameters are not found."""
    init = initable.init if hasattr(initable, "init") else initable
    template = init(_ParamsPlaceholder())

    def map_part(template_part, part):
        if isinstance(template_part, _ParamsPlaceholder):
            return tree_util.tree_map(f, part, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(part)
        return part

    return tree_util.tree_map(
        map_part, template, state, is_leaf=lambda x: isinstance(x, _ParamsPlaceholder)
    )


class SnapshotState(NamedTuple):
    measurement: Any  # dict: measure_name -> measure(the last updates)


def snapshot(measure_name: str, measure: Callable[[Any], Any]) -> GradientTransformation:
    """Updates unchanged; the state keeps measure(updates) of the last step under
    measure_name (measure(params) after init)."""

    def init(params):
        return SnapshotState({measure_name: measure(params)})

    def update(updates, state, params=None):
        return updates, SnapshotState({measure_name: measure(updates)})

    return GradientTransformation(init, update)
