"""`fnp.float32` and its kin: names that serve as dtypes wherever NumPy's scalar types do, and
that, called, make funcgrad arrays.

NumPy's `np.float32(x)` makes a NumPy scalar, which a traced value cannot become: inside `jit`
`fnp.int32(x)` must be a conversion of x. So each name is a class of its own whose call is
`asarray(x, dtype)`, and which stands for NumPy's type everywhere else: it compares and hashes
equal to it, NumPy reads its dtype from its `dtype` attribute (`np.zeros(3, fnp.float32)`),
and NumPy's scalars of the type are its instances.
"""

from __future__ import annotations

import numpy as np


class _ScalarMeta(type):
    dtype: np.dtype

    def __call__(cls, x):
        from funcgrad.numpy.creation import asarray

        return asarray(np.asarray(x, cls.dtype) if isinstance(x, str) else x, dtype=cls.dtype)

    def __eq__(cls, other) -> bool:
        return cls is other or cls.dtype.type == other

    def __ne__(cls, other) -> bool:
        return not cls == other

    def __hash__(cls) -> int:
        return hash(cls.dtype.type)

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, cls.dtype.type)

    def __repr__(cls) -> str:
        return f"<class 'funcgrad.numpy.{cls.__name__}'>"


_BY_DTYPE: dict[np.dtype, type] = {}


def scalar_type(dtype) -> type:
    """funcgrad.numpy's scalar type of `dtype` (one class per dtype)."""
    dtype = np.dtype(dtype)
    if dtype not in _BY_DTYPE:
        name = "bool_" if dtype == np.bool_ else dtype.name
        _BY_DTYPE[dtype] = _ScalarMeta(
            name,
            (),
            {
                "dtype": dtype,
                "__module__": "funcgrad.numpy",
                "__doc__": f"The {dtype.name} dtype; called, a {dtype.name} array of its argument.",
            },
        )
    return _BY_DTYPE[dtype]
