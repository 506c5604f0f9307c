"""Lowering jaxpr equations into kernel IR, fusing producers into their consumers.

A fused kernel computes its roots one element at a time. `KernelBuilder.element(var, index)`
gives the kernel-IR expression of `var` at a multi-dimensional `index`: a load when `var` lives
in a buffer, otherwise the expression its producing equation computes there, found by that
primitive's *element rule* from the elements of its own operands. So an elementwise chain, a
broadcast, a transpose or a gather inlines into whatever reads it, and nothing is written to
memory between them.

Equations whose outputs cannot be computed one element at a time from their operands
(reductions, cumulative ops, scatters, windows, contractions) have a *root rule* instead: it
writes a whole loop nest for the equation's output, reading its operands through `element`,
so their elementwise producers fuse in as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from funcgrad import dtypes
from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler import mathlib, radix_sort
from funcgrad.compiler.choices import Choice
from funcgrad.compiler.kernel_ir import INDEX, Expr
from funcgrad.core import PRIMITIVES, Primitive
from funcgrad.ir import JaxprEqn, Literal, Var

ElementRule = Callable[["KernelBuilder", JaxprEqn, list], "Expr | list[Expr]"]
RootRule = Callable[["KernelBuilder", JaxprEqn, list], list]

element_rules: dict[Primitive, ElementRule] = {}
root_rules: dict[Primitive, RootRule] = {}
# Primitives whose element rule applies only to some of their equations (the others take the
# root rule): primitive -> predicate on the equation.
element_rule_applies: dict[Primitive, Callable[[JaxprEqn], bool]] = {}


def fusible(eqn: JaxprEqn) -> bool:
    """Whether `eqn` can be computed one output element at a time inside its readers."""
    rule_applies = element_rule_applies.get(eqn.primitive)
    return eqn.primitive in element_rules and (rule_applies is None or rule_applies(eqn))


class CompileError(NotImplementedError):
    """The compiler has no lowering for an equation (names the primitive and its operands)."""


def describe(eqn: JaxprEqn) -> str:
    operands = ", ".join(v.aval.str_short() for v in eqn.invars)
    where = f" at {eqn.source_info}" if eqn.source_info is not None else ""
    return f"{eqn.primitive.name}({operands}){where}"


# ---------------------------------------------------------------------------------------------
# The builder


class Delinearized(list):
    """Indices that came from splitting one flat offset over `shape`; flattening them over the
    same shape gives the offset back without the divisions (a reshape between buffers of one
    layout costs nothing)."""

    def __init__(self, indices, linear: Expr, shape: tuple[int, ...]):
        super().__init__(indices)
        self.linear = linear
        self.shape = shape


def flat_offset(index: list, shape: tuple[int, ...]) -> Expr:
    # A rank-0 value's offset is 0, never its reader's flat offset: an empty index has no
    # component to key the builder's memo by, so that expression would reach other readers,
    # outside the loops that define it.
    if isinstance(index, Delinearized) and index.shape == tuple(shape) and shape:
        return index.linear
    return K.row_major_offset(list(index), shape)


def split_offset(linear: Expr, shape: tuple[int, ...]) -> list:
    indices = []
    remaining = linear
    for d in reversed(range(len(shape))):
        size = shape[d]
        if d == 0:
            indices.append(remaining)
        elif size == 1:
            indices.append(K.const(0, INDEX))
        else:
            indices.append(K.binary("rem", remaining, K.const(size, INDEX)))
            remaining = K.binary("div", remaining, K.const(size, INDEX))
    return Delinearized(reversed(indices), linear, tuple(shape))


class KernelBuilder:
    """Builds one kernel. `producer` maps each fused variable to its equation; `buffer_of`
    maps each variable that lives in memory to its buffer."""

    def __init__(self, producer: dict, buffer_of: dict):
        self.producer = producer
        self.buffer_of = buffer_of
        self.inputs: list[K.Buffer] = []
        self.scratch: list[K.Buffer] = []  # working memory of the kernel, in the arena
        # Variables that live in scratch for one iteration of a shared outer loop: var ->
        # (scratch buffer, number of outer dimensions its index drops).
        self.local: dict = {}
        # Whether a root rule proved its outer loop's iterations independent where the
        # offsets do not show it (`K.Kernel.independent_outer`).
        self.independent_outer = False
        self._memo: dict = {}

    def scratch_buffer(self, dtype, size: int) -> K.Buffer:
        buffer = K.Buffer(f"s{next(K._names)}", np.dtype(dtype), size)
        self.scratch.append(buffer)
        return buffer

    def input(self, var: Var) -> K.Buffer:
        return self.reads(self.buffer_of[var])

    def reads(self, buffer: K.Buffer) -> K.Buffer:
        """Make `buffer` an input of the kernel (for loads that no variable stands behind)."""
        if buffer not in self.inputs:
            self.inputs.append(buffer)
        return buffer

    def compute(self, eqn: JaxprEqn, index: list) -> Expr | list[Expr]:
        """The value(s) `eqn` computes at `index` (for the kernel that stores them)."""
        return element_rules[eqn.primitive](self, eqn, index)

    def element(self, atom, index: list) -> Expr:
        if type(atom) is Literal:
            return K.const(atom.val, atom.aval.dtype)
        if atom in self.local:
            buffer, outer = self.local[atom]
            return K.Load(buffer, flat_offset(index[outer:], atom.aval.shape[outer:]))
        if atom in self.buffer_of:
            shape = atom.aval.shape
            return K.Load(self.input(atom), flat_offset(index, shape))
        eqn = self.producer[atom]
        key = (id(eqn), tuple(map(id, index)))
        if isinstance(index, Delinearized):  # its flat offset is read too (`flat_offset`)
            key += (id(index.linear), index.shape)
        hit = self._memo.get(key)
        if hit is None:
            if not fusible(eqn):
                raise CompileError(f"the compiler cannot fuse {describe(eqn)}")
            rule = element_rules[eqn.primitive]
            hit = (index, rule(self, eqn, index))  # the index is kept alive with its ids
            self._memo[key] = hit
        value = hit[1]
        return value[eqn.outvars.index(atom)] if isinstance(value, list) else value


def loop_nest(shape: tuple[int, ...], body: Callable[[list], list]) -> list:
    """Statements looping over every index of `shape`, innermost dimension last."""
    indices = [K.fresh_index() for _ in shape]
    statements = body(list(indices))
    for index, size in reversed(list(zip(indices, shape))):
        statements = [K.Loop(index, 0, size, statements)]
    return statements


def map_loops(shape: tuple[int, ...], body: Callable[[list], list]) -> list:
    """Statements running `body(index)` at every index of `shape`: one flat loop when the body
    needs no index but the flat offset itself (an elementwise kernel over arrays of one
    shape), which vectorizes whatever the shape; otherwise a loop nest."""
    if len(shape) <= 1:
        return loop_nest(shape, body)
    linear = K.fresh_index()
    index = split_offset(linear, shape)
    statements = body(index)
    components = {id(i) for i in index if i is not linear}
    if not _mentions(statements, components):
        return [K.Loop(linear, 0, math.prod(shape), statements)]
    return loop_nest(shape, body)


def _mentions(statements: list, nodes: set) -> bool:
    """Whether any expression of `statements` contains one of `nodes` (by identity)."""
    seen: set = set()
    stack: list = []
    for stmt in statements:
        if isinstance(stmt, K.Store):
            stack += [stmt.offset, stmt.value]
        elif isinstance(stmt, K.SetAcc):
            stack.append(stmt.value)
        elif isinstance(stmt, K.Loop):
            if _mentions(stmt.body, nodes):
                return True
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        if id(e) in nodes:
            return True
        seen.add(id(e))
        for child in ("offset", "x", "a", "b", "pred", "on_true", "on_false"):
            value = getattr(e, child, None)
            if isinstance(value, K.Expr):
                stack.append(value)
    return False


# ---------------------------------------------------------------------------------------------
# Elementwise rules


# Half-precision and narrow values are computed in float32 (narrow integers in int32) and
# rounded after each operation.
compute_dtype = dtypes.compute_dtype


def _operand(builder: KernelBuilder, atom, index: list) -> Expr:
    # Rank-0 operands broadcast against the others.
    value = builder.element(atom, index if atom.aval.ndim else [])
    return K.cast(value, compute_dtype(value.dtype))


def _elementwise(compute: Callable[..., Expr]) -> ElementRule:
    def rule(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
        operands = [_operand(builder, v, index) for v in eqn.invars]
        return K.cast(compute(*operands, **eqn.params), eqn.outvars[0].aval.dtype)

    return rule


_UNARY = {
    "neg": "neg",
    "sign": "sign",
    "floor": "floor",
    "ceil": "ceil",
    "is_finite": "is_finite",
    "exp": "exp",
    "exp2": "exp2",
    "log": "log",
    "log1p": "log1p",
    "log10": "log10",
    "log2": "log2",
    "expm1": "expm1",
    "tanh": "tanh",
    "logistic": "logistic",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "cbrt": "cbrt",
    "abs": "abs",
    "erf": "erf",
    "erfc": "erfc",
    "lgamma": "lgamma",
    "not": "not",
    "population_count": "popcount",
}
_BINARY = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "div",
    "rem": "rem",
    "pow": "pow",
    "max": "max",
    "min": "min",
    "atan2": "atan2",
    "nextafter": "nextafter",
    "eq": "eq",
    "ne": "ne",
    "lt": "lt",
    "le": "le",
    "gt": "gt",
    "ge": "ge",
    "and": "and",
    "or": "or",
    "xor": "xor",
    "shift_left": "shl",
    "shift_right_logical": "shr_logical",
    "shift_right_arithmetic": "shr_arith",
}

# primitive name -> the kernel-IR operation it becomes
KERNEL_OPS = {**_UNARY, **_BINARY}

for _name, _op in _UNARY.items():
    element_rules[PRIMITIVES[_name]] = _elementwise(lambda x, _op=_op: K.unary(_op, x))
for _name, _op in _BINARY.items():
    element_rules[PRIMITIVES[_name]] = _elementwise(lambda a, b, _op=_op: K.binary(_op, a, b))


def _nextafter(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    """Half-precision and narrow operands are computed in float32, whose neighbour of such a
    value rounds back to it: the step is taken in the operands' own format."""
    a, b = (_operand(builder, v, index) for v in eqn.invars)
    dtype = eqn.outvars[0].aval.dtype
    if compute_dtype(dtype) != dtype:
        return K.cast(mathlib.nextafter(a, b, storage=dtype), dtype)
    return K.cast(K.binary("nextafter", a, b), dtype)


