"""Row fusion: consecutive kernels that walk the same leading index space share one outer loop.

A row softmax is four kernels when each root gets its own loop nest (the row maxima, the
exponentials, their sums, the quotients), each a pass over memory. Here kernels whose outputs
all start with the same leading shape `outer` (the rows) and that read one another only at the
same row become one kernel: for each row, every member runs in turn. Values that only members
of the group read (the row's maximum, its exponentials, their sum) then live in scratch the
size of one row, in cache, instead of in memory: the softmax reads its input twice from the
same cache-resident row and writes its output once.

Members are map kernels (a root stored at every index) and reductions over trailing axes (one
accumulator per row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.choices import Choice
from funcgrad.compiler.fusion import (
    REDUCTIONS,
    Accumulation,
    KernelBuilder,
    flat_offset,
    fusible,
    loop_nest,
    reduce_one,
)
from funcgrad.core import PRIMITIVES
from funcgrad.ir import JaxprEqn, Var


@dataclass(eq=False)
class Member:
    """A kernel waiting to be grouped: the equation of its root and the outputs it stores."""

    eqn: JaxprEqn
    stored: list  # outvars that get stored

    @property
    def is_reduction(self) -> bool:
        return self.eqn.primitive in REDUCTIONS

    def outer_shapes(self) -> list[tuple[int, ...]]:
        """The leading shapes this member can share a loop over, longest first."""
        shape = self.stored[0].aval.shape
        if self.is_reduction:
            x = self.eqn.invars[0]
            trailing = tuple(range(len(shape), x.aval.ndim))
            return [shape] if shape and tuple(self.eqn.params["axes"]) == trailing else []
        return [shape[:k] for k in range(len(shape), 0, -1)]


def is_member(eqn: JaxprEqn) -> bool:
    return fusible(eqn) or eqn.primitive in REDUCTIONS


# Equations through which an index keeps its leading dimensions: the element an output
# position reads from each operand lies in the same row.
_SAME_SHAPE = {PRIMITIVES[name] for name in ("convert_element_type", "stop_gradient")}


def _row_preserving(eqn: JaxprEqn, operand, rank: int) -> bool:
    out = eqn.outvars[0].aval
    if operand.aval.ndim == 0:
        return True
    if eqn.primitive.name == "broadcast_in_dim":
        dims = eqn.params["broadcast_dimensions"]
        return all(k < len(dims) and dims[k] == k for k in range(rank)) and (
            operand.aval.shape[:rank] == out.shape[:rank]
        )
    if eqn.primitive.name == "reshape":
        return eqn.params["dimensions"] is None and operand.aval.shape[:rank] == out.shape[:rank]
    if eqn.primitive in REDUCTIONS:
        return operand.aval.shape[:rank] == out.shape[:rank]
    if eqn.primitive in _SAME_SHAPE or _elementwise(eqn):
        return operand.aval.shape == out.shape
    return False


def _elementwise(eqn: JaxprEqn) -> bool:
    from funcgrad.compiler.fusion import KERNEL_OPS

    return eqn.primitive.name in KERNEL_OPS or eqn.primitive.name in (
        "select_n",
        "clamp",
        "integer_pow",
        "round",
    )


def reads_rows_only(member: Member, produced: set, producer: dict, buffer_of: dict, rank: int):
    """Whether `member` reads the variables in `produced` (the group's) only in its own row."""

    def visit(var, in_row: bool) -> bool:
        if type(var) is not Var:
            return True
        if var in produced:
            return in_row
        if var in buffer_of:
            return True
        eqn = producer[var]
        return all(visit(v, in_row and _row_preserving(eqn, v, rank)) for v in eqn.invars)

    eqn = member.eqn
    return all(visit(v, _row_preserving(eqn, v, rank)) for v in eqn.invars)


# At most MAX_GROUP members share a loop, computing at most MAX_GROUP_WORK equations per
# element together: a longer run (a very long elementwise program, which the scheduler cuts
# into chains) becomes several kernels. LLVM's vectorizer takes time that grows faster than
# linearly in the size of a loop's body, and a body of one dependent chain much longer than
# the core's reorder window runs its vector iterations one after another: a 5,000-op chain
# compiles 15-25% faster and runs 1.5x faster in loops of 99 operations than of 264.
MAX_GROUP = 8
MAX_GROUP_WORK = 100
# Rows of at most SHORT_ROW elements: a GPU runs them a thread each, so a group's members are
# one thread's statements in turn and each kernel fewer is a launch fewer; a backend may let
# more members share such rows (`short_row_groups`). On a CPU one loop of the loss gradient's
# 13 members over rows of 10 ran 22.6-23.4 µs a call against 20.1-20.5 as two loops of 8 and 5.
SHORT_ROW = 32
# How many kernels over rows of at most SHORT_ROW elements may share a loop.
short_row_groups = Choice("short_row_groups", MAX_GROUP)


def _most_members(members: list[Member], outer: tuple) -> int:
    """How many members may share a loop over `outer`: more where every member's rows are
    short (`short_row_groups`)."""
    rows = math.prod(outer)
    longest = max(_row_elements(m) // rows for m in members)
    return short_row_groups.get() if longest <= SHORT_ROW else MAX_GROUP


def _work(member: Member, producer: dict, buffer_of: dict) -> int:
    """The equations `member` computes per element (up to MAX_GROUP_WORK + 1): its root's and
    those fused into it, which read no buffer."""
    seen: set[int] = set()
    pending = [member.eqn]
    while pending and len(seen) <= MAX_GROUP_WORK:
        eqn = pending.pop()
        if id(eqn) in seen:
            continue
        seen.add(id(eqn))
        pending += [
            producer[v]
            for v in eqn.invars
            if type(v) is Var and v in producer and v not in buffer_of
        ]
    return len(seen)


def _worth_sharing(members: list[Member], outer: tuple, produced: set, producer, buffer_of) -> bool:
    """Whether the last of `members` gains by sharing the loop over `outer` with the others:
    it reads what they make (in the row, from cache or scratch), or the rows are short (on a
    GPU, a thread each and a launch fewer), or no map member is left with a loop nest inside
    the row. A map that reads nothing of the group and shares only a leading part of its
    shape gains nothing and loses parallel iterations: a GPU gives each row a thread when its
    inner loops are not one walk along memory, and the character transformer's value bias
    (32 x 64 x 64) beside its attention scores (32 x 4 x 64 x 64) ran as 32 threads, 13 ms a
    call where the two apart take some 20 µs."""
    if any(_reads_any(v, produced, producer, buffer_of) for v in members[-1].eqn.invars):
        return True
    rows = math.prod(outer)
    if all(_row_elements(m) // rows <= SHORT_ROW for m in members):
        return True
    return all(m.is_reduction or m.stored[0].aval.shape == outer for m in members)


def _row_elements(member: Member) -> int:
    return math.prod((member.eqn.invars[0] if member.is_reduction else member.stored[0]).aval.shape)


def group(members: list[Member], producer: dict, buffer_of: dict) -> list[tuple[list, tuple]]:
    """Consecutive members in groups, each with the outer shape its members share (an empty
    shape for a member on its own)."""
    groups: list[tuple[list, tuple]] = []
    work = 0  # of the last group
    for member in members:
        own = _work(member, producer, buffer_of)
        if groups and work + own <= MAX_GROUP_WORK:
            current, outer = groups[-1]
            candidates = [outer] if len(current) > 1 else current[0].outer_shapes()
            for shape in candidates:
                if shape in member.outer_shapes() and math.prod(shape) > 1:
                    if len(current) >= _most_members([*current, member], shape):
                        continue
                    produced = {v for m in current for v in m.stored}
                    if not _worth_sharing([*current, member], shape, produced, producer, buffer_of):
                        continue
                    if reads_rows_only(member, produced, producer, buffer_of, len(shape)):
                        groups[-1] = (current + [member], shape)
                        work += own
                        break
            else:
                groups.append(([member], ()))
                work = own
            continue
        groups.append(([member], ()))
        work = own
    return groups


def _reads_same_element(var, stored: set, builder: KernelBuilder) -> bool:
    """Whether the element of `var` at an index reads the variables in `stored` (being written
    in the same loop) only at that same index: through elementwise operations alone."""
    if type(var) is not Var or var in stored:
        return True
    if var in builder.buffer_of or var in builder.local:
        return True
    eqn = builder.producer[var]
    if not _elementwise(eqn) or eqn.primitive in REDUCTIONS:
        return not _reads_any(var, stored, builder.producer, builder.buffer_of, builder.local)
    shape = eqn.outvars[0].aval.shape
    return all(
        v.aval.ndim == 0 or (v.aval.shape == shape and _reads_same_element(v, stored, builder))
        for v in eqn.invars
        if type(v) is Var
    )


def _reads_any(var, stored: set, producer: dict, *given) -> bool:
    """Whether `var`'s value reads a variable in `stored`, through the equations fused into it
    down to the variables whose values are given (in one of the containers `given`: buffers,
    a row's scratch)."""
    seen: set = set()
    pending = [var]
    while pending:
        var = pending.pop()
        if type(var) is not Var or var in seen:
            continue
        if var in stored:
            return True
        if any(var in values for values in given):
            continue
        seen.add(var)
        pending += producer[var].invars
    return False


def build(builder: KernelBuilder, members: list[Member], outer: tuple, local: set) -> list:
    """The statements of one kernel running every member for each index of `outer`. Variables
    in `local` live in row-sized scratch."""
    rank = len(outer)
    # In the members' order, not the set's: a program renders to the same text in every
    # process, which the on-disk compilation cache depends on.
    for var in [v for m in members for v in m.stored if v in local]:
        size = math.prod(var.aval.shape[rank:])
        builder.local[var] = (builder.scratch_buffer(var.aval.dtype, size), rank)

    def target(var, index: list):
        if var in builder.local:
            buffer, _ = builder.local[var]
            return buffer, flat_offset(index[rank:], var.aval.shape[rank:])
        return builder.buffer_of[var], flat_offset(index, var.aval.shape)

    def map_stores(member: Member, index: list) -> list:
        values = builder.compute(member.eqn, index)
        values = values if isinstance(values, list) else [values]
        by_var = dict(zip(member.eqn.outvars, values))
        stores = []
        for var in member.stored:
            buffer, offset = target(var, index)
            stores.append(K.Store(buffer, offset, by_var[var]))
        return stores

    def row(outer_index: list) -> list:
        statements = []
        position = 0
        while position < len(members):
            member = members[position]
            position += 1
            if member.is_reduction:
                (var,) = member.stored
                buffer, offset = target(var, outer_index)
                statements += reduce_one(
                    builder, member.eqn, outer_index, lambda v, b=buffer, o=offset: K.Store(b, o, v)
                )
                continue
            inner_shape = member.stored[0].aval.shape[rank:]
            # Reductions right after it over the same inner elements share its loop: each
            # element is reduced as soon as it is stored. A reduction reading another one of
            # the loop (a sum of x - max) needs that one finished first, so it starts a pass
            # of its own.
            sharing = []
            while position < len(members) and members[position].is_reduction:
                accumulation = Accumulation(builder, members[position].eqn, outer_index)
                source = members[position].eqn.invars[0]
                same_element = _reads_same_element(source, set(member.stored), builder)
                earlier = {v for reduction, _ in sharing for v in reduction.stored}
                if (
                    accumulation.reduced_shape != inner_shape
                    or not same_element
                    or _reads_any(
                        source, earlier, builder.producer, builder.buffer_of, builder.local
                    )
                ):
                    break
                sharing.append((members[position], accumulation))
                position += 1
            for _, accumulation in sharing:
                statements += accumulation.start
            statements += loop_nest(
                inner_shape,
                lambda inner, member=member, sharing=sharing: (
                    map_stores(member, outer_index + inner)
                    + [s for _, a in sharing for s in a.add(inner)]
                ),
            )
            for reduction, accumulation in sharing:
                (var,) = reduction.stored
                buffer, offset = target(var, outer_index)
                statements += accumulation.finish(lambda v, b=buffer, o=offset: K.Store(b, o, v))
        return statements

    return loop_nest(outer, row)
