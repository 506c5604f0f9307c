"""Products with NumPy's names: matmul, dot, tensordot, einsum, outer, kron, cross, ...

Every contraction is one `dot_general`; operands are promoted to one dtype first, as NumPy
would, and never broadcast in memory: a batch dimension of size one in one operand becomes a
free dimension of the other.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.linalg import dot_general_p
from funcgrad.lax.sharding_constraint import placed
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    convert,
    result_type_and_weak,
    to_array,
)
from funcgrad.numpy.shape_ops import canonicalize_axes, canonicalize_axis
from funcgrad.numpy.ufuncs import multiply, subtract

__all__ = [
    "cross",
    "dot",
    "einsum",
    "einsum_path",
    "inner",
    "kron",
    "matmul",
    "matrix_transpose",
    "outer",
    "tensordot",
    "vdot",
    "vecdot",
]


def _promote_dtypes(*args, preferred=None) -> list:
    """The operands as arrays of their common dtype, shapes untouched; with a preferred result
    dtype, as they are: each product converts its operands exactly into that dtype's
    accumulation, so operands with no common dtype (two float8 formats) contract too."""
    if preferred is not None:
        return [to_array(a) for a in args]
    first = args[0]
    if type(first) is Array and not first.weak_type:
        dtype = first._value.dtype
        if all(type(a) is Array and not a.weak_type and a._value.dtype == dtype for a in args):
            return list(args)
    dtype, weak = result_type_and_weak(*args)
    return [convert(to_array(a), dtype, weak) for a in args]


def _dot_general(lhs, rhs, contracting, batch=((), ()), precision=None, preferred=None):
    return lax.dot_general(lhs, rhs, (contracting, batch), precision, preferred)


# ---------------------------------------------------------------------------------------------
# matmul, dot and friends


def _eager_matmul(a, b):
    """The eager hot path: strong concrete matrices (or stacks with equal batch axes) of one
    dtype whose shapes fit, bound as the dot_general that the general path would produce."""
    if type(a) is not Array or type(b) is not Array or a.weak_type or b.weak_type:
        return None
    a_shape, b_shape = a._value.shape, b._value.shape
    ndim = len(a_shape)
    if (
        ndim < 2
        or len(b_shape) != ndim
        or a_shape[:-2] != b_shape[:-2]
        or a_shape[-1] != b_shape[-2]
        or a._value.dtype != b._value.dtype
    ):
        return None
    if ndim == 2:
        return dot_general_p.bind(a, b, **_MATRIX_PRODUCT_PARAMS)
    batch = tuple(range(ndim - 2))
    return dot_general_p.bind(
        a,
        b,
        dimension_numbers=(((ndim - 1,), (ndim - 2,)), (batch, batch)),
        precision=None,
        preferred_element_type=None,
    )


_MATRIX_PRODUCT_PARAMS = dict(
    dimension_numbers=(((1,), (0,)), ((), ())), precision=None, preferred_element_type=None
)


def matmul(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    """NumPy's matmul: matrix products over the last two axes, broadcasting the rest.

    A 1-d operand is a vector: it is treated as a row (for `a`) or a column (for `b`) and that
    axis is dropped from the result.
    """
    if precision is None and preferred_element_type is None and out_sharding is None:
        fast = _eager_matmul(a, b)
        if fast is not None:
            return fast
    out = _matmul(a, b, precision, preferred_element_type)
    return placed(out, "matmul", out_sharding=out_sharding)


def _matmul(a, b, precision, preferred_element_type):
    a, b = _promote_dtypes(a, b, preferred=preferred_element_type)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: operands must have at least one dimension, got shapes {a.shape} and "
            f"{b.shape} (use multiply for scalars)"
        )
    a_contract, b_contract = a.ndim - 1, max(b.ndim - 2, 0)
    if a.shape[a_contract] != b.shape[b_contract]:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} do not fit: the last axis of the first "
            f"({a.shape[a_contract]}) must equal the "
            f"{'only' if b.ndim == 1 else 'second-to-last'} axis of the second "
            f"({b.shape[b_contract]})"
        )
    a_batch, b_batch = a.shape[: max(a.ndim - 2, 0)], b.shape[: max(b.ndim - 2, 0)]
    if a_batch == b_batch and a.ndim > 1:
        # The common case (plain matrices, or equal batch axes) is one dot_general as it stands.
        batch = tuple(range(len(a_batch)))
        contracting = ((a.ndim - 1,), (b_contract,))
        return _dot_general(a, b, contracting, (batch, batch), precision, preferred_element_type)
    try:
        rank = len(broadcast_shapes(a_batch, b_batch))
    except ValueError:
        raise ValueError(
            f"matmul: the batch axes of shapes {a.shape} and {b.shape} do not broadcast: "
            f"{a_batch} against {b_batch}"
        ) from None
    # As an einsum: "...ij,...jk->...ik", without i for a 1-d `a` and without k for a 1-d `b`.
    a_labels = _batch_labels(rank, len(a_batch)) + (["i", "j"] if a.ndim > 1 else ["j"])
    b_labels = _batch_labels(rank, len(b_batch)) + (["j", "k"] if b.ndim > 1 else ["j"])
    out_labels = list(range(rank)) + ["i"] * (a.ndim > 1) + ["k"] * (b.ndim > 1)
    return _einsum([a, b], [a_labels, b_labels], out_labels, precision, preferred_element_type)


def _batch_labels(rank: int, own_rank: int) -> list[int]:
    """Labels of an operand's leading batch axes, aligned from the right as broadcasting does."""
    return list(range(rank - own_rank, rank))


