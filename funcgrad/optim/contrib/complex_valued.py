"""Complex parameters for optimizers written for real ones: each complex leaf is handed to
the inner transformation as the pair (real part, imaginary part), so its moments are those
of the two real parameters, not of the complex number."""

from __future__ import annotations

from typing import Any, NamedTuple

import funcgrad.numpy as fnp
from funcgrad import tree_util
from funcgrad.optim.base import GradientTransformation


class SplitRealAndImaginaryArrays(NamedTuple):
    real: Any
    imaginary: Any


class SplitRealAndImaginaryState(NamedTuple):
    inner_state: Any


def _split(x):
    x = fnp.asarray(x)
    return SplitRealAndImaginaryArrays(x.real, x.imag) if fnp.iscomplexobj(x) else x


def _join(x):
    if isinstance(x, SplitRealAndImaginaryArrays):
        return x.real + x.imaginary * 1j
    return x


def split_real_and_imaginary(inner: GradientTransformation) -> GradientTransformation:
    """`inner` on the real and imaginary parts of complex leaves as two real leaves; real
    leaves pass as they are, and the updates are put back together."""

    def split_tree(tree):
        return None if tree is None else tree_util.tree_map(_split, tree)

    def init(params):
        return SplitRealAndImaginaryState(inner.init(split_tree(params)))

    def update(updates, state, params=None):
        new, inner_state = inner.update(split_tree(updates), state.inner_state, split_tree(params))
        joined = tree_util.tree_map(
            _join, new, is_leaf=lambda x: isinstance(x, SplitRealAndImaginaryArrays)
        )
        return joined, SplitRealAndImaginaryState(inner_state)

    return GradientTransformation(init, update)
