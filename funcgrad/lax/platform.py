"""platform_dependent: code that differs by the platform it runs on ('cpu' or 'cuda').

A jitted program is traced once and runs where its data is, on the host or on a GPU, so the
platform is not known while tracing. `platform_index` is a primitive standing for it: eagerly it
is the default device's platform; a compiled program has it replaced by a constant for the
backend it is compiled for (`compiler.passes.resolve_platform`, called by jit before any
backend sees the program). `platform_dependent` switches on it, so every branch is traced and
the one for the platform runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.lax.control_flow import switch

__all__ = ["platform_dependent"]

PLATFORMS = ("cpu", "cuda")

platform_index_p = Primitive("platform_index")


@platform_index_p.def_abstract_eval
def _platform_index_abstract_eval(*, platforms: tuple, default: bool) -> ShapedArray:
    return ShapedArray((), dtypes.int32)


platform_index_p.def_weak_type(never_weak)


def index_for(platform: str, platforms: tuple, default: bool) -> int:
    """The branch for `platform`: the first whose platforms name it, else the default (last)."""
    for i, names in enumerate(platforms):
        if platform in names:
            return i
    if not default:
        raise NotImplementedError(
            f"platform_dependent has no branch for platform {platform!r} (branches for "
            f"{sorted(n for names in platforms for n in names)}) and no default"
        )
    return len(platforms)


def eager_platform() -> str:
    from funcgrad.devices import default_backend

    return "cpu" if default_backend() == "cpu" else "cuda"


@platform_index_p.def_impl
def _platform_index_impl(*, platforms: tuple, default: bool):
    return np.int32(index_for(eager_platform(), platforms, default))


_NO_OPERANDS = "it has no operands: there is nothing to differentiate or to batch"
platform_index_p.not_applicable.update(
    jvp=_NO_OPERANDS,
    transpose=_NO_OPERANDS,
    batch=_NO_OPERANDS,
    llvm="replaced by the constant for the compiled platform before compilation "
    "(compiler.passes.resolve_platform)",
)


def platform_dependent(*args, default: Callable | None = None, **per_platform: Callable):
    """`per_platform[p](*args)` for the platform p ('cpu' or 'cuda') the computation runs on,
    else `default(*args)`.

    Unlike a Python `if` on the current platform, the choice is made where the program runs:
    a jitted function traced once picks the host branch on the CPU and the GPU branch on a
    GPU. Every branch is traced (they must return the same types), as with `switch`, which it
    uses and whose behaviour under transformations it shares.
    """
    unknown = sorted(set(per_platform) - set(PLATFORMS))
    if unknown:
        raise ValueError(
            f"platform_dependent: unknown platforms {unknown}; funcgrad runs on {list(PLATFORMS)}"
        )
    if not per_platform and default is None:
        raise TypeError("platform_dependent needs a branch for a platform or a default")
    platforms = tuple((name,) for name in per_platform)
    branches = list(per_platform.values()) + ([default] if default is not None else [])
    if len(branches) == 1:
        index_for(eager_platform(), platforms, default is not None)  # raises if unmatched
        return branches[0](*args)
    index = platform_index_p.bind(platforms=platforms, default=default is not None)
    return switch(index, branches, *args)