element_rules[PRIMITIVES["nextafter"]] = _nextafter


def _on_bit_patterns(op: str) -> ElementRule:
    """A logical shift or a bit count of signed narrow integers sees the format's own bits,
    not its int32 compute value's sign extension: the operands are masked to those bits, as
    the reference widens them (`lax.elementwise.computed_wide`)."""

    def rule(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
        operands = []
        for atom in eqn.invars:
            value = _operand(builder, atom, index)
            dtype = atom.aval.dtype
            if dtypes.is_narrow(dtype) and not dtypes.is_unsigned(dtype):
                mask = K.const((1 << dtypes.bit_width(dtype)) - 1, value.dtype)
                value = K.binary("and", value, mask)
            operands.append(value)
        computed = K.unary(op, *operands) if len(operands) == 1 else K.binary(op, *operands)
        return K.cast(computed, eqn.outvars[0].aval.dtype)

    return rule


element_rules[PRIMITIVES["shift_right_logical"]] = _on_bit_patterns("shr_logical")
element_rules[PRIMITIVES["population_count"]] = _on_bit_patterns("popcount")


def _round(x: Expr, *, rounding_method) -> Expr:
    return K.unary("round_even" if int(rounding_method) == 1 else "round_away", x)


def _integer_pow(x: Expr, *, y: int) -> Expr:
    """x ** y by repeated squaring. Each squaring doubles the relative error it inherits, so
    a float32 power other than x^2 and 1/x runs in float64 (then rounded once) and a float64
    one past x^4 is `pow`'s (x^100 by squaring was 80 ulp from the reference's power, x^1000
    800). A negative float power is that of the reciprocal: 1 / x^n overflowed to 0 where
    x^-n is a subnormal."""
    if x.dtype.kind != "f":
        return _power_by_squaring(x, y)
    if x.dtype == np.float32 and not -1 <= y <= 2:
        return K.cast(_integer_pow(K.cast(x, np.float64), y=y), x.dtype)
    if abs(y) > 4:
        return K.binary("pow", x, K.const(float(y), x.dtype))
    if y < 0:
        return _power_by_squaring(K.binary("div", K.const(1, x.dtype), x), -y)
    return _power_by_squaring(x, y)


def _power_by_squaring(x: Expr, n: int) -> Expr:
    """x ** n for n >= 0 (integer powers are never negative)."""
    result: Expr | None = None
    power = x
    while n:
        if n & 1:
            result = power if result is None else result * power
        n >>= 1
        if n:
            power = power * power
    return K.const(1, x.dtype) if result is None else result


def _select_n(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    which, *cases = eqn.invars
    selector = builder.element(which, index if which.aval.ndim else [])
    values = [builder.element(c, index) for c in cases]
    if len(values) == 1:
        return values[0]
    if selector.dtype == K.BOOL:
        return K.select(selector, values[1], values[0])
    # An integer selector picks case k; out-of-range selectors clamp as in the reference. Cases
    # past the selector dtype's maximum are out of its reach (and their numbers may not fit it).
    last = min(len(values) - 1, int(dtypes.iinfo(selector.dtype).max))
    result = values[last]
    for k in reversed(range(last)):
        result = K.select(K.binary("le", selector, K.const(k, selector.dtype)), values[k], result)
    return result


def _clamp(lo: Expr, x: Expr, hi: Expr) -> Expr:
    return K.binary("min", K.binary("max", x, lo), hi)


def _convert(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    return K.cast(builder.element(eqn.invars[0], index), eqn.params["new_dtype"])


def _bitcast(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    """Same width: reinterpret. Narrower: the last output axis picks one piece of the operand's
    bits (little-endian, as the reference's memory view). Wider: the operand's last axis holds
    the pieces of one result."""
    (x,) = eqn.invars
    new_dtype = np.dtype(eqn.params["new_dtype"])
    old_size, new_size = x.aval.dtype.itemsize, new_dtype.itemsize
    if old_size == new_size:
        return K.Bitcast(builder.element(x, index), new_dtype)
    if old_size > new_size:
        wide = np.dtype(f"uint{old_size * 8}")
        bits = K.Bitcast(builder.element(x, index[:-1]), wide)
        shift = K.cast(index[-1], wide) * K.const(new_size * 8, wide)
        piece = K.cast(K.binary("shr_logical", bits, shift), np.dtype(f"uint{new_size * 8}"))
        return K.Bitcast(piece, new_dtype)
    wide = np.dtype(f"uint{new_size * 8}")
    narrow = np.dtype(f"uint{old_size * 8}")
    result: Expr = K.const(0, wide)
    for k in range(new_size // old_size):
        piece = K.cast(K.Bitcast(builder.element(x, [*index, _index_const(k)]), narrow), wide)
        result = K.binary("or", result, K.binary("shl", piece, K.const(k * old_size * 8, wide)))
    return K.Bitcast(result, new_dtype)


def _identity(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    return builder.element(eqn.invars[0], index)


element_rules[PRIMITIVES["round"]] = _elementwise(_round)
element_rules[PRIMITIVES["integer_pow"]] = _elementwise(_integer_pow)
element_rules[PRIMITIVES["select_n"]] = _select_n
element_rules[PRIMITIVES["clamp"]] = _elementwise(_clamp)
element_rules[PRIMITIVES["convert_element_type"]] = _convert
element_rules[PRIMITIVES["bitcast_convert_type"]] = _bitcast
element_rules[PRIMITIVES["stop_gradient"]] = _identity
# (at the top of a program, simplification has removed it; inside a loop or branch it stays)
element_rules[PRIMITIVES["sharding_constraint"]] = _identity
# The key-use markers of key-reuse checking (funcgrad.key_reuse); simplification drops them
# first, so these are only for a program compiled without the passes.
element_rules[PRIMITIVES["random_consume"]] = _identity
element_rules[PRIMITIVES["random_clone"]] = _identity

# ---------------------------------------------------------------------------------------------
# Shape rules: each maps the output index to the operand index it reads.


def _index_const(value: int) -> Expr:
    return K.const(value, INDEX)


def _broadcast_in_dim(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    (x,) = eqn.invars
    dims = eqn.params["broadcast_dimensions"]
    operand_index = [
        _index_const(0) if size == 1 and eqn.params["shape"][d] != 1 else index[d]
        for d, size in zip(dims, x.aval.shape)
    ]
    return builder.element(x, operand_index)


def _reshape(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    (x,) = eqn.invars
    dims = eqn.params["dimensions"]
    shape = x.aval.shape
    linear = flat_offset(index, eqn.outvars[0].aval.shape)
    if dims is None:
        return builder.element(x, split_offset(linear, shape))
    permuted = split_offset(linear, tuple(shape[d] for d in dims))
    operand_index = [None] * len(shape)
    for position, d in enumerate(dims):
        operand_index[d] = permuted[position]
    return builder.element(x, operand_index)


def _transpose(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    (x,) = eqn.invars
    operand_index = [None] * x.aval.ndim
    for position, d in enumerate(eqn.params["permutation"]):
        operand_index[d] = index[position]
    return builder.element(x, operand_index)


def _squeeze(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    (x,) = eqn.invars
    squeezed = set(eqn.params["dimensions"])
    rest = iter(index)
    return builder.element(
        x, [_index_const(0) if d in squeezed else next(rest) for d in range(x.aval.ndim)]
    )


def _rev(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    (x,) = eqn.invars
    reversed_dims = set(eqn.params["dimensions"])
    shape = x.aval.shape
    return builder.element(
        x,
        [
            K.binary("sub", _index_const(shape[d] - 1), i) if d in reversed_dims else i
            for d, i in enumerate(index)
        ],
    )


def _slice(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    (x,) = eqn.invars
    starts = eqn.params["start_indices"]
    strides = eqn.params["strides"] or (1,) * len(starts)
    return builder.element(
        x,
        [
            K.binary("add", K.binary("mul", i, _index_const(step)), _index_const(start))
            for i, start, step in zip(index, starts, strides)
        ],
    )


def _iota(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    return K.cast(index[eqn.params["dimension"]], eqn.params["dtype"])


def _in_range(i: Expr, lo: int, hi: int) -> Expr:
    """lo <= i < hi."""
    return K.binary("and", K.binary("ge", i, _index_const(lo)), K.binary("lt", i, _index_const(hi)))


def _pad(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    x, padding_value = eqn.invars
    inside: Expr | None = None
    operand_index = []
    for i, size, (lo, _, interior) in zip(index, x.aval.shape, eqn.params["padding_config"]):
        # Output position i holds operand element (i - lo) / (interior + 1) when that divides.
        shifted = K.binary("sub", i, _index_const(lo))
        step = interior + 1
        source = K.binary("div", shifted, _index_const(step)) if step > 1 else shifted
        ok = _in_range(shifted, 0, (size - 1) * step + 1 if size else 0)
        if step > 1:
            remainder = K.binary("rem", shifted, _index_const(step))
            ok = K.binary("and", ok, K.binary("eq", remainder, _index_const(0)))
        inside = ok if inside is None else K.binary("and", inside, ok)
        # Keep the index in bounds where the element is not read.
        operand_index.append(K.select(ok, source, _index_const(0)))
    fill = builder.element(padding_value, [])
    if inside is None:
        return builder.element(x, operand_index)
    return K.select(inside, builder.element(x, operand_index), fill)


def _concatenate(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    axis = eqn.params["dimension"]
    pieces = []
    start = 0
    for x in eqn.invars:
        size = x.aval.shape[axis]
        if size:
            pieces.append((x, start, size))
        start += size
    if not pieces:  # every operand is empty, and so is the result: no element is computed
        return K.const(0, eqn.outvars[0].aval.dtype)
    # Each piece's index is clamped into its bounds, where it is not taken too: a select
    # computes both sides, and a load before a piece's first element (of a piece read
    # reversed, past its end) can fall outside memory (rfft's last bin read Z[-4]).
    x, start, size = pieces[-1]
    result = builder.element(x, _clamped(index, axis, start, size, last=True))
    for x, start, size in reversed(pieces[:-1]):
        here = K.binary("lt", index[axis], _index_const(start + size))
        piece_index = _clamped(index, axis, start, size, last=False)
        result = K.select(here, builder.element(x, piece_index), result)
    return result


def _clamped(index: list, axis: int, start: int, size: int, last: bool) -> list:
    clamped = _shifted(index, axis, start)
    if start > 0:
        clamped[axis] = K.binary("max", clamped[axis], _index_const(0))
    if not last:
        clamped[axis] = K.binary("min", clamped[axis], _index_const(size - 1))
    return clamped


def _shifted(index: list, axis: int, start: int) -> list:
    shifted = list(index)
    shifted[axis] = K.binary("sub", index[axis], _index_const(start))
    return shifted


def _as_index(i: Expr) -> Expr:
    """An index value as an int64; uint64 values beyond its range saturate (they are past any
    axis's end, where a cast would wrap them to negative ones)."""
    if i.dtype == np.uint64:
        i = K.binary("min", i, K.const(np.iinfo(np.int64).max, np.uint64))
    return K.cast(i, INDEX)


def _scalar_index(builder: KernelBuilder, atom) -> Expr:
    return _as_index(builder.element(atom, []))


def _clamp_index(i: Expr, hi: int) -> Expr:
    return K.binary("min", K.binary("max", i, _index_const(0)), _index_const(max(hi, 0)))


def _dynamic_slice(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    x, *starts = eqn.invars
    sizes = eqn.params["slice_sizes"]
    operand_index = [
        K.binary("add", i, _clamp_index(_scalar_index(builder, s), dim - size))
        for i, s, dim, size in zip(index, starts, x.aval.shape, sizes)
    ]
    return builder.element(x, operand_index)


def _dynamic_update_slice(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    x, update, *starts = eqn.invars
    inside: Expr | None = None
    update_index = []
    for i, s, dim, size in zip(index, starts, x.aval.shape, update.aval.shape):
        start = _clamp_index(_scalar_index(builder, s), dim - size)
        offset = K.binary("sub", i, start)
        ok = _in_range(offset, 0, size)
        inside = ok if inside is None else K.binary("and", inside, ok)
        update_index.append(K.select(ok, offset, _index_const(0)))
    if inside is None:
        return builder.element(update, [])
    return K.select(inside, builder.element(update, update_index), builder.element(x, index))


def _gather(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    from funcgrad.lax.indexing import GatherScatterMode

    operand, indices = eqn.invars
    dn = eqn.params["dimension_numbers"]
    slice_sizes = eqn.params["slice_sizes"]
    rank = operand.aval.ndim
    out_rank = eqn.outvars[0].aval.ndim
    batch_positions = [d for d in range(out_rank) if d not in dn.offset_dims]
    batch_index = [index[d] for d in batch_positions]
    window_dims = [
        d
        for d in range(rank)
        if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims
    ]
    window_index = dict(zip(window_dims, (index[d] for d in dn.offset_dims)))
    starts: list[Expr] = [_index_const(0)] * rank
    for k, d in enumerate(dn.start_index_map):
        starts[d] = _as_index(builder.element(indices, batch_index + [_index_const(k)]))
    for operand_dim, indices_dim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        starts[operand_dim] = batch_index[indices_dim]
    in_bounds: Expr | None = None
    operand_index = []
    for d in range(rank):
        limit = operand.aval.shape[d] - slice_sizes[d]
        if eqn.params["mode"] == GatherScatterMode.FILL_OR_DROP:
            ok = _in_range(starts[d], 0, limit + 1)
            in_bounds = ok if in_bounds is None else K.binary("and", in_bounds, ok)
        start = _clamp_index(starts[d], limit)
        operand_index.append(K.binary("add", start, window_index.get(d, _index_const(0))))
    value = builder.element(operand, operand_index)
    if in_bounds is None:
        return value
    fill = eqn.params["fill_value"]
    return K.select(in_bounds, value, K.const(0 if fill is None else fill, value.dtype))


element_rules[PRIMITIVES["broadcast_in_dim"]] = _broadcast_in_dim
element_rules[PRIMITIVES["reshape"]] = _reshape
element_rules[PRIMITIVES["transpose"]] = _transpose
element_rules[PRIMITIVES["squeeze"]] = _squeeze
element_rules[PRIMITIVES["rev"]] = _rev
element_rules[PRIMITIVES["slice"]] = _slice
element_rules[PRIMITIVES["iota"]] = _iota
element_rules[PRIMITIVES["pad"]] = _pad
element_rules[PRIMITIVES["concatenate"]] = _concatenate
element_rules[PRIMITIVES["dynamic_slice"]] = _dynamic_slice
element_rules[PRIMITIVES["dynamic_update_slice"]] = _dynamic_update_slice

# Whether an update of under 1/WINDOW_FRACTION of its operand is written over the window alone
# (`_update_in_window`, a CPU's choice): as an element rule, each step of a loop writing a
# row of its carry chose between the row and the carry for every element of the carry (a
# scan writing the 1,024 rows of a 1024x1024 carry: 0.24 ms of kernels, 0.03 in windows).
updates_in_windows = Choice("updates_in_windows", False)
WINDOW_FRACTION = 4


def _small_update(eqn: JaxprEqn) -> bool:
    x, update = eqn.invars[:2]
    return updates_in_windows.get() and update.aval.size * WINDOW_FRACTION < x.aval.size


def _update_in_window(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """The operand copied, then the update written over the window at its start (clamped to
    fit): in the operand's own memory (a loop's carry updated in place, `donation`), the copy
    is none, and the step costs the window alone."""
    x, update, *starts = eqn.invars
    (out,) = outputs
    shape, window = x.aval.shape, update.aval.shape
    copy = map_loops(
        shape, lambda index: [K.Store(out, flat_offset(index, shape), builder.element(x, index))]
    )
    origin = [
        _clamp_index(_scalar_index(builder, s), dim - size)
        for s, dim, size in zip(starts, shape, window)
    ]

    def write(index: list) -> list:
        position = [K.binary("add", o, i) for o, i in zip(origin, index)]
        return [K.Store(out, flat_offset(position, shape), builder.element(update, index))]

    return copy + loop_nest(window, write)


element_rule_applies[PRIMITIVES["dynamic_update_slice"]] = lambda eqn: not _small_update(eqn)
root_rules[PRIMITIVES["dynamic_update_slice"]] = _update_in_window
element_rules[PRIMITIVES["gather"]] = _gather

# ---------------------------------------------------------------------------------------------
# Root rules: reductions


# name -> (combining op, initial value of the accumulator for a dtype)
_REDUCTIONS = {
    "reduce_sum": ("add", lambda dtype: 0),
    "reduce_prod": ("mul", lambda dtype: 1),
    "reduce_max": ("max", dtypes.lowest),
    "reduce_min": ("min", dtypes.highest),
    "reduce_and": ("and", lambda dtype: True if dtype == K.BOOL else -1),
    "reduce_or": ("or", lambda dtype: 0),
}


def reduction_fold(eqn: JaxprEqn) -> tuple[str, Expr]:
    """A reduction's combining op and its fold's first value, in the dtype it folds in."""
    combine, initial = _REDUCTIONS[eqn.primitive.name]
    dtype = compute_dtype(eqn.invars[0].aval.dtype)
    return combine, K.const(initial(dtype), dtype)


# Whether a reduction keeping its operand's innermost axis, whose operand is read in order
# along a reduced axis instead (through a transpose), folds each output element in an
# accumulator (`_reduce`): a CPU's choice. A GPU keeps the running values in the output and
# takes their columns over its grid, which splits each column's fold into parts
# (`parallel.columns_outer`).
folds_along_memory = Choice("folds_along_memory", True)


def _reduce(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """out[kept] = combine over the reduced axes of x[kept, reduced]. When the innermost axis is
    kept, the running values live in the output (so the inner loop walks memory in order);
    otherwise in one accumulator per output element. So too, with `folds_along_memory`, where
    x's innermost axis is kept but what it is read from runs in order along a reduced axis
    instead (a transpose's): a fold along memory, which the renderer splits into several
    running sums, rounds nearly as NumPy's pairwise sums do, where one running value per
    output element folded down a column of 10^5 float32 terms gathers their rounding errors,
    thousands of times more."""
    (x,) = eqn.invars
    (out,) = outputs
    combine, initial = _REDUCTIONS[eqn.primitive.name]
    axes = eqn.params["axes"]
    shape = x.aval.shape
    acc_dtype = compute_dtype(x.aval.dtype)
    out_dtype = eqn.outvars[0].aval.dtype
    out_shape = eqn.outvars[0].aval.shape
    init = K.const(initial(acc_dtype), acc_dtype)

    def kept(index: list) -> list:
        return [i for d, i in enumerate(index) if d not in axes]

    def operand(index: list) -> Expr:
        return K.cast(builder.element(x, index), acc_dtype)

    if shape and (shape[-1] > 1 and (len(shape) - 1) not in axes) and acc_dtype == out_dtype:
        index = [K.fresh_index() for _ in shape]
        term = operand(index)
        along_memory = _in_order_along(term, [index[d] for d in axes], index[-1])
        if not (along_memory and folds_along_memory.get()):
            initialize = loop_nest(
                out_shape, lambda index: [K.Store(out, flat_offset(index, out_shape), init)]
            )
            offset = flat_offset(kept(index), out_shape)
            running = K.Load(out, offset)
            nest = [K.Store(out, offset, K.binary(combine, running, term))]
            for i, size in reversed(list(zip(index, shape))):
                nest = [K.Loop(i, 0, size, nest)]
            return initialize + nest

    return loop_nest(
        out_shape,
        lambda index: reduce_one(
            builder, eqn, index, lambda value: K.Store(out, flat_offset(index, out_shape), value)
        ),
    )


def _in_order_along(value: Expr, reduced: list, innermost: K.Index) -> bool:
    """Whether the loads of `value` step by one element along some reduced index and along
    the innermost index in none."""

    def strides(index: K.Index) -> set:
        found = set()
        for load in K.nodes(value):
            if isinstance(load, K.Load):
                terms, _ = K.linear_terms(load.offset)
                found.add(abs(terms.get(id(index), (index, 0))[1]))
        return found

    return 1 not in strides(innermost) and any(1 in strides(i) for i in reduced)


class Accumulation:
    """One output position of a reduction, in three parts, so that its loop can be shared with
    another kernel's: `start` statements, `add(reduced_index)` statements per reduced element,
    and `finish(store)` statements."""

    def __init__(self, builder: KernelBuilder, eqn: JaxprEqn, out_index: list):
        (self.x,) = eqn.invars
        self.builder, self.eqn, self.out_index = builder, eqn, out_index
        self.combine, initial = _REDUCTIONS[eqn.primitive.name]
        self.axes = eqn.params["axes"]
        self.dtype = compute_dtype(self.x.aval.dtype)
        self.acc = K.fresh_acc(self.dtype)
        self.start = [K.SetAcc(self.acc, K.const(initial(self.dtype), self.dtype))]
        self.reduced_shape = tuple(self.x.aval.shape[d] for d in self.axes)

    def add(self, reduced_index: list) -> list:
        full, kept, reduced = [], iter(self.out_index), iter(reduced_index)
        for d in range(self.x.aval.ndim):
            full.append(next(reduced) if d in self.axes else next(kept))
        value = K.cast(self.builder.element(self.x, full), self.dtype)
        return [K.SetAcc(self.acc, K.binary(self.combine, self.acc.read(), value))]

    def finish(self, store) -> list:
        return [store(K.cast(self.acc.read(), self.eqn.outvars[0].aval.dtype))]


def reduce_one(builder: KernelBuilder, eqn: JaxprEqn, out_index: list, store) -> list:
    """Statements reducing the elements of one output position of a reduction into an
    accumulator, then `store(result)`."""
    accumulation = Accumulation(builder, eqn, out_index)
    return (
        accumulation.start
        + loop_nest(accumulation.reduced_shape, accumulation.add)
        + accumulation.finish(store)
    )


REDUCTIONS = frozenset(PRIMITIVES[name] for name in _REDUCTIONS)

for _name in _REDUCTIONS:
    root_rules[PRIMITIVES[_name]] = _reduce


def _argreduce(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """The first index of the extreme value; a NaN counts as the extreme (the first NaN)."""
    (x,) = eqn.invars
    (out,) = outputs
    (axis,) = eqn.params["axes"]
    shape = x.aval.shape
    value_dtype = compute_dtype(x.aval.dtype)
    out_shape = eqn.outvars[0].aval.shape
    better = "gt" if eqn.primitive.name == "argmax" else "lt"
    if folds_along_memory.get() and value_dtype != K.BOOL:
        return loop_nest(
            out_shape, lambda out_index: _extreme_then_first(builder, eqn, out_index, out)
        )

    def per_output(out_index: list) -> list:
        best = K.fresh_acc(value_dtype, "best")
        best_at = K.fresh_acc(INDEX, "best_at")
        i = K.fresh_index()
        full = list(out_index)
        full.insert(axis, i)
        value = K.cast(builder.element(x, full), value_dtype)
        wins = K.binary(better, value, best.read())
        if value_dtype.kind == "f":
            value_nan = K.binary("ne", value, value)
            best_nan = K.binary("ne", best.read(), best.read())
            wins = K.binary("and", K.unary("not", best_nan), K.binary("or", wins, value_nan))
        first = K.binary("eq", i, _index_const(0))
        take = K.binary("or", first, wins)
        return [
            K.SetAcc(best, K.const(0, value_dtype)),
            K.SetAcc(best_at, _index_const(0)),
            K.Loop(
                i,
                0,
                shape[axis],
                [
                    K.SetAcc(best_at, K.select(take, i, best_at.read())),
                    K.SetAcc(best, K.select(take, value, best.read())),
                ],
            ),
            K.Store(
                out,
                flat_offset(out_index, out_shape),
                K.cast(best_at.read(), eqn.params["index_dtype"]),
            ),
        ]

    return loop_nest(out_shape, per_output)


def _extreme_then_first(builder: KernelBuilder, eqn: JaxprEqn, out_index: list, out) -> list:
    """A CPU's argmax or argmin of one output position as two folds that vectorize: the
    extreme (NaN if any element is NaN), then the least index holding it. The one fold of
    `_argreduce`, an index carried beside the running value, runs an element at a time
    (argmax down rows of 10,000 float32, 4.4 ns an element)."""
    (x,) = eqn.invars
    (axis,) = eqn.params["axes"]
    length = x.aval.shape[axis]
    value_dtype = compute_dtype(x.aval.dtype)
    largest = eqn.primitive.name == "argmax"

    def value_at(i: Expr) -> Expr:
        full = list(out_index)
        full.insert(axis, i)
        return K.cast(builder.element(x, full), value_dtype)

    extreme, first = K.fresh_acc(value_dtype, "extreme"), K.fresh_acc(INDEX, "first")
    start = dtypes.lowest(value_dtype) if largest else dtypes.highest(value_dtype)
    i, j = K.fresh_index(), K.fresh_index()
    folded = K.binary("max" if largest else "min", extreme.read(), value_at(i))
    candidate = value_at(j)
    match = K.binary("eq", candidate, extreme.read())
    if value_dtype.kind == "f":
        nan = K.binary("and", _is_nan(extreme.read()), _is_nan(candidate))
        match = K.binary("or", match, nan)
    nearer = K.binary("min", first.read(), K.select(match, j, _index_const(length)))
    return [
        K.SetAcc(extreme, K.const(start, value_dtype)),
        K.Loop(i, 0, length, [K.SetAcc(extreme, folded)]),
        K.SetAcc(first, _index_const(length)),
        K.Loop(j, 0, length, [K.SetAcc(first, nearer)]),
        K.Store(
            out,
            flat_offset(out_index, eqn.outvars[0].aval.shape),
            K.cast(first.read(), eqn.params["index_dtype"]),
        ),
    ]


root_rules[PRIMITIVES["argmax"]] = _argreduce
root_rules[PRIMITIVES["argmin"]] = _argreduce

_CUMULATIVE = {"cumsum": "add", "cumprod": "mul", "cummax": "max", "cummin": "min"}


def _cumulative(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Each line along the axis folded in order, its running value in an accumulator; or, on
    a CPU (`folds_along_memory`), along an axis with many elements after it, the running
    values in the output itself, a whole slice after the one before it (`_slice_by_slice`)."""
    (x,) = eqn.invars
    (out,) = outputs
    axis, reverse = eqn.params["axis"], eqn.params["reverse"]
    shape = x.aval.shape
    dtype = x.aval.dtype
    acc_dtype = compute_dtype(dtype)
    outer_shape = tuple(s for d, s in enumerate(shape) if d != axis)
    across = math.prod(shape[axis + 1 :])
    if folds_along_memory.get() and acc_dtype == dtype and across >= _RUNNING_SUMS_FROM:
        return _slice_by_slice(builder, eqn, out)

    def per_line(outer_index: list) -> list:
        acc = K.fresh_acc(acc_dtype)
        i = K.fresh_index()
        position = K.binary("sub", _index_const(shape[axis] - 1), i) if reverse else i
        full = list(outer_index)
        full.insert(axis, position)
        value = K.cast(builder.element(x, full), acc_dtype)
        # Like the reference, half precision accumulates in float32, rounded only when stored
        # (a float16 running sum would stall at 2048).
        updated = _cumulative_step(eqn, acc.read(), value)
        first = K.binary("eq", i, _index_const(0))
        return [
            K.SetAcc(acc, K.const(0, acc_dtype)),
            K.Loop(
                i,
                0,
                shape[axis],
                [
                    K.SetAcc(acc, K.select(first, value, updated)),
                    K.Store(out, flat_offset(full, shape), K.cast(acc.read(), dtype)),
                ],
            ),
        ]

    return loop_nest(outer_shape, per_line)


def _slice_by_slice(builder: KernelBuilder, eqn: JaxprEqn, out: K.Buffer) -> list:
    """A cumulative op along an axis with many elements after it: its first slice copied, then
    each slice combined elementwise with the output's slice before it. Each line still folds
    in order (the same results), while the loops walk memory in order and the innermost
    vectorizes, where a loop down each line strides across memory (1024x1024 float32 summed
    down its columns: 11.5 ms by lines, 1 ms so)."""
    (x,) = eqn.invars
    axis, reverse = eqn.params["axis"], eqn.params["reverse"]
    shape = x.aval.shape
    length = shape[axis]
    step = -1 if reverse else 1

    def at(position: Expr, before: list, after: list) -> list:
        return [*before, position, *after]

    def slices(before: list) -> list:
        first = _index_const(length - 1 if reverse else 0)

        def copy(after: list) -> list:
            index = at(first, before, after)
            return [K.Store(out, flat_offset(index, shape), builder.element(x, index))]

        i = K.fresh_index()
        position = _index_const(length - 1) - i if reverse else i

        def combine(after: list) -> list:
            index = at(position, before, after)
            previous = at(position - _index_const(step), before, after)
            running = K.Load(out, flat_offset(previous, shape))
            updated = _cumulative_step(eqn, running, builder.element(x, index))
            return [K.Store(out, flat_offset(index, shape), updated)]

        after_shape = shape[axis + 1 :]
        rest = [K.Loop(i, 1, length, loop_nest(after_shape, combine))] if length > 1 else []
        return loop_nest(after_shape, copy) + rest

    return loop_nest(shape[:axis], slices)


def _cumulative_step(eqn: JaxprEqn, running: Expr, value: Expr) -> Expr:
    """The running value of a cumulative op combined with the next element."""
    if eqn.primitive.name == "cumlogsumexp":
        return _logaddexp(running, value)
    return K.binary(_CUMULATIVE[eqn.primitive.name], running, value)


def _logaddexp(a: Expr, b: Expr) -> Expr:
    """log(exp(a) + exp(b)) without overflow; where both are equal (infinities included) it is
    a + log(2)."""
    hi = K.binary("max", a, b)
    lo = K.binary("min", a, b)
    summed = hi + K.unary("log1p", K.unary("exp", lo - hi))
    return K.select(K.binary("eq", lo, hi), hi + K.const(np.log(2), hi.dtype), summed)


for _name in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
    root_rules[PRIMITIVES[_name]] = _cumulative


def _dot_product(builder: KernelBuilder, eqn: JaxprEqn, out_index: list, contract_index: list):
    """lhs * rhs (in the accumulation dtype) at one output position and one position of the
    contracting dimensions."""
    lhs, rhs = eqn.invars
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    acc_dtype = compute_dtype(eqn.outvars[0].aval.dtype)
    batch_index = out_index[: len(lhs_batch)]
    free_index = iter(out_index[len(lhs_batch) :])
    factors = []
    for operand, contract, batch in (
        (lhs, lhs_contract, lhs_batch),
        (rhs, rhs_contract, rhs_batch),
    ):
        index = [None] * operand.aval.ndim
        for d, i in zip(batch, batch_index):
            index[d] = i
        for d, i in zip(contract, contract_index):
            index[d] = i
        for d in range(operand.aval.ndim):  # free dimensions, lhs's then rhs's, in order
            if index[d] is None:
                index[d] = next(free_index)
        factors.append(K.cast(builder.element(operand, index), acc_dtype))
    return K.binary("mul", *factors)


def _contract_shape(eqn: JaxprEqn) -> tuple[int, ...]:
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    return tuple(eqn.invars[0].aval.shape[d] for d in lhs_contract)


# Outputs whose last dimension is narrower than this keep one accumulator per element: the
# running sums of the i-k-j order would each be loaded and stored at every term (a batch of
# 256x256 matrices times vectors took 7 ms so, against 0.3 ms).
_RUNNING_SUMS_FROM = 8


def _dot_general(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """out[batch, lhs_free, rhs_free] = sum over the contracting dims of lhs * rhs, as loops
    (library GEMMs take the float cases that are large enough). When the output's last
    dimension is the rhs's contiguous one, the running sums live in the output and the
    innermost loop walks that dimension (the i-k-j order), so it vectorizes; otherwise one
    accumulator per output element."""
    (out,) = outputs
    out_aval = eqn.outvars[0].aval
    acc_dtype = compute_dtype(out_aval.dtype)
    rhs = eqn.invars[1]
    (_, rhs_contract), (_, rhs_batch) = eqn.params["dimension_numbers"]
    last = rhs.aval.ndim - 1
    width = out_aval.shape[-1] if out_aval.ndim else 0
    free_last = last not in (*rhs_contract, *rhs_batch)
    if acc_dtype == out_aval.dtype and width >= _RUNNING_SUMS_FROM and free_last:

        def per_row(prefix: list) -> list:
            start = K.fresh_index()
            first = flat_offset([*prefix, start], out_aval.shape)
            zero = K.Store(out, first, K.const(0, acc_dtype))

            def inner(contract_index: list) -> list:
                j = K.fresh_index()
                offset = flat_offset([*prefix, j], out_aval.shape)
                product = _dot_product(builder, eqn, [*prefix, j], contract_index)
                running = K.binary("add", K.Load(out, offset), product)
                return [K.Loop(j, 0, width, [K.Store(out, offset, running)])]

            return [K.Loop(start, 0, width, [zero])] + loop_nest(_contract_shape(eqn), inner)

        return loop_nest(out_aval.shape[:-1], per_row)

    def per_output(out_index: list) -> list:
        acc = K.fresh_acc(acc_dtype)

        def inner(contract_index: list) -> list:
            product = _dot_product(builder, eqn, out_index, contract_index)
            return [K.SetAcc(acc, K.binary("add", acc.read(), product))]

        result = K.cast(acc.read(), out_aval.dtype)
        return (
            [K.SetAcc(acc, K.const(0, acc_dtype))]
            + loop_nest(_contract_shape(eqn), inner)
            + [K.Store(out, flat_offset(out_index, out_aval.shape), result)]
        )

    return loop_nest(out_aval.shape, per_output)


root_rules[PRIMITIVES["dot_general"]] = _dot_general

# Contractions this short (outer products, per-example products) are a few multiply-adds per
# output element: they fuse into their readers like elementwise ops. Longer ones are GEMMs: on
# a CPU a 10-term product fused into its reader ran 5-10% slower than its GEMM
# (benchmarks/compiler.py, the conv and per-example cases), and on an H200 the MLP step with
# its 10-term backward product fused ran 2.2-2.8 µs slower a call than with it a GEMM.
SHORT_CONTRACTION = 8


def _short_dot_general(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    out_dtype = eqn.outvars[0].aval.dtype
    total: Expr = K.const(0, compute_dtype(out_dtype))
    shape = _contract_shape(eqn)
    for flat in range(math.prod(shape)):
        contract_index = [_index_const(int(i)) for i in np.unravel_index(flat, shape)]
        total = K.binary("add", total, _dot_product(builder, eqn, index, contract_index))
    return K.cast(total, out_dtype)


element_rules[PRIMITIVES["dot_general"]] = _short_dot_general
element_rule_applies[PRIMITIVES["dot_general"]] = lambda eqn: (
    math.prod(_contract_shape(eqn)) <= SHORT_CONTRACTION
)


def size_of(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


_SCATTER_COMBINE = {
    "scatter": None,
    "scatter_add": "add",
    "scatter_mul": "mul",
    "scatter_min": "min",
    "scatter_max": "max",
}


def _scatter(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Copy the operand, then combine each update into its place, in order (the last of
    several writes to one place wins, as in the reference). Windows that reach outside the
    operand are clamped (CLIP) or dropped (the other modes). `scatter_mul_pairs` (a complex
    scatter_mul, its operand and updates as parts on a last axis of 2) multiplies each
    element by its updates as complex numbers, both parts from the same old ones;
    `scatter_min_pairs` and `scatter_max_pairs` keep the smaller or larger in NumPy's order."""
    from funcgrad.lax.indexing import GatherScatterMode

    operand, indices, updates = eqn.invars
    (out,) = outputs
    dn = eqn.params["dimension_numbers"]
    stored_shape = operand.aval.shape
    pairs = eqn.primitive.name in _COMPLEX_SCATTER_STORES
    shape = stored_shape[:-1] if pairs else stored_shape
    updates_shape = updates.aval.shape[:-1] if pairs else updates.aval.shape
    rank = len(shape)
    combine = _SCATTER_COMBINE.get(eqn.primitive.name)
    dtype = operand.aval.dtype
    window_dims = [
        d
        for d in range(rank)
        if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims
    ]
    window_size = {d: updates_shape[u] for d, u in zip(window_dims, dn.update_window_dims)}
    copy = loop_nest(
        stored_shape,
        lambda index: [
            K.Store(out, flat_offset(index, stored_shape), builder.element(operand, index))
        ],
    )

    def update(u_index: list) -> list:
        batch_index = [i for d, i in enumerate(u_index) if d not in dn.update_window_dims]
        window_index = {d: u_index[u] for d, u in zip(window_dims, dn.update_window_dims)}
        starts: list[Expr] = [_index_const(0)] * rank
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            starts[d] = _as_index(builder.element(indices, batch_index + [_index_const(k)]))
        for operand_dim, indices_dim in zip(
            dn.operand_batching_dims, dn.scatter_indices_batching_dims
        ):
            starts[operand_dim] = batch_index[indices_dim]
        in_bounds: Expr | None = None
        position = []
        for d in range(rank):
            limit = shape[d] - window_size.get(d, 1)
            if eqn.params["mode"] == GatherScatterMode.CLIP:
                start = _clamp_index(starts[d], limit)
            else:
                start = starts[d]
                ok = _in_range(start, 0, limit + 1)
                in_bounds = ok if in_bounds is None else K.binary("and", in_bounds, ok)
            position.append(K.binary("add", start, window_index.get(d, _index_const(0))))
        # A dropped window rewrites the element at its own position from the origin of its
        # batch's slice (in range): only this window position of this batch element ever
        # writes there, which lets a GPU give each a thread (`parallel._scatter_split`).
        own = [window_index.get(d, _index_const(0)) for d in range(rank)]
        for d in dn.operand_batching_dims:
            own[d] = starts[d]

        def offset_of(part: list) -> Expr:
            offset = flat_offset(position + part, stored_shape)
            if in_bounds is None:
                return offset
            return K.select(in_bounds, offset, flat_offset(own + part, stored_shape))

        if pairs:
            stores = _COMPLEX_SCATTER_STORES[eqn.primitive.name]
            return stores(builder, out, offset_of, updates, u_index, in_bounds)
        offset = offset_of([])
        old = K.Load(out, offset)
        value = builder.element(updates, u_index)
        if combine is not None:
            computed = K.binary(
                combine, K.cast(old, compute_dtype(dtype)), K.cast(value, compute_dtype(dtype))
            )
            value = K.cast(computed, dtype)
        if in_bounds is not None:
            value = K.select(in_bounds, value, old)  # a dropped window rewrites what is there
        return [K.Store(out, offset, value)]

    return copy + loop_nest(updates_shape, update)


def _complex_scatter_stores(combine: Callable) -> Callable:
    """The stores of one complex update: `combine(a, b, c, d)` gives the new parts from the
    old ones a, b (at `offset_of([0])` and `offset_of([1])`) and the update's c, d; both are
    taken before either is stored."""

    def stores(builder, out, offset_of, updates, u_index, in_bounds) -> list:
        offsets = [offset_of([_index_const(k)]) for k in (0, 1)]
        a, b = (K.Load(out, offset) for offset in offsets)
        c, d = (builder.element(updates, u_index + [_index_const(k)]) for k in (0, 1))
        parts = combine(a, b, c, d)
        if in_bounds is not None:
            parts = [K.select(in_bounds, new, old) for new, old in zip(parts, (a, b))]
        accs = [K.fresh_acc(out.dtype) for _ in parts]
        return [K.SetAcc(acc, part) for acc, part in zip(accs, parts)] + [
            K.Store(out, offset, acc.read()) for acc, offset in zip(accs, offsets)
        ]

    return stores


def _complex_product(a, b, c, d) -> list:
    """(a + bi)(c + di)."""
    return [
        K.binary("sub", K.binary("mul", a, c), K.binary("mul", b, d)),
        K.binary("add", K.binary("mul", a, d), K.binary("mul", b, c)),
    ]


def _complex_extremum(keeps: str) -> Callable:
    """NumPy's maximum (`keeps` "gt") or minimum ("lt") of complex numbers: the old value a + bi
    stays where it has a NaN part or comes first in the order by real part, then imaginary
    part (where the parts compare without NaNs); else the update c + di replaces it, so a
    NaN propagates."""
    ties = {"gt": "ge", "lt": "le"}[keeps]

    def combine(a, b, c, d) -> list:
        def is_nan(x):
            return K.binary("ne", x, x)

        no_nan_part = K.unary("not", K.binary("or", is_nan(b), is_nan(d)))
        first = K.binary(
            "or",
            K.binary("and", K.binary(keeps, a, c), no_nan_part),
            K.binary("and", K.binary("eq", a, c), K.binary(ties, b, d)),
        )
        keep = K.binary("or", K.binary("or", is_nan(a), is_nan(b)), first)
        return [K.select(keep, a, c), K.select(keep, b, d)]

    return combine


_COMPLEX_SCATTER_STORES = {
    "scatter_mul_pairs": _complex_scatter_stores(_complex_product),
    "scatter_min_pairs": _complex_scatter_stores(_complex_extremum("lt")),
    "scatter_max_pairs": _complex_scatter_stores(_complex_extremum("gt")),
}


# The scatters, whose kernels copy their operand, then write the updates (`_scatter`).
SCATTERS = frozenset(PRIMITIVES[name] for name in [*_SCATTER_COMBINE, *_COMPLEX_SCATTER_STORES])
for _primitive in SCATTERS:
    root_rules[_primitive] = _scatter


def writes_over_its_operand(eqn: JaxprEqn) -> bool:
    """Whether the equation's kernel copies its operand, then writes over the copy (a scatter;
    a small dynamic update, in its window)."""
    return eqn.primitive in SCATTERS or (
        eqn.primitive is PRIMITIVES["dynamic_update_slice"] and _small_update(eqn)
    )


def _threefry2x32(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> list[Expr]:
    """Both output words of the Threefry-2x32 block cipher (20 rounds), as in the reference."""
    from funcgrad.lax import random_bits

    key1, key2, x1, x2 = (builder.element(v, index if v.aval.ndim else []) for v in eqn.invars)
    u32 = key1.dtype

    def word(value: int) -> Expr:
        return K.const(value, u32)

    def rotate_left(v: Expr, distance: int) -> Expr:
        high = K.binary("shl", v, word(distance))
        return K.binary("or", high, K.binary("shr_logical", v, word(32 - distance)))

    schedule = (
        key1,
        key2,
        K.binary("xor", K.binary("xor", key1, key2), word(random_bits._KEY_PARITY)),
    )
    x1, x2 = x1 + schedule[0], x2 + schedule[1]
    for i in range(random_bits._ROUNDS):
        x1 = x1 + x2
        x2 = K.binary("xor", rotate_left(x2, random_bits._ROTATIONS[i % 8]), x1)
        if i % 4 == 3:
            s = i // 4 + 1
            x1 = x1 + schedule[s % 3]
            x2 = x2 + schedule[(s + 1) % 3] + word(s)
    return [x1, x2]


def _reduce_precision(builder: KernelBuilder, eqn: JaxprEqn, index: list) -> Expr:
    """Round the mantissa to nearest even, then flush exponents outside the narrower range
    (to infinity above, to signed zero below), on the bits; NaN stays NaN. The value's own
    format leaves it unchanged, but rounded where it is made (`K.rounded`)."""
    (x,) = eqn.invars
    value = builder.element(x, index)
    info = dtypes.finfo(x.aval.dtype)
    exponent_bits, mantissa_bits = eqn.params["exponent_bits"], eqn.params["mantissa_bits"]
    if exponent_bits >= info.nexp and mantissa_bits >= info.nmant:
        return K.rounded(value)
    if dtypes.is_narrow(x.aval.dtype):  # rounded in float32, as the reference does
        wide = K.cast(value, compute_dtype(x.aval.dtype))
        return K.cast(_reduce_bits(wide, exponent_bits, mantissa_bits), x.aval.dtype)
    return _reduce_bits(value, exponent_bits, mantissa_bits)


def _reduce_bits(value: Expr, exponent_bits: int, mantissa_bits: int) -> Expr:
    info = dtypes.finfo(value.dtype)
    unsigned = np.dtype(f"uint{info.bits}")

    def u(v: int) -> Expr:
        return K.const(v, unsigned)

    bits = K.Bitcast(value, unsigned)
    if mantissa_bits < info.nmant:
        dropped = info.nmant - mantissa_bits
        last_kept = K.binary("and", K.binary("shr_logical", bits, u(dropped)), u(1))
        rounded = bits + u((1 << (dropped - 1)) - 1) + last_kept
        bits = K.binary("and", rounded, u(~((1 << dropped) - 1) & ((1 << info.bits) - 1)))
    if exponent_bits < info.nexp:
        source_bias = (1 << (info.nexp - 1)) - 1
        target_bias = (1 << (exponent_bits - 1)) - 1
        exponent = K.binary(
            "and", K.binary("shr_logical", bits, u(info.nmant)), u((1 << info.nexp) - 1)
        )
        sign = K.binary("and", bits, u(1 << (info.bits - 1)))
        infinity = K.binary("or", sign, u(((1 << info.nexp) - 1) << info.nmant))
        bits = K.select(K.binary("gt", exponent, u(source_bias + target_bias)), infinity, bits)
        bits = K.select(K.binary("le", exponent, u(source_bias - target_bias)), sign, bits)
    is_nan = (
        K.binary("ne", value, value)
        if value.dtype != dtypes.bfloat16
        else K.binary("ne", K.cast(value, np.float32), K.cast(value, np.float32))
    )
    return K.select(is_nan, value, K.Bitcast(bits, value.dtype))


element_rules[PRIMITIVES["threefry2x32"]] = _threefry2x32
element_rules[PRIMITIVES["reduce_precision"]] = _reduce_precision


def window_position(
    o: Expr,
    k: Expr,
    stride: int,
    dilation: int,
    low: int,
    base: int,
    size: int,
    extent: tuple[int, int] | None = None,
):
    """Where window element `k` of output `o` falls in an operand of `size` elements spread
    `base` apart and padded by `low`: (operand index, whether an element is there). Given
    `extent`, the counts of outputs and window elements, a window that never leaves the
    operand (unpadded, `VALID`) has an element everywhere: None says so."""
    p = K.binary(
        "sub",
        K.binary("add", o * _index_const(stride), k * _index_const(dilation)),
        _index_const(low),
    )
    if extent is not None and base == 1 and low <= 0:
        places, window = extent
        if (places - 1) * stride + (window - 1) * dilation - low < size:
            return p, None
    ok = _in_range(p, 0, (size - 1) * base + 1 if size else 0)
    if base > 1:
        ok = K.binary(
            "and", ok, K.binary("eq", K.binary("rem", p, _index_const(base)), _index_const(0))
        )
        p = K.binary("div", p, _index_const(base))
    return K.select(ok, p, _index_const(0)), ok


def _all(conditions: list) -> Expr | None:
    """All the conditions that are not None (None where none is)."""
    result = None
    for c in conditions:
        if c is None:
            continue
        result = c if result is None else K.binary("and", result, c)
    return result


_WINDOW_REDUCTIONS = {
    "reduce_window_sum": ("add", lambda dtype: 0),
    "reduce_window_max": ("max", dtypes.lowest),
    "reduce_window_min": ("min", dtypes.highest),
}


def _reduce_window(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    (x,) = eqn.invars
    (out,) = outputs
    p = eqn.params
    combine, identity = _WINDOW_REDUCTIONS[eqn.primitive.name]
    dtype = x.aval.dtype
    acc_dtype = compute_dtype(dtype)
    out_shape = eqn.outvars[0].aval.shape

    def per_output(o_index: list) -> list:
        acc = K.fresh_acc(acc_dtype)

        def inner(k_index: list) -> list:
            positions, inside = [], []
            for d, (o, k) in enumerate(zip(o_index, k_index)):
                position, ok = window_position(
                    o,
                    k,
                    p["window_strides"][d],
                    p["window_dilation"][d],
                    p["padding"][d][0],
                    p["base_dilation"][d],
                    x.aval.shape[d],
                    (out_shape[d], p["window_dimensions"][d]),
                )
                positions.append(position)
                inside.append(ok)
            value = K.cast(builder.element(x, positions), acc_dtype)
            ok = _all(inside)
            if ok is not None:
                value = K.select(ok, value, K.const(identity(acc_dtype), acc_dtype))
            return [K.SetAcc(acc, K.binary(combine, acc.read(), value))]

        return (
            [K.SetAcc(acc, K.const(identity(acc_dtype), acc_dtype))]
            + loop_nest(tuple(p["window_dimensions"]), inner)
            + [K.Store(out, flat_offset(o_index, out_shape), K.cast(acc.read(), dtype))]
        )

    return loop_nest(out_shape, per_output)


for _name in _WINDOW_REDUCTIONS:
    root_rules[PRIMITIVES[_name]] = _reduce_window


def _select_and_scatter_add(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Each window's source value is added where the window selects (the first element that
    `select_prim` keeps against every later one; padding is never selected)."""
    source, operand = eqn.invars
    (out,) = outputs
    p = eqn.params
    shape = operand.aval.shape
    dtype = source.aval.dtype
    keep = "ge" if p["select_prim"].name == "ge" else "le"
    value_dtype = compute_dtype(operand.aval.dtype)
    zero = loop_nest(
        shape, lambda index: [K.Store(out, flat_offset(index, shape), K.const(0, dtype))]
    )

    def per_window(o_index: list) -> list:
        best = K.fresh_acc(value_dtype, "best")
        best_at = K.fresh_acc(INDEX, "best_at")

        def inner(k_index: list) -> list:
            positions, inside = [], []
            for d, (o, k) in enumerate(zip(o_index, k_index)):
                position, ok = window_position(
                    o, k, p["window_strides"][d], 1, p["padding"][d][0], 1, shape[d]
                )
                positions.append(position)
                inside.append(ok)
            value = K.cast(builder.element(operand, positions), value_dtype)
            none_yet = K.binary("lt", best_at.read(), _index_const(0))
            kept = K.binary(keep, best.read(), value)
            move = K.binary("or", none_yet, K.unary("not", kept))
            ok = _all(inside)
            if ok is not None:
                move = K.binary("and", ok, move)
            offset = flat_offset(positions, shape)
            # The decision is held in an accumulator: the updates below change what it reads.
            moves = K.fresh_acc(K.BOOL, "move")
            return [
                K.SetAcc(moves, move),
                K.SetAcc(best, K.select(moves.read(), value, best.read())),
                K.SetAcc(best_at, K.select(moves.read(), offset, best_at.read())),
            ]

        found = K.binary("ge", best_at.read(), _index_const(0))
        at = K.select(found, best_at.read(), _index_const(0))
        old = K.Load(out, at)
        added = K.cast(
            K.binary(
                "add",
                K.cast(old, compute_dtype(dtype)),
                K.cast(builder.element(source, o_index), compute_dtype(dtype)),
            ),
            dtype,
        )
        return (
            [K.SetAcc(best, K.const(0, value_dtype)), K.SetAcc(best_at, _index_const(-1))]
            + loop_nest(tuple(p["window_dimensions"]), inner)
            + [K.Store(out, at, K.select(found, added, old))]
        )

    return zero + loop_nest(source.aval.shape, per_window)


root_rules[PRIMITIVES["select_and_scatter_add"]] = _select_and_scatter_add


def _conv_general_dilated(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """A direct convolution (cross-correlation, as the reference): every output element sums
    its window of input features times kernel weights."""
    lhs, rhs = eqn.invars
    (out,) = outputs
    p = eqn.params
    lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
    out_aval = eqn.outvars[0].aval
    acc_dtype = compute_dtype(out_aval.dtype)
    batch = lhs.aval.shape[lhs_spec[0]]
    out_features = rhs.aval.shape[rhs_spec[0]]
    in_features = rhs.aval.shape[rhs_spec[1]]
    feature_groups, batch_groups = p["feature_group_count"], p["batch_group_count"]
    kernel_spatial = tuple(rhs.aval.shape[d] for d in rhs_spec[2:])
    spatial = len(kernel_spatial)

    def per_output(out_index: list) -> list:
        roles = [out_index[d] for d in out_spec]  # batch, feature, spatial...
        n, o, positions = roles[0], roles[1], roles[2:]
        acc = K.fresh_acc(acc_dtype)
        if feature_groups > 1:
            group = K.binary("div", o, _index_const(out_features // feature_groups))
            channel_base = group * _index_const(in_features)
            batch_index = n
        elif batch_groups > 1:
            group = K.binary("div", o, _index_const(out_features // batch_groups))
            channel_base = _index_const(0)
            batch_index = K.binary("add", group * _index_const(batch // batch_groups), n)
        else:
            channel_base, batch_index = _index_const(0), n

        def inner(index: list) -> list:
            c, k_index = index[0], index[1:]
            lhs_index = [None] * lhs.aval.ndim
            rhs_index = [None] * rhs.aval.ndim
            lhs_index[lhs_spec[0]] = batch_index
            lhs_index[lhs_spec[1]] = K.binary("add", channel_base, c)
            rhs_index[rhs_spec[0]] = o
            rhs_index[rhs_spec[1]] = c
            inside = []
            for d in range(spatial):
                position, ok = window_position(
                    positions[d],
                    k_index[d],
                    p["window_strides"][d],
                    p["rhs_dilation"][d],
                    p["padding"][d][0],
                    p["lhs_dilation"][d],
                    lhs.aval.shape[lhs_spec[2 + d]],
                )
                lhs_index[lhs_spec[2 + d]] = position
                rhs_index[rhs_spec[2 + d]] = k_index[d]
                inside.append(ok)
            product = K.binary(
                "mul",
                K.cast(builder.element(lhs, lhs_index), acc_dtype),
                K.cast(builder.element(rhs, rhs_index), acc_dtype),
            )
            ok = _all(inside)
            if ok is not None:
                product = K.select(ok, product, K.const(0, acc_dtype))
            return [K.SetAcc(acc, K.binary("add", acc.read(), product))]

        return (
            [K.SetAcc(acc, K.const(0, acc_dtype))]
            + loop_nest((in_features, *kernel_spatial), inner)
            + [
                K.Store(
                    out, flat_offset(out_index, out_aval.shape), K.cast(acc.read(), out_aval.dtype)
                )
            ]
        )

    return loop_nest(out_aval.shape, per_output)


root_rules[PRIMITIVES["conv_general_dilated"]] = _conv_general_dilated


# ---------------------------------------------------------------------------------------------
# Sorting: a bottom-up merge sort of index permutations, one line at a time (a CPU's long lines:
# `radix_sort`)


def _merge_sort(builder: KernelBuilder, lines: int, n: int, before) -> tuple[list, K.Buffer]:
    """Statements leaving, for each of `lines` lines of `n` elements, the stable order of the
    positions 0..n-1 under `before(line, p, q)` ("position p goes before position q"), and the
    buffer holding it (row-major: line, rank). Each pass merges runs of width w into runs of
    2w; positions past a line's end write to a spare last slot."""
    size = lines * n + 1
    source, target = builder.scratch_buffer(INDEX, size), builder.scratch_buffer(INDEX, size)
    line, i = K.fresh_index(), K.fresh_index()
    statements = [
        K.Loop(line, 0, lines, [K.Loop(i, 0, n, [K.Store(source, line * _index_const(n) + i, i)])])
    ]
    width = 1
    while width < n:
        line, pair, k = K.fresh_index(), K.fresh_index(), K.fresh_index()
        base = line * _index_const(n)
        lo = pair * _index_const(2 * width)
        mid = K.binary("min", lo + _index_const(width), _index_const(n))
        hi = K.binary("min", lo + _index_const(2 * width), _index_const(n))
        left, right = K.fresh_acc(INDEX, "left"), K.fresh_acc(INDEX, "right")
        valid = K.binary("lt", lo + k, hi)
        left_pos = K.Load(source, base + K.binary("min", left.read(), _index_const(n - 1)))
        right_pos = K.Load(source, base + K.binary("min", right.read(), _index_const(n - 1)))
        left_open = K.binary("lt", left.read(), mid)
        right_done = K.binary("ge", right.read(), hi)
        take_left = K.binary(
            "and",
            left_open,
            K.binary("or", right_done, K.unary("not", before(line, right_pos, left_pos))),
        )
        # The decision is held in an accumulator: the updates below change what it reads.
        take = K.fresh_acc(K.BOOL, "take_left")
        taken = take.read()
        chosen = K.select(taken, left_pos, right_pos)
        slot = K.select(valid, base + lo + k, _index_const(size - 1))
        one, zero = _index_const(1), _index_const(0)
        step_left = K.select(K.binary("and", valid, taken), one, zero)
        step_right = K.select(K.binary("and", valid, K.unary("not", taken)), one, zero)
        merge = [
            K.SetAcc(left, lo),
            K.SetAcc(right, mid),
            K.Loop(
                k,
                0,
                2 * width,
                [
                    K.SetAcc(take, take_left),
                    K.Store(target, slot, chosen),
                    K.SetAcc(left, left.read() + step_left),
                    K.SetAcc(right, right.read() + step_right),
                ],
            ),
        ]
        pairs = -(-n // (2 * width))
        statements.append(K.Loop(line, 0, lines, [K.Loop(pair, 0, pairs, merge)]))
        source, target = target, source
        width *= 2
    return statements, source


def _sort_value(value: Expr) -> Expr:
    return K.cast(value, compute_dtype(value.dtype))


def _is_nan(x: Expr) -> Expr:
    return K.binary("ne", x, x) if x.dtype.kind == "f" else K.const(False, K.BOOL)


def _line_index(outer: list, dimension: int, position: Expr) -> list:
    index = list(outer)
    index.insert(dimension, position)
    return index


def _outer_indices(line: Expr, outer_shape: tuple[int, ...]) -> list:
    return list(split_offset(line, outer_shape)) if outer_shape else []


def _sort(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Stable lexicographic sort by the first `num_keys` operands (NaNs last, -0.0 == 0.0);
    every operand moves with the keys."""
    dimension, num_keys = eqn.params["dimension"], eqn.params["num_keys"]
    shape = eqn.invars[0].aval.shape
    n = shape[dimension]
    outer_shape = tuple(s for d, s in enumerate(shape) if d != dimension)
    lines = size_of(outer_shape)

    def before(line: Expr, p: Expr, q: Expr) -> Expr:
        outer = _outer_indices(line, outer_shape)
        result: Expr = K.const(False, K.BOOL)
        for key in reversed(eqn.invars[:num_keys]):
            a = _sort_value(builder.element(key, _line_index(outer, dimension, p)))
            b = _sort_value(builder.element(key, _line_index(outer, dimension, q)))
            a_nan, b_nan = _is_nan(a), _is_nan(b)
            less = K.binary(
                "or", K.binary("lt", a, b), K.binary("and", K.unary("not", a_nan), b_nan)
            )
            equal = K.binary("or", K.binary("eq", a, b), K.binary("and", a_nan, b_nan))
            result = K.binary("or", less, K.binary("and", equal, result))
        return result

    if radix_sort.applies(n):

        def key_of(operand: Var):
            def key(line: Expr, position: Expr) -> Expr:
                index = _line_index(_outer_indices(line, outer_shape), dimension, position)
                return radix_sort.ascending_key(_sort_value(builder.element(operand, index)))

            return key

        def place(line: Expr, rank: Expr, position: Expr) -> list:
            outer = _outer_indices(line, outer_shape)
            at, source = (
                _line_index(outer, dimension, rank),
                _line_index(outer, dimension, position),
            )
            return [
                K.Store(out, flat_offset(at, shape), builder.element(operand, source))
                for operand, out in zip(eqn.invars, outputs)
            ]

        keys = [key_of(operand) for operand in eqn.invars[:num_keys]]
        return radix_sort.sort_lines(builder, lines, n, keys, n, place)

    statements, order = _merge_sort(builder, lines, n, before)

    def gather(index: list) -> list:
        outer = [i for d, i in enumerate(index) if d != dimension]
        line = flat_offset(outer, outer_shape) if outer_shape else _index_const(0)
        position = K.Load(order, line * _index_const(n) + index[dimension])
        source_index = _line_index(outer, dimension, position)
        return [
            K.Store(out, flat_offset(index, shape), builder.element(operand, source_index))
            for operand, out in zip(eqn.invars, outputs)
        ]

    return statements + loop_nest(shape, gather)


def _top_k(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """The k largest along the last axis, largest first (floats in the IEEE total order: +NaN
    first, 0.0 before -0.0, -NaN last); equal values keep their index order."""
    (operand,) = eqn.invars
    values_out, indices_out = outputs
    shape = operand.aval.shape
    n = shape[-1]
    outer_shape = shape[:-1]
    lines = size_of(outer_shape)
    k = eqn.params["k"]

    out_shape = outer_shape + (k,)

    def ranked(line: Expr, position: Expr) -> Expr:
        """The element's rank, an integer (a float's place in the IEEE total order)."""
        a = builder.element(operand, _outer_indices(line, outer_shape) + [position])
        if a.dtype not in dtypes.HALF_FLOATS:
            a = _sort_value(a)
        # (Halves are ranked by their own bits, which order them as float32's do: widening a
        # signaling NaN may quiet it (x86's conversion does), moving it among the NaNs.)
        return radix_sort.total_order_key(a) if dtypes.is_float(a.dtype) else a

    def stores(outer: list, rank: Expr, position: Expr) -> list:
        offset = flat_offset(outer + [rank], out_shape)
        return [
            K.Store(values_out, offset, builder.element(operand, outer + [position])),
            K.Store(indices_out, offset, K.cast(position, indices_out.dtype)),
        ]

    if radix_sort.applies(n):

        def key(line: Expr, position: Expr) -> Expr:
            return radix_sort.descending_key(ranked(line, position))

        def place(line: Expr, rank: Expr, position: Expr) -> list:
            return stores(_outer_indices(line, outer_shape), rank, position)

        return radix_sort.sort_lines(builder, lines, n, [key], k, place)

    def before(line: Expr, p: Expr, q: Expr) -> Expr:
        return K.binary("gt", ranked(line, p), ranked(line, q))

    statements, order = _merge_sort(builder, lines, n, before)

    def gather(index: list) -> list:
        outer = index[:-1]
        line = flat_offset(outer, outer_shape) if outer_shape else _index_const(0)
        position = K.Load(order, line * _index_const(n) + index[-1])
        return stores(outer, index[-1], position)

    return statements + loop_nest(out_shape, gather)


root_rules[PRIMITIVES["sort"]] = _sort
root_rules[PRIMITIVES["top_k"]] = _top_k
