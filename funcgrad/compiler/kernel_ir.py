"""The loop-level kernel IR: the one input of every renderer (LLVM today, CUDA next).

A `Kernel` is a loop nest over flat buffers. Its statements are loops, stores and accumulator
updates; its expressions are scalar: constants, loop indices, loads at an element offset,
elements of constant tables, and scalar operations. Expressions form a DAG (a node used twice
is computed once per loop iteration), so renderers memoize what they emit per node.

Scalar types are NumPy dtypes; indices and offsets are int64. Booleans are `bool` in registers
and one byte in memory. float16 and bfloat16 are storage types: the compiler computes in float32
and rounds after every operation, as the reference backend does. So are the narrow formats
(8- and 4-bit floats, 2- and 4-bit integers, one value a byte), which compute in float32 or
int32: `cast` spells their conversions in integer operations (`narrow_casts`), so expressions
only load, store, select and bitcast them, and operations refuse them.

Operations (`Unary.op`, `Binary.op`) are a small fixed vocabulary, listed in UNARY_OPS and
BINARY_OPS with their semantics; transcendental functions are among them so that each renderer
can pick its own implementation (the LLVM renderer expands them into vectorizable arithmetic).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

from funcgrad import dtypes

INDEX = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)

# Unary operations. Float-only unless said otherwise; all keep the operand's dtype except
# `is_finite` (-> bool).
UNARY_OPS = {
    "neg": "negation (ints wrap)",
    "abs": "absolute value (ints wrap at the minimum)",
    "not": "logical not (bool) or bitwise not (ints)",
    "sign": "-1, 0 or 1; floats keep the sign of zero and propagate NaN",
    "floor": "",
    "ceil": "",
    "round_even": "round half to even",
    "round_away": "round half away from zero",
    "is_finite": "-> bool",
    "popcount": "number of set bits (ints)",
    "sqrt": "",
    "rsqrt": "1 / sqrt(x)",
    "cbrt": "",
    "exp": "",
    "exp2": "",
    "expm1": "",
    "log": "",
    "log1p": "",
    "log10": "",
    "log2": "",
    "sin": "",
    "cos": "",
    "tan": "",
    "asin": "",
    "acos": "",
    "atan": "",
    "sinh": "",
    "cosh": "",
    "tanh": "",
    "asinh": "",
    "acosh": "",
    "atanh": "",
    "logistic": "1 / (1 + exp(-x))",
    "erf": "",
    "erfc": "",
    "erf_inv": "",
    "lgamma": "log |Gamma(x)|; -inf at -inf, as the reference (SciPy's gammaln) gives",
    "digamma": "",
}

# Binary operations on operands of one dtype. Comparisons give bool.
BINARY_OPS = {
    "add": "",
    "sub": "",
    "mul": "",
    "div": "ints: toward zero, x / 0 = 0, MIN / -1 = MIN (the reference backend's results)",
    "rem": "C fmod; ints: x % 0 = 0",
    "pow": "floats",
    "atan2": "floats",
    "nextafter": "floats",
    "max": "NaN propagates",
    "min": "NaN propagates",
    "and": "bitwise / logical",
    "or": "",
    "xor": "",
    "shl": "ints; amounts outside [0, bits) give 0",
    "shr_logical": "ints; amounts outside [0, bits) give 0",
    "shr_arith": "ints; amounts outside [0, bits) fill with the sign bit",
    "eq": "-> bool",
    "ne": "-> bool",
    "lt": "-> bool",
    "le": "-> bool",
    "gt": "-> bool",
    "ge": "-> bool",
}
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


# ---------------------------------------------------------------------------------------------
# Buffers


@dataclass(eq=False)
class Buffer:
    """A flat array of `size` elements of `dtype` that a kernel reads or writes."""

    name: str
    dtype: np.dtype
    size: int

    def __repr__(self) -> str:
        return f"{self.name}:{self.dtype.name}[{self.size}]"


# ---------------------------------------------------------------------------------------------
# Expressions


class Expr:
    dtype: np.dtype

    # Operator sugar keeps lowering rules close to the math they implement.
    def __add__(self, other):
        return binary("add", self, as_expr(other, self.dtype))

    def __sub__(self, other):
        return binary("sub", self, as_expr(other, self.dtype))

    def __mul__(self, other):
        return binary("mul", self, as_expr(other, self.dtype))


@dataclass(eq=False)
class Const(Expr):
    value: object
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"{self.value!r}:{self.dtype.name}"


@dataclass(eq=False)
class Index(Expr):
    """A loop's induction variable (int64)."""

    name: str
    dtype: np.dtype = INDEX

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False)
class Load(Expr):
    buffer: Buffer
    offset: Expr
    dtype: np.dtype = field(init=False)

    def __post_init__(self):
        self.dtype = self.buffer.dtype