def dot(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    """NumPy's dot: the last axis of `a` against the second-to-last of `b` (its only, if 1-d)."""
    out = _dot(a, b, precision, preferred_element_type)
    return placed(out, "dot", out_sharding=out_sharding)


def _dot(a, b, precision, preferred_element_type):
    a, b = _promote_dtypes(a, b, preferred=preferred_element_type)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    b_axis = max(b.ndim - 2, 0)
    if a.shape[-1] != b.shape[b_axis]:
        raise ValueError(
            f"dot: shapes {a.shape} and {b.shape} are not aligned: axis {a.ndim - 1} of the "
            f"first has size {a.shape[-1]}, axis {b_axis} of the second has size "
            f"{b.shape[b_axis]}"
        )
    return _dot_general(
        a, b, ((a.ndim - 1,), (b_axis,)), ((), ()), precision, preferred_element_type
    )


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """The dot product of the flattened operands, the first conjugated."""
    a, b = _promote_dtypes(a, b, preferred=preferred_element_type)
    if dtypes.is_complex(a.dtype):
        a = lax.conj(a)
    if a.size != b.size:
        raise ValueError(f"vdot: operands of shapes {a.shape} and {b.shape} differ in size")
    a, b = lax.reshape(a, (a.size,)), lax.reshape(b, (b.size,))
    return _dot_general(a, b, ((0,), (0,)), ((), ()), precision, preferred_element_type)


def vecdot(x1, x2, /, *, axis: int = -1, precision=None, preferred_element_type=None):
    """Dot products of vectors along `axis` (the first conjugated), broadcasting the rest."""
    x1, x2 = _promote_dtypes(x1, x2, preferred=preferred_element_type)
    if dtypes.is_complex(x1.dtype):
        x1 = lax.conj(x1)
    axis1 = canonicalize_axis(axis, x1.ndim, "vecdot")
    axis2 = canonicalize_axis(axis, x2.ndim, "vecdot")
    if x1.shape[axis1] != x2.shape[axis2]:
        raise ValueError(
            f"vecdot: shapes {x1.shape} and {x2.shape} differ along axis {axis} "
            f"({x1.shape[axis1]} against {x2.shape[axis2]})"
        )
    rank = max(x1.ndim, x2.ndim) - 1
    x1_labels = _batch_labels(rank, x1.ndim - 1)
    x2_labels = _batch_labels(rank, x2.ndim - 1)
    x1_labels.insert(axis1, "v")
    x2_labels.insert(axis2, "v")
    broadcast_shapes(
        x1.shape[:axis1] + x1.shape[axis1 + 1 :], x2.shape[:axis2] + x2.shape[axis2 + 1 :]
    )
    return _einsum(
        [x1, x2], [x1_labels, x2_labels], list(range(rank)), precision, preferred_element_type
    )


def _move_axis_last(x, axis: int):
    if axis == x.ndim - 1:
        return x
    return lax.transpose(x, [i for i in range(x.ndim) if i != axis] + [axis])


def inner(a, b, *, precision=None, preferred_element_type=None):
    """Contract the last axis of `a` with the last axis of `b`."""
    a, b = _promote_dtypes(a, b, preferred=preferred_element_type)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: the last axes of shapes {a.shape} and {b.shape} differ in size")
    contracting = ((a.ndim - 1,), (b.ndim - 1,))
    return _dot_general(a, b, contracting, ((), ()), precision, preferred_element_type)


def outer(a, b, out=None):
    """Every product of an element of flattened `a` with one of flattened `b`."""
    if out is not None:
        raise NotImplementedError(
            "outer: the out argument is not supported, because funcgrad arrays are immutable"
        )
    a, b = to_array(a), to_array(b)
    column = lax.reshape(a, (a.size, 1))
    row = lax.reshape(b, (1, b.size))
    return multiply(column, row)


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None, out_sharding=None):
    """Contract the last `axes` axes of `a` with the first of `b`, or the listed pairs."""
    out = _tensordot(a, b, axes, precision, preferred_element_type)
    return placed(out, "tensordot", out_sharding=out_sharding)


