"""Operators and NumPy-style methods for both concrete arrays and tracers.

They are installed on `Array` and `core.Tracer` from here, so the core stays below the NumPy
layer and a traced value behaves exactly like a concrete one.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core
from funcgrad.array import Array
from funcgrad.numpy import ufuncs

_OPERAND_TYPES = (Array, core.Tracer, np.ndarray, np.generic, bool, int, float, complex)


# Python containers are refused rather than deferred to: deferring makes `x == [0, 1]` fall
# back to identity and silently give False.
_REFUSED_OPERAND_TYPES = (list, tuple, set, frozenset, dict)


def _refuse_container(fn, other) -> None:
    if isinstance(other, _REFUSED_OPERAND_TYPES):
        raise TypeError(
            f"{fn.__name__}: an operator between an array and a Python "
            f"{type(other).__name__} is not supported; convert the {type(other).__name__} "
            "with fnp.asarray(...) first"
        )


def _operator(fn):
    def method(self, other):
        if not isinstance(other, _OPERAND_TYPES):
            _refuse_container(fn, other)
            return NotImplemented
        return fn(self, other)

    method.__name__ = fn.__name__
    return method


def _reflected(fn):
    def method(self, other):
        if not isinstance(other, _OPERAND_TYPES):
            _refuse_container(fn, other)
            return NotImplemented
        return fn(other, self)

    method.__name__ = f"r{fn.__name__}"
    return method


def _at(self):
    from funcgrad.numpy.indexing import IndexUpdateHelper

    return IndexUpdateHelper(self)


def _real_property(self):
    return ufuncs.real(self)


def _imag_property(self):
    from funcgrad import numpy as fnp

    return fnp.imag(self)


def _transpose_property(self):
    from funcgrad import numpy as fnp

    return fnp.transpose(self)


def _matrix_transpose_property(self):
    from funcgrad import numpy as fnp

    return fnp.swapaxes(self, -1, -2)


def _tracer_iter(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    return (self[i] for i in range(self.shape[0]))


def _astype(self, dtype, copy: bool = False):
    from funcgrad import dtypes
    from funcgrad.numpy._promotion import convert

    return convert(self, dtypes.canonicalize(dtype), False)


_OPERATORS = {
    "__add__": _operator(ufuncs.add),
    "__radd__": _reflected(ufuncs.add),
    "__sub__": _operator(ufuncs.subtract),
    "__rsub__": _reflected(ufuncs.subtract),
    "__mul__": _operator(ufuncs.multiply),
    "__rmul__": _reflected(ufuncs.multiply),
    "__truediv__": _operator(ufuncs.true_divide),
    "__rtruediv__": _reflected(ufuncs.true_divide),
    "__floordiv__": _operator(ufuncs.floor_divide),
    "__rfloordiv__": _reflected(ufuncs.floor_divide),
    "__mod__": _operator(ufuncs.remainder),
    "__rmod__": _reflected(ufuncs.remainder),
    "__divmod__": _operator(ufuncs.divmod),
    "__rdivmod__": _reflected(ufuncs.divmod),
    "__pow__": _operator(ufuncs.power),
    "__rpow__": _reflected(ufuncs.power),
    "__and__": _operator(ufuncs.bitwise_and),
    "__rand__": _reflected(ufuncs.bitwise_and),
    "__or__": _operator(ufuncs.bitwise_or),
    "__ror__": _reflected(ufuncs.bitwise_or),
    "__xor__": _operator(ufuncs.bitwise_xor),
    "__rxor__": _reflected(ufuncs.bitwise_xor),
    "__lshift__": _operator(ufuncs.left_shift),
    "__rlshift__": _reflected(ufuncs.left_shift),
    "__rshift__": _operator(ufuncs.right_shift),
    "__rrshift__": _reflected(ufuncs.right_shift),
    "__eq__": _operator(ufuncs.equal),
    "__ne__": _operator(ufuncs.not_equal),
    "__lt__": _operator(ufuncs.less),
    "__le__": _operator(ufuncs.less_equal),
    "__gt__": _operator(ufuncs.greater),
    "__ge__": _operator(ufuncs.greater_equal),
    "__neg__": ufuncs.negative,
    "__pos__": ufuncs.positive,
    "__abs__": ufuncs.absolute,
    "__invert__": ufuncs.bitwise_not,
    "__round__": lambda self, ndigits=None: ufuncs.round(self, ndigits or 0),
    "at": property(_at),
    "T": property(_transpose_property),
    "real": property(_real_property),
    "imag": property(_imag_property),
    "mT": property(_matrix_transpose_property),
    "astype": _astype,
}

# Methods that forward to the funcgrad.numpy function of the same name, with `self` first.
_FORWARDED = (
    "all any argmax argmin argsort clip conj conjugate cumprod cumsum diagonal dot max "
    "mean min nonzero prod ptp ravel repeat reshape round searchsorted sort squeeze std sum "
    "swapaxes take trace transpose var"
).split()


def _forward(name: str):
    def method(self, *args, **kwargs):
        from funcgrad import numpy as fnp

        return getattr(fnp, name)(self, *args, **kwargs)

    method.__name__ = name
    return method


def _reshape(self, *shape, order="C"):
    from funcgrad import numpy as fnp

    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    return fnp.reshape(self, shape, order=order)


def _transpose(self, *axes):
    from funcgrad import numpy as fnp

    if len(axes) == 1 and not isinstance(axes[0], int):
        axes = axes[0]
    return fnp.transpose(self, axes or None)


def _flatten(self, order="C"):
    from funcgrad import numpy as fnp

    return fnp.ravel(self, order=order)


def _tracer_copy(self):
    """A traced value's copy is the value: it is immutable, and nothing is donated while
    tracing (a concrete array's `copy` is a distinct array, for donation's sake)."""
    return self


def install() -> None:
    # Imported here, once: these modules import this one's package, so not at module level.
    from funcgrad.numpy.indexing import getitem
    from funcgrad.numpy.linalg_ops import matmul

    _OPERATORS["__matmul__"] = _operator(matmul)
    _OPERATORS["__rmatmul__"] = _reflected(matmul)
    _OPERATORS["__getitem__"] = getitem
    for cls in (Array, core.Tracer):
        for name, method in _OPERATORS.items():
            setattr(cls, name, method)
        for name in _FORWARDED:
            setattr(cls, name, _forward(name))
        cls.reshape = _reshape
        cls.transpose = _transpose
        cls.flatten = _flatten
    core.Tracer.__iter__ = _tracer_iter
    core.Tracer.copy = _tracer_copy