@dataclass(eq=False)
class Unary(Expr):
    op: str
    x: Expr
    dtype: np.dtype = field(init=False)

    def __post_init__(self):
        _check_computable(self.op, self.x.dtype)
        self.dtype = BOOL if self.op == "is_finite" else self.x.dtype


@dataclass(eq=False)
class Binary(Expr):
    """`op(a, b)`. A float add, sub or mul may be fused with a neighbouring product or sum into
    one rounding (a fused multiply-add) unless `contract` is False: a value that must equal a
    separately rounded reference is made by `rounded`."""

    op: str
    a: Expr
    b: Expr
    contract: bool = True
    dtype: np.dtype = field(init=False)

    def __post_init__(self):
        if self.a.dtype is not self.b.dtype and self.a.dtype != self.b.dtype:
            raise TypeError(f"kernel IR {self.op}: operand dtypes differ: {self.a} and {self.b}")
        _check_computable(self.op, self.a.dtype)
        self.dtype = BOOL if self.op in COMPARISONS else self.a.dtype


def _narrow(dtype: np.dtype) -> bool:
    return dtype.itemsize == 1 and dtype in dtypes.NARROW  # (the first test is the quick one)


def _check_computable(op: str, dtype: np.dtype) -> None:
    if _narrow(dtype):
        raise TypeError(
            f"kernel IR {op} on {dtype.name}, a storage format: cast it to "
            f"{dtypes.compute_dtype(dtype).name} first"
        )


@dataclass(eq=False)
class Select(Expr):
    """`on_true` where `pred` (bool) holds, else `on_false`."""

    pred: Expr
    on_true: Expr
    on_false: Expr
    dtype: np.dtype = field(init=False)

    def __post_init__(self):
        self.dtype = self.on_true.dtype


@dataclass(eq=False)
class Cast(Expr):
    """Value conversion with the reference backend's semantics (float -> int truncates toward
    zero, saturates, and maps NaN to 0; anything -> bool is `!= 0`)."""

    x: Expr
    dtype: np.dtype


@dataclass(eq=False)
class Bitcast(Expr):
    """Reinterpret the bits of a value as another dtype of the same width."""

    x: Expr
    dtype: np.dtype


@dataclass(eq=False)
class Lookup(Expr):
    """Element `index` (int64, within the table) of a table of constants that the expression
    carries itself: a load at a place computed per element (mathlib's chunks of 2/pi, picked by
    each argument's exponent), which renderers keep in read-only memory."""

    table: tuple
    index: Expr
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"table<{self.dtype.name} x {len(self.table)}>[{self.index!r}]"


@dataclass(eq=False)
class AccRead(Expr):
    acc: Acc
    dtype: np.dtype = field(init=False)

    def __post_init__(self):
        self.dtype = self.acc.dtype


# ---------------------------------------------------------------------------------------------
# Statements


@dataclass(eq=False)
class Acc:
    """A mutable scalar local to a kernel (a reduction's running value)."""

    name: str
    dtype: np.dtype

    def read(self) -> AccRead:
        return AccRead(self)


@dataclass(eq=False)
class Loop:
    """for index in range(start, stop): body."""

    index: Index
    start: int
    stop: int
    body: list


@dataclass(eq=False)
class Store:
    buffer: Buffer
    offset: Expr
    value: Expr
    # Whether the pass that wrote it proved that no two iterations of the loops around it
    # write one element, and that the kernel reads nothing of its buffer (a map made by a
    # column fold's threads, `parallel._columns_on_blocks`): the offset need not show it.
    own: bool = False


@dataclass(eq=False)
class SetAcc:
    acc: Acc
    value: Expr