def _tensordot(a, b, axes, precision, preferred_element_type):
    a, b = _promote_dtypes(a, b, preferred=preferred_element_type)
    if isinstance(axes, int):
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ValueError(
                f"tensordot: axes={axes} does not fit operands of shapes {a.shape} and {b.shape}"
            )
        a_axes, b_axes = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        try:
            a_axes, b_axes = axes
        except (TypeError, ValueError):
            raise TypeError(
                f"tensordot: axes must be an int or a pair of sequences of axes, got {axes!r}"
            ) from None
        a_axes = (a_axes,) if isinstance(a_axes, int) else tuple(a_axes)
        b_axes = (b_axes,) if isinstance(b_axes, int) else tuple(b_axes)
        if len(a_axes) != len(b_axes):
            raise ValueError(f"tensordot: axes {a_axes} and {b_axes} must be of equal length")
        a_axes = canonicalize_axes(a_axes, a.ndim, "tensordot")
        b_axes = canonicalize_axes(b_axes, b.ndim, "tensordot")
    for i, j in zip(a_axes, b_axes):
        if a.shape[i] != b.shape[j]:
            raise ValueError(
                f"tensordot: axis {i} of shape {a.shape} has size {a.shape[i]}, but axis {j} "
                f"of shape {b.shape} has size {b.shape[j]}"
            )
    return _dot_general(a, b, (a_axes, b_axes), ((), ()), precision, preferred_element_type)


def kron(a, b):
    """The Kronecker product: `b` scaled by each element of `a`, laid out in blocks."""
    a, b = _promote_dtypes(a, b)
    ndim = max(a.ndim, b.ndim)
    a = lax.reshape(a, (1,) * (ndim - a.ndim) + a.shape)
    b = lax.reshape(b, (1,) * (ndim - b.ndim) + b.shape)
    # Interleave the axes: (a0, 1, a1, 1, ...) times (1, b0, 1, b1, ...).
    a_spread = lax.reshape(a, tuple(d for size in a.shape for d in (size, 1)))
    b_spread = lax.reshape(b, tuple(d for size in b.shape for d in (1, size)))
    blocks = multiply(a_spread, b_spread)
    return lax.reshape(blocks, tuple(i * j for i, j in zip(a.shape, b.shape)))