@dataclass(eq=False)
class Kernel:
    """A loop nest over `buffers` (inputs first, then outputs)."""

    name: str
    inputs: list[Buffer]
    outputs: list[Buffer]
    body: list
    # Outputs that only this kernel uses, as working memory (a row's intermediates).
    scratch: list[Buffer] = field(default_factory=list)
    # Whether the pass that built it proved its outer loop's iterations independent where
    # `parallel.parallel_loop` cannot read that from the offsets (a scatter's window
    # positions, whose stores go through loaded indices: `parallel._scatter_split`).
    independent_outer: bool = False
    # Whether its body is loops that may run at once, each parallel (independent map kernels
    # merged into one launch: `horizontal.merge_maps`).
    concurrent_loops: bool = False

    @property
    def buffers(self) -> list[Buffer]:
        return self.inputs + self.outputs

    def as_text(self) -> str:
        head = (
            f"kernel {self.name}("
            + ", ".join(map(repr, self.inputs))
            + ") -> ("
            + ", ".join(map(repr, self.outputs))
            + ")"
        )
        return "\n".join([head] + _pp_block(self.body, "  "))


# ---------------------------------------------------------------------------------------------
# Building expressions


def const(value, dtype) -> Const:
    dtype = np.dtype(dtype)
    return Const(np.array(value).astype(dtype)[()], dtype)


def as_expr(value, dtype) -> Expr:
    return value if isinstance(value, Expr) else const(value, dtype)


def unary(op: str, x: Expr) -> Expr:
    if op not in UNARY_OPS:
        raise ValueError(f"unknown kernel IR unary op {op!r}")
    return Unary(op, x)


def binary(op: str, a: Expr, b: Expr) -> Expr:
    """`op(a, b)`, folding index arithmetic with constants so offsets stay small."""
    if op not in BINARY_OPS:
        raise ValueError(f"unknown kernel IR binary op {op!r}")
    if a.dtype == INDEX and isinstance(b, Const) and not isinstance(a, Const):
        if op in ("add", "sub") and b.value == 0:
            return a
        if op == "mul" and b.value == 1:
            return a
        if op == "mul" and b.value == 0:
            return b
    if a.dtype == INDEX and isinstance(a, Const) and not isinstance(b, Const):
        if op == "add" and a.value == 0:
            return b
        if op == "mul" and a.value == 1:
            return b
        if op == "mul" and a.value == 0:
            return a
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == INDEX:
        folded = {"add": a.value + b.value, "sub": a.value - b.value, "mul": a.value * b.value}
        if op in folded:
            return const(folded[op], INDEX)
    return Binary(op, a, b)


def rounded(x: Expr) -> Expr:
    """`x` rounded to its dtype where it is made: a float sum or product (or a choice between
    such) that no neighbouring operation may absorb into a single rounding."""
    if isinstance(x, Binary) and x.op in ("add", "sub", "mul") and x.contract:
        return Binary(x.op, x.a, x.b, contract=False)
    if isinstance(x, Select):
        return Select(x.pred, rounded(x.on_true), rounded(x.on_false))
    return x


def select(pred: Expr, on_true: Expr, on_false: Expr) -> Expr:
    if isinstance(pred, Const):
        return on_true if pred.value else on_false
    return Select(pred, on_true, on_false)


def lookup(table, index: Expr, dtype) -> Lookup:
    dtype = np.dtype(dtype)
    return Lookup(tuple(np.asarray(table, dtype).tolist()), index, dtype)


def cast(x: Expr, dtype) -> Expr:
    if x.dtype is dtype:  # the common case, before any conversion (fusion casts every operand)
        return x
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if _narrow(x.dtype) or _narrow(dtype):
        from funcgrad.compiler import narrow_casts

        return narrow_casts.cast(x, dtype)
    # A constant converts here, but a float becoming an integer saturates (NaN to 0) as the
    # renderers convert, where NumPy's astype wraps: bfloat16 too, whose NumPy kind is "V".
    if isinstance(x, Const) and dtype.kind != "V":
        float_to_int = dtypes.is_float(x.dtype) and dtype.kind != "f"
        return Cast(x, dtype) if float_to_int else const(x.value, dtype)
    return Cast(x, dtype)


_names = itertools.count()


def fresh_index(prefix: str = "i") -> Index:
    return Index(f"{prefix}{next(_names)}")


def fresh_acc(dtype, prefix: str = "acc") -> Acc:
    return Acc(f"{prefix}{next(_names)}", np.dtype(dtype))


def same(a: Expr, b: Expr) -> bool:
    """Structural equality of index expressions (indices and buffers by identity)."""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Index | AccRead):
        return False
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, Expr):
            if not same(x, y):
                return False
        elif isinstance(x, Buffer):
            if x is not y:
                return False
        elif x != y:
            return False
    return True


def nodes(expr: Expr):
    """Every distinct node of an expression DAG once (shared subexpressions are common: a
    tree walk of threefry's rounds would be exponential)."""
    seen, pending = set(), [expr]
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for f in dataclasses.fields(e):
            child = getattr(e, f.name)
            if isinstance(child, Expr):
                pending.append(child)


def linear_terms(e: Expr):
    """`e` as ({id(atom): (atom, coefficient)}, constant): what is not a sum, a difference or
    a product by a constant is an atom."""
    if isinstance(e, Const):
        return {}, int(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = linear_terms(e.a), linear_terms(e.b)
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for key, (atom, coefficient) in b[0].items():
            total = terms.get(key, (atom, 0))[1] + sign * coefficient
            terms[key] = (atom, total)
        return {k: v for k, v in terms.items() if v[1]}, a[1] + sign * b[1]
    if isinstance(e, Binary) and e.op == "mul":
        for scaled, factor in ((e.a, e.b), (e.b, e.a)):
            if isinstance(factor, Const):
                terms, constant = linear_terms(scaled)
                f = int(factor.value)
                scaled_terms = {k: (atom, c * f) for k, (atom, c) in terms.items() if c * f}
                return scaled_terms, constant * f
    return {id(e): (e, 1)}, 0


def accumulators(body: list) -> list[Acc]:
    """The accumulators a block of statements sets, in order of first appearance."""
    found: list = []
    for stmt in body:
        if isinstance(stmt, Loop):
            found += [acc for acc in accumulators(stmt.body) if acc not in found]
        elif isinstance(stmt, SetAcc) and stmt.acc not in found:
            found.append(stmt.acc)
    return found


def row_major_offset(indices: list[Expr], shape: tuple[int, ...]) -> Expr:
    """The flat offset of `indices` into a C-contiguous array of `shape`."""
    offset: Expr = const(0, INDEX)
    for index, size in zip(indices, shape):
        offset = binary("add", binary("mul", offset, const(size, INDEX)), index)
    return offset


# ---------------------------------------------------------------------------------------------
# Printing


def _pp_expr(e: Expr, names: dict) -> str:
    if isinstance(e, (Const, Index)):
        return repr(e)
    if id(e) in names:
        return names[id(e)]
    if isinstance(e, Load):
        text = f"{e.buffer.name}[{_pp_expr(e.offset, names)}]"
    elif isinstance(e, Unary):
        text = f"{e.op}({_pp_expr(e.x, names)})"
    elif isinstance(e, Binary):
        op = e.op if e.contract else f"{e.op}<rounded>"
        text = f"{op}({_pp_expr(e.a, names)}, {_pp_expr(e.b, names)})"
    elif isinstance(e, Select):
        parts = [_pp_expr(x, names) for x in (e.pred, e.on_true, e.on_false)]
        text = "select(" + ", ".join(parts) + ")"
    elif isinstance(e, Cast):
        text = f"cast<{e.dtype.name}>({_pp_expr(e.x, names)})"
    elif isinstance(e, Bitcast):
        text = f"bitcast<{e.dtype.name}>({_pp_expr(e.x, names)})"
    elif isinstance(e, Lookup):
        text = f"table<{e.dtype.name} x {len(e.table)}>[{_pp_expr(e.index, names)}]"
    elif isinstance(e, AccRead):
        text = e.acc.name
    else:
        raise TypeError(f"not a kernel IR expression: {e!r}")
    return text


def _pp_block(body: list, indent: str) -> list[str]:
    lines = []
    for stmt in body:
        names: dict = {}
        if isinstance(stmt, Loop):
            lines.append(f"{indent}for {stmt.index.name} in [{stmt.start}, {stmt.stop}):")
            lines += _pp_block(stmt.body, indent + "  ")
        elif isinstance(stmt, Store):
            offset, value = _pp_expr(stmt.offset, names), _pp_expr(stmt.value, names)
            lines.append(f"{indent}{stmt.buffer.name}[{offset}] = {value}")
        elif isinstance(stmt, SetAcc):
            value = _pp_expr(stmt.value, names)
            lines.append(f"{indent}{stmt.acc.name}:{stmt.acc.dtype.name} = {value}")
        else:
            raise TypeError(f"not a kernel IR statement: {stmt!r}")
    return lines