def cross(a, b, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: int | None = None):
    """Cross products of 2- or 3-vectors along `axisa` of `a` and `axisb` of `b`, as NumPy: a
    2-vector has a third component 0, and the product of two 2-vectors is the (scalar) third
    component of theirs."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _promote_dtypes(a, b)
    axisa = canonicalize_axis(axisa, a.ndim, "cross")
    axisb = canonicalize_axis(axisb, b.ndim, "cross")
    if a.shape[axisa] not in (2, 3) or b.shape[axisb] not in (2, 3):
        raise ValueError(
            f"cross: vectors must have 2 or 3 components, got shapes {a.shape} (axis {axisa}) "
            f"and {b.shape} (axis {axisb})"
        )
    both_planar = a.shape[axisa] == b.shape[axisb] == 2
    a, b = _move_axis_last(a, axisa), _move_axis_last(b, axisb)
    a, b = _as_3_vectors(a), _as_3_vectors(b)
    a0, a1, a2 = (lax.index_in_dim(a, i, a.ndim - 1, keepdims=False) for i in range(3))
    b0, b1, b2 = (lax.index_in_dim(b, i, b.ndim - 1, keepdims=False) for i in range(3))
    components = [
        subtract(multiply(a1, b2), multiply(a2, b1)),
        subtract(multiply(a2, b0), multiply(a0, b2)),
        subtract(multiply(a0, b1), multiply(a1, b0)),
    ]
    if both_planar:
        return components[2]
    axisc = canonicalize_axis(axisc, components[0].ndim + 1, "cross")
    pieces = [lax.expand_dims(c, (axisc,)) for c in components]
    return lax.concatenate(pieces, axisc)


def _as_3_vectors(x):
    """Vectors along the last axis with a zero third component appended to 2-vectors."""
    if x.shape[-1] == 3:
        return x
    return lax.pad(x, lax.full((), 0, x.dtype), [(0, 0, 0)] * (x.ndim - 1) + [(0, 1, 0)])


def matrix_transpose(x, /):
    """Swap the last two axes."""
    x = to_array(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: needs at least two axes, got shape {x.shape}")
    permutation = list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2]
    return lax.transpose(x, permutation)


# ---------------------------------------------------------------------------------------------
# einsum
#
# Each axis carries a label: a letter from the subscripts, or an int for the axes an ellipsis
# stands for (counted over the broadcast rank of all ellipses, so they align from the right).


def einsum(
    subscripts: str,
    /,
    *operands,
    out=None,
    optimize=True,
    precision=None,
    preferred_element_type=None,
    _dot_general=lax.dot_general,
    out_sharding=None,
):
    """Einstein summation: contract operands pairwise, each pair with one dot_general.

    Repeated labels within one operand take a diagonal; labels in a single operand and not in
    the output are summed before any contraction. The pair contracted next is the one whose
    result is smallest (greedy), or left to right with optimize=False. `_dot_general` (with
    `lax.dot_general`'s signature) contracts each pair, for a caller that computes products
    its own way.
    """
    if out is not None:
        raise NotImplementedError(
            "einsum: the out argument is not supported, because funcgrad arrays are immutable"
        )
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a string, got {type(subscripts).__name__}")
    arrays = _promote_dtypes(*operands, preferred=preferred_element_type) if operands else []
    input_labels, output_labels = _parse_subscripts(subscripts, [x.shape for x in arrays])
    result = _einsum(
        arrays,
        input_labels,
        output_labels,
        precision,
        preferred_element_type,
        greedy=bool(optimize),
        context=f"subscripts {subscripts!r}",
        dot_general=_dot_general,
    )
    return placed(result, "einsum", out_sharding=out_sharding)


def einsum_path(subscripts: str, /, *operands, optimize="greedy") -> tuple[list, str]:
    """The order in which einsum contracts its operands, as (path, description): path is a
    list of pairs of positions in the list of operands, each pair's result appended to its end
    (NumPy's format, without its leading "einsum_path"); the description names each step.

    The order is einsum's own: the pair giving the smallest intermediate first, or left to
    right with optimize=False; an explicit path (a list of tuples) is returned as given. Only
    the operands' shapes are read.
    """
    shapes = [tuple(np.shape(x)) for x in operands]
    input_labels, output_labels = _parse_subscripts(subscripts, shapes)
    sizes: dict = {}
    for labels, shape in zip(input_labels, shapes):
        for label, n in zip(labels, shape):
            sizes[label] = max(sizes.get(label, 1), n)
    if isinstance(optimize, (list, tuple)):
        path = [tuple(step) for step in optimize if step != "einsum_path"]
        return path, _describe_path(subscripts, path, input_labels, output_labels)
    terms = [(None, list(labels)) for labels in input_labels]
    path = []
    while len(terms) > 1:
        i, j = _greedy_pair(terms, output_labels, sizes) if optimize else (0, 1)
        others = [t for k, t in enumerate(terms) if k not in (i, j)]
        needed = set(output_labels).union(*(labels for _, labels in others))
        kept = [label for label in terms[i][1] + terms[j][1] if label in needed]
        terms = others + [(None, list(dict.fromkeys(kept)))]
        path.append((i, j))
    return path, _describe_path(subscripts, path, input_labels, output_labels)


def _describe_path(subscripts: str, path: list, input_labels: list, output_labels: list) -> str:
    def name(labels) -> str:
        return "".join(label if isinstance(label, str) else "." for label in labels)

    lines = [f"  Complete contraction:  {subscripts}"]
    terms = [list(labels) for labels in input_labels]
    for step in path:
        chosen = [terms[k] for k in step]
        terms = [t for k, t in enumerate(terms) if k not in step]
        needed = set(output_labels).union(*terms)
        result = list(dict.fromkeys(label for t in chosen for label in t if label in needed))
        if not terms:
            result = list(output_labels)
        terms.append(result)
        lines.append(f"  {','.join(name(t) for t in chosen)}->{name(result)}")
    return "\n".join(lines)


def _einsum(
    arrays: list,
    input_labels: list,
    output_labels: list,
    precision,
    preferred,
    greedy: bool = True,
    context: str = "",
    dot_general=lax.dot_general,
):
    """Contract labelled operands (of one dtype) into the labelled output."""
    sizes = _label_sizes(context, arrays, input_labels)
    terms = [_squeeze_broadcast(x, labels, sizes) for x, labels in zip(arrays, input_labels)]
    terms = [_take_diagonals(x, labels) for x, labels in terms]
    terms = [
        _sum_unshared(x, labels, output_labels, [t[1] for j, t in enumerate(terms) if j != i])
        for i, (x, labels) in enumerate(terms)
    ]
    while len(terms) > 1:
        i, j = _greedy_pair(terms, output_labels, sizes) if greedy else (0, 1)
        others = [t for k, t in enumerate(terms) if k not in (i, j)]
        needed = set(output_labels).union(*(labels for _, labels in others))
        contracted = _contract(terms[i], terms[j], needed, precision, preferred, dot_general)
        terms = others[:i] + [contracted] + others[i:]
    x, labels = terms[0]
    if labels != output_labels:
        x = lax.transpose(x, [labels.index(label) for label in output_labels])
    if preferred is not None:
        x = convert(x, dtypes.canonicalize(preferred))
    return x


def _parse_subscripts(subscripts: str, shapes: list[tuple[int, ...]]):
    """Labels of each operand's axes and of the output's."""
    subscripts = subscripts.replace(" ", "")
    if subscripts.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain '->' more than once")
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(
            f"einsum: subscripts {subscripts!r} name {len(terms)} operand(s), but "
            f"{len(shapes)} were given"
        )
    ellipsis_ranks = [_ellipsis_rank(subscripts, term, shape) for term, shape in zip(terms, shapes)]
    rank = max((r for r in ellipsis_ranks if r is not None), default=0)
    input_labels = [_term_labels(term, rank, r) for term, r in zip(terms, ellipsis_ranks)]
    if arrow:
        output_labels = _term_labels(output, rank, rank if "..." in output else None)
        _check_output(subscripts, output, output_labels, input_labels)
    else:
        # Implicit output: the ellipsis axes, then each letter used once, alphabetically.
        letters = [label for labels in input_labels for label in labels if isinstance(label, str)]
        once = sorted(label for label in set(letters) if letters.count(label) == 1)
        output_labels = list(range(rank)) + once
    return input_labels, output_labels


def _ellipsis_rank(subscripts: str, term: str, shape: tuple[int, ...]) -> int | None:
    """How many axes the term's ellipsis stands for (None without an ellipsis)."""
    letters = term.replace("...", "")
    if term.count("...") > 1 or "." in letters or not all(c.isalpha() for c in letters):
        raise ValueError(
            f"einsum: invalid term {term!r} in subscripts {subscripts!r}: use letters and at "
            "most one '...'"
        )
    if "..." not in term:
        if len(term) != len(shape):
            raise ValueError(
                f"einsum: term {term!r} in subscripts {subscripts!r} names {len(term)} axes, "
                f"but its operand has shape {shape}"
            )
        return None
    if len(letters) > len(shape):
        raise ValueError(
            f"einsum: term {term!r} in subscripts {subscripts!r} names {len(letters)} axes "
            f"besides its ellipsis, but its operand has shape {shape}"
        )
    return len(shape) - len(letters)


def _term_labels(term: str, rank: int, ellipsis_rank: int | None) -> list:
    if ellipsis_rank is None:
        return list(term)
    before, _, after = term.partition("...")
    return list(before) + list(range(rank - ellipsis_rank, rank)) + list(after)


def _check_output(subscripts: str, output: str, output_labels: list, input_labels: list):
    letters = [label for label in output_labels if isinstance(label, str)]
    if output.count("...") > 1 or not all(c.isalpha() for c in output.replace("...", "")):
        raise ValueError(
            f"einsum: invalid output {output!r} in subscripts {subscripts!r}: use letters and "
            "at most one '...'"
        )
    if len(set(letters)) != len(letters):
        raise ValueError(f"einsum: output {output!r} in {subscripts!r} repeats a label")
    used = {label for labels in input_labels for label in labels}
    missing = [label for label in letters if label not in used]
    if missing:
        raise ValueError(
            f"einsum: output label {missing[0]!r} in subscripts {subscripts!r} names no axis "
            "of any operand"
        )


def _label_sizes(context: str, arrays: list, input_labels: list) -> dict:
    """The size of each label; ellipsis axes broadcast (size 1 against any size)."""
    sizes: dict = {}
    for x, labels in zip(arrays, input_labels):
        for label, size in zip(labels, x.shape):
            known = sizes.setdefault(label, size)
            if known == size or (isinstance(label, int) and 1 in (known, size)):
                sizes[label] = size if known == 1 else known  # 1 yields, also to 0
                continue
            raise ValueError(
                f"einsum: in {context}, "
                + (f"label {label!r}" if isinstance(label, str) else "the ellipsis axes")
                + f" has sizes {known} and {size} in operands of shapes "
                + ", ".join(str(a.shape) for a in arrays)
            )
    return sizes


def _squeeze_broadcast(x, labels: list, sizes: dict):
    """Drop the size-1 ellipsis axes that broadcast against a longer axis elsewhere."""
    drop = [i for i, label in enumerate(labels) if x.shape[i] == 1 and sizes[label] != 1]
    if not drop:
        return x, labels
    return lax.squeeze(x, drop), [label for i, label in enumerate(labels) if i not in drop]


def _take_diagonals(x, labels: list):
    """Merge the axes of a label repeated within one operand into one (its diagonal)."""
    labels = list(labels)
    for label in dict.fromkeys(labels):
        while labels.count(label) > 1:
            first = labels.index(label)
            second = labels.index(label, first + 1)
            on_diagonal = lax.eq(
                lax.broadcasted_iota(dtypes.int32, x.shape, first),
                lax.broadcasted_iota(dtypes.int32, x.shape, second),
            )
            x = lax.select(on_diagonal, x, lax.full(x.shape, 0, x.dtype))
            x = _sum_axes(x, (second,))
            del labels[second]
    return x, labels


def _sum_axes(x, axes):
    if not axes:
        return x
    # A sum of booleans in einsum is their logical or, as in NumPy.
    if dtypes.is_bool(x.dtype):
        return lax.reduce_or(x, tuple(axes))
    return lax.reduce_sum(x, tuple(axes))


def _sum_unshared(x, labels: list, output_labels: list, other_labels: list):
    """Sum the axes no other operand and not the output need."""
    needed = set(output_labels).union(*other_labels)
    axes = [i for i, label in enumerate(labels) if label not in needed]
    return _sum_axes(x, axes), [label for label in labels if label in needed]


def _greedy_pair(terms: list, output_labels: list, sizes: dict) -> tuple[int, int]:
    """The pair of operands whose contraction gives the smallest intermediate."""
    best = None
    for i in range(len(terms)):
        for j in range(i + 1, len(terms)):
            others = [labels for k, (_, labels) in enumerate(terms) if k not in (i, j)]
            needed = set(output_labels).union(*others)
            kept = (set(terms[i][1]) | set(terms[j][1])) & needed
            size = math.prod(sizes[label] for label in kept)
            if best is None or size < best[0]:
                best = (size, i, j)
    return best[1], best[2]


def _contract(lhs, rhs, needed: set, precision, preferred, dot_general=lax.dot_general):
    """One dot_general: shared labels still needed are batch axes, the rest contracted."""
    (x, x_labels), (y, y_labels) = lhs, rhs
    shared = [label for label in x_labels if label in y_labels]
    batch = [label for label in shared if label in needed]
    contracted = [label for label in shared if label not in needed]
    dimension_numbers = (
        (
            tuple(x_labels.index(l) for l in contracted),
            tuple(y_labels.index(l) for l in contracted),
        ),
        (tuple(x_labels.index(l) for l in batch), tuple(y_labels.index(l) for l in batch)),
    )
    out = dot_general(x, y, dimension_numbers, precision, preferred_element_type=preferred)
    out_labels = (
        batch
        + [label for label in x_labels if label not in shared]
        + [label for label in y_labels if label not in shared]
    )
    return out, out_labels
