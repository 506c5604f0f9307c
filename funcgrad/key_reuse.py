"""Key-reuse checking (`config.debug_key_reuse`): a random key used up twice raises
`KeyReuseError`, where eager code does it and in traced programs before they run.

funcgrad's keys are plain uint32 arrays of shape (..., 2), so a key is whatever a
funcgrad.random function is given as one. With the option on, those functions record their
uses in the program as two identity primitives (`lax.random_bits`): `random_consume` where a
function draws from a key or splits it (every function but `fold_in`, which JAX does not count
as a use either), and `random_clone` where `clone`, `key_data` or `wrap_key_data` hand out a key
of the same bits that counts as new.

What a key is follows the data, element by element: an index, a reshape or a concatenation of
keys holds the same keys (a *selection* of the elements it was taken from), so drawing from
`keys[0]` twice is a reuse, and drawing from `keys[0]` and `keys[1]` is not; taking `keys[0]`
uses nothing by itself. Any other operation makes new values. A traced program is checked
equation by equation (`jaxpr_signature`): which of its inputs it uses up (`Sink`), which of its
outputs are new keys (`Source`), the same keys as an input (`Forward`) or a selection of them
(`View`). Programs that equations carry give those equations their signatures: a jitted call
its program's, a cond the union of its branches' uses, and a loop its body's, after checking
that every iteration draws from keys of its own (a key drawn from in a loop body must not be
a constant of the loop, nor a carry that goes round unchanged).

Eager arrays hold their state in `Array._key_cells`: one `_Cell` per element, shared by every
array that selects that element, recording who used it up. The eval trace's
`process_primitive` is wrapped while the option is on, and eager calls of jitted functions
check their program's signature against their arguments, so nothing is added to any path while
it is off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from funcgrad import caches, core, dtypes
from funcgrad.array import Array
from funcgrad.errors import KeyReuseError
from funcgrad.ir import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
from funcgrad.lax.control_flow.conditionals import cond_p
from funcgrad.lax.control_flow.loops import while_p
from funcgrad.lax.control_flow.scan import scan_p
from funcgrad.lax.elementwise import convert_element_type_p, select_n_p
from funcgrad.lax.indexing import dynamic_slice_p, dynamic_update_slice_p, gather_p, scatter_p
from funcgrad.lax.random_bits import random_consume_p
from funcgrad.lax.shapes import (
    broadcast_in_dim_p,
    concatenate_p,
    pad_p,
    reshape_p,
    rev_p,
    slice_p,
    squeeze_p,
    transpose_p,
)
from funcgrad.transforms.checkpoint import checkpoint_p
from funcgrad.transforms.custom_batching import custom_vmap_call_p
from funcgrad.transforms.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p
from funcgrad.transforms.jit import jit_p
from funcgrad.transforms.pmap import pmap_p
from funcgrad.transforms.shard_map import shard_map_p

__all__ = [
    "Forward",
    "KeyReuseError",
    "KeyReuseSignature",
    "Sink",
    "Source",
    "View",
    "check_key_reuse",
    "check_key_reuse_jaxpr",
    "consume",
    "function_type_signature",
    "jaxpr_type_signature",
]

# ---------------------------------------------------------------------------------------------
# Signatures


def _mask_key(mask) -> Any:
    return mask if mask is True else (mask.shape, mask.tobytes())


def _all_or_mask(mask: np.ndarray) -> bool | np.ndarray:
    """True where every element is set; else the mask itself, read-only."""
    if mask.all():
        return True
    mask = np.array(mask, dtype=bool)
    mask.flags.writeable = False
    return mask


class Sink:
    """Input `idx` is used up where `mask` (an array of the input's shape, or True for all of
    it) is set; `by` names the first use (the function and the user's line)."""

    __slots__ = ("idx", "mask", "by")

    def __init__(self, idx: int, mask: bool | np.ndarray = True, by: str = ""):
        self.idx = idx
        self.mask = mask
        self.by = by

    def _key(self):
        return (type(self).__name__, self.idx, _mask_key(self.mask))

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        mask = "" if self.mask is True else f", {np.asarray(self.mask).tolist()}"
        return f"{type(self).__name__}({self.idx}{mask})"


class Source(Sink):
    """Output `idx` holds new keys where `mask` is set (True: all of it); its other elements
    are used up already (by `by`)."""

    __slots__ = ()


class Forward:
    """Output `out_idx` is input `in_idx` itself: the same keys, used up where it is."""

    __slots__ = ("in_idx", "out_idx")

    def __init__(self, in_idx: int, out_idx: int):
        self.in_idx = in_idx
        self.out_idx = out_idx

    def __eq__(self, other) -> bool:
        return type(other) is Forward and (other.in_idx, other.out_idx) == (
            self.in_idx,
            self.out_idx,
        )

    def __hash__(self) -> int:
        return hash((Forward, self.in_idx, self.out_idx))

    def __repr__(self) -> str:
        return f"Forward({self.in_idx}, {self.out_idx})"


class View:
    """Output `out_idx` selects elements of the inputs: `ids` (the output's shape) numbers them
    through the inputs laid end to end, each flattened; -1 marks an element that is new."""

    __slots__ = ("out_idx", "ids")

    def __init__(self, out_idx: int, ids: np.ndarray):
        self.out_idx = out_idx
        self.ids = ids

    def __eq__(self, other) -> bool:
        return (
            type(other) is View
            and other.out_idx == self.out_idx
            and np.array_equal(other.ids, self.ids)
        )

    def __hash__(self) -> int:
        return hash((View, self.out_idx, self.ids.tobytes()))

    def __repr__(self) -> str:
        return f"View({self.out_idx}, {np.asarray(self.ids).tolist()})"


class KeyReuseSignature:
    """What a program does with keys: the inputs it uses up (`Sink`), and for each output
    that is keys (a uint32 array of shape (..., 2)) whether it is new (`Source`), an input
    (`Forward`) or a selection of inputs (`View`); such an output with none of these is used
    up (`spent` names who used each)."""

    def __init__(self, *parts, spent: dict[int, str] | None = None):
        self._parts = frozenset(parts)
        self.spent = dict(spent or {})

    @property
    def sinks(self) -> list[Sink]:
        return sorted((p for p in self._parts if type(p) is Sink), key=lambda p: p.idx)

    @property
    def sources(self) -> list[Source]:
        return sorted((p for p in self._parts if type(p) is Source), key=lambda p: p.idx)

    @property
    def forwards(self) -> list[Forward]:
        return sorted((p for p in self._parts if type(p) is Forward), key=lambda p: p.out_idx)

    @property
    def views(self) -> list[View]:
        return sorted((p for p in self._parts if type(p) is View), key=lambda p: p.out_idx)

    def __eq__(self, other) -> bool:
        return isinstance(other, KeyReuseSignature) and other._parts == self._parts

    def __hash__(self) -> int:
        return hash(self._parts)

    def __repr__(self) -> str:
        parts = [*self.sinks, *self.sources, *self.forwards, *self.views]
        return f"KeyReuseSignature({', '.join(map(repr, parts))})"


def _key_shaped(aval) -> bool:
    """Whether values of `aval` can be keys: uint32 arrays of shape (..., 2)."""
    return aval.dtype == dtypes.uint32 and aval.shape[-1:] == (2,)


def _reuse_error(by: str, previous: str) -> KeyReuseError:
    return KeyReuseError(
        f"{by} draws from a key that {previous} already used: the two would give the same "
        "(or related) random numbers. Split the key (random.split) to get one key for each "
        "use, or fold a counter into it (random.fold_in)."
    )


# ---------------------------------------------------------------------------------------------
# Following keys through a program


class _Program:
    """The keys of one program as it is read equation by equation.

    Each variable that no equation selects from others is a *root*; its elements get
    consecutive ids (when first needed), and `users[n]` records for each element of root n
    the number of the use that used it up (0: none; `uses[k]` describes use k). A variable
    made by a data movement (`_MOVES`), or given an input's keys by a call, is a selection of
    the ids of the variables it was made from, found when first asked for (`selection`)."""

    def __init__(self):
        self.made_by: dict[Var, Callable[[], tuple]] = {}
        self.selections: dict[Var, tuple] = {}
        self.starts: list[int] = []
        self.root_number: dict[Var, int] = {}
        self.users: list[np.ndarray] = []
        self.uses: list[str] = [""]

    def root_ids(self, var: Var) -> np.ndarray:
        number = self.root_number.get(var)
        if number is None:
            number = self.root_number[var] = len(self.starts)
            self.starts.append(self.starts[-1] + self.users[-1].size if self.starts else 0)
            self.users.append(np.zeros(var.aval.size, np.int64))
        start = self.starts[number]
        return np.arange(start, start + var.aval.size).reshape(var.aval.shape)

    def selection(self, atom) -> tuple[np.ndarray | None, np.ndarray]:
        """(ids, among): `ids` (the atom's shape; -1 where an element is new) when the
        elements are known, else None and `among`, the ids it holds some of (an index
        computed when the program runs decides which)."""
        if type(atom) is Literal:
            return np.full(np.shape(atom.val), -1, np.int64), np.empty(0, np.int64)
        found = self.selections.get(atom)
        if found is None:
            made = self.made_by.get(atom)
            if made is None:
                ids = self.root_ids(atom)
                found = (ids, ids.reshape(-1))
            else:
                found = made()
            self.selections[atom] = found
        return found

    def locate(self, ids: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """For each root the (non-negative) `ids` fall in: its number, the positions in `ids`
        of those falling in it, and their flat positions in the root."""
        at = np.flatnonzero(ids >= 0)
        owner = np.searchsorted(self.starts, ids[at], side="right") - 1
        return [
            (int(root), at[owner == root], ids[at[owner == root]] - self.starts[root])
            for root in np.unique(owner)
        ]

    def use(self, atom, mask, by: str) -> None:
        """The keys of `atom` where `mask` is set are used up by `by`: raise if any was."""
        ids, among = self.selection(atom)
        chosen = among if ids is None else (ids if mask is True else ids[np.asarray(mask)])
        located = self.locate(chosen.reshape(-1))
        for root, _, positions in located:
            previous = self.users[root][positions]
            if previous.any():
                raise _reuse_error(by, self.uses[int(previous[previous > 0][0])])
        self.uses.append(by)
        for root, _, positions in located:
            self.users[root][positions] = len(self.uses) - 1

    def spend(self, var: Var, mask, by: str) -> None:
        """`var` is made with its keys used up where `mask` is set."""
        self.uses.append(by)
        self.root_ids(var)
        users = self.users[self.root_number[var]].reshape(var.aval.shape)
        users[mask if mask is True else np.asarray(mask)] = len(self.uses) - 1

    def select(self, var: Var, made: Callable[[], tuple]) -> None:
        self.made_by[var] = made

    def used_by(self, atom) -> tuple[np.ndarray, str]:
        """For each element of `atom`, whether it is used up; and the first use found."""
        ids, _ = self.selection(atom)
        if ids is None:
            return np.zeros(atom.aval.shape, bool), ""
        flat = ids.reshape(-1)
        used = np.zeros(flat.shape, np.int64)
        for root, at, positions in self.locate(flat):
            used[at] = self.users[root][positions]
        first = self.uses[int(used[used > 0][0])] if used.any() else ""
        return (used > 0).reshape(ids.shape), first

    def signature(self, jaxpr: Jaxpr) -> KeyReuseSignature:
        inputs = [*jaxpr.invars, *jaxpr.constvars]
        parts: list = []
        for i, var in enumerate(inputs):
            number = self.root_number.get(var)
            if number is None:
                continue
            users = self.users[number]
            if users.any():
                mask = _all_or_mask((users > 0).reshape(var.aval.shape))
                parts.append(Sink(i, mask, self.uses[int(users[users > 0][0])]))
        offsets = _offsets(inputs)
        spent: dict[int, str] = {}
        for j, out in enumerate(jaxpr.outvars):
            if type(out) is Literal or not _key_shaped(out.aval):
                continue
            ids, _ = self.selection(out)
            in_ids = None if ids is None else self._over_inputs(ids, inputs, offsets)
            if in_ids is not None:
                parts.append(_forward_or_view(in_ids, inputs, offsets, j))
                continue
            used, first = self.used_by(out)
            if not used.all():
                parts.append(Source(j, _all_or_mask(~used), first))
            if used.any():
                spent[j] = first
        return KeyReuseSignature(*parts, spent=spent)

    def _over_inputs(self, ids, inputs, offsets) -> np.ndarray | None:
        """`ids` numbered over the program's inputs, if every known element is an input's."""
        input_of_root = {
            self.root_number[v]: i for i, v in enumerate(inputs) if v in self.root_number
        }
        flat = ids.reshape(-1)
        located = self.locate(flat)
        if not located or any(root not in input_of_root for root, _, _ in located):
            return None
        renumbered = np.full(flat.shape, -1, np.int64)
        for root, at, positions in located:
            renumbered[at] = offsets[input_of_root[root]] + positions
        return renumbered.reshape(ids.shape)


def _offsets(atoms: Sequence) -> np.ndarray:
    """Where each atom's (or aval's) elements start when they are laid end to end, and where
    the last ends."""
    sizes = [getattr(a, "aval", a).size for a in atoms]
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _forward_or_view(in_ids: np.ndarray, inputs: Sequence, offsets: np.ndarray, j: int):
    for i, var in enumerate(inputs):
        if var.aval.shape != in_ids.shape:
            continue
        if np.array_equal(in_ids, offsets[i] + np.arange(var.aval.size).reshape(in_ids.shape)):
            return Forward(i, j)
    return View(j, in_ids)


# ---------------------------------------------------------------------------------------------
# Equations: data movements, uses, and the programs equations carry


def _move_rule(data_operands: Callable[[JaxprEqn], Sequence[int]]):
    """A rule for a primitive that only moves elements: the output's ids are the primitive's
    own implementation applied to its data operands' ids (with -1 for new elements) and to
    its other operands' values, where they are literals; where one is computed when the
    program runs (a traced index, a predicate), the output may hold any of the ids."""

    def rule(program: _Program, eqn: JaxprEqn) -> None:
        data = list(data_operands(eqn))

        def made() -> tuple:
            selections = {i: program.selection(eqn.invars[i]) for i in data}
            others = [a for i, a in enumerate(eqn.invars) if i not in data]
            known = all(s[0] is not None for s in selections.values()) and all(
                type(a) is Literal for a in others
            )
            if not known:
                among = np.unique(np.concatenate([s[1] for s in selections.values()]))
                return None, among
            operands = [
                selections[i][0] if i in data else np.asarray(a.val)
                for i, a in enumerate(eqn.invars)
            ]
            ids = np.asarray(_moved(eqn.primitive, operands, eqn.params), np.int64)
            return ids, ids[ids >= 0].reshape(-1)

        program.select(eqn.outvars[0], made)

    return rule


def _moved(primitive, operands: list, params: dict):
    if primitive is convert_element_type_p:
        return operands[0]
    if primitive is pad_p:
        operand, _ = operands
        return primitive.impl(operand, np.int64(-1), **params)
    return primitive.impl(*operands, **params)


def _first(eqn):
    return (0,)


def _all(eqn):
    return range(len(eqn.invars))


_MOVES: dict = {
    prim: _move_rule(_first)
    for prim in (
        broadcast_in_dim_p,
        reshape_p,
        squeeze_p,
        transpose_p,
        rev_p,
        slice_p,
        convert_element_type_p,
        pad_p,
        dynamic_slice_p,
        gather_p,
    )
}
_MOVES[concatenate_p] = _move_rule(_all)
_MOVES[dynamic_update_slice_p] = _move_rule(lambda eqn: (0, 1))
_MOVES[scatter_p] = _move_rule(lambda eqn: (0, 2))
_MOVES[select_n_p] = _move_rule(lambda eqn: range(1, len(eqn.invars)))


def _describe_use(eqn: JaxprEqn) -> str:
    where = f" at {eqn.source_info}" if eqn.source_info is not None else ""
    return f"{eqn.params['by']}{where}"


# Rules giving the signature of a higher-order primitive's programs from its params, in terms
# of its operands and outputs (operands past its own are the program's closed-over values).
_CALLS: dict = {}


def _call_signature(param: str) -> Callable[[dict], tuple[KeyReuseSignature, list]]:
    def rule(params: dict):
        closed = params[param]
        return jaxpr_signature(closed.jaxpr), list(closed.consts)

    return rule


for _prim in (jit_p, checkpoint_p):
    _CALLS[_prim] = _call_signature("jaxpr")
for _prim in (custom_jvp_call_p, custom_vjp_call_p, custom_vmap_call_p):
    _CALLS[_prim] = _call_signature("call_jaxpr")


def _mapped_signature(params: dict):
    """pmap and shard_map: each device's program sees a part of each operand, so a key it
    uses is taken to be the whole operand's; their outputs are new."""
    inner = jaxpr_signature(params["jaxpr"].jaxpr)
    sinks = [Sink(s.idx, True, s.by) for s in inner.sinks]
    return KeyReuseSignature(*sinks), list(params["jaxpr"].consts)


_CALLS[pmap_p] = _mapped_signature
_CALLS[shard_map_p] = _mapped_signature


def _cond_signature(params: dict):
    branches = [jaxpr_signature(b.jaxpr) for b in params["branches"]]
    sinks: dict[int, Sink] = {}
    for signature in branches:
        for sink in signature.sinks:
            found = sinks.get(sink.idx)
            if found is None:
                sinks[sink.idx] = Sink(sink.idx + 1, sink.mask, sink.by)
            else:
                mask = np.logical_or(found.mask, sink.mask)
                sinks[sink.idx] = Sink(sink.idx + 1, _all_or_mask(np.asarray(mask)), found.by)
    parts: list = list(sinks.values())
    spent: dict[int, str] = {}
    num_out = len(params["branches"][0].out_avals)
    for j in range(num_out):
        forwards = {f.in_idx for s in branches for f in s.forwards if f.out_idx == j}
        if len(forwards) == 1 and all(any(f.out_idx == j for f in s.forwards) for s in branches):
            parts.append(Forward(forwards.pop() + 1, j))
            continue
        used = [s.spent[j] for s in branches if j in s.spent]
        if used:
            spent[j] = used[0]
        elif any(src.idx == j for s in branches for src in s.sources):
            parts.append(Source(j))
    return KeyReuseSignature(*parts, spent=spent), []


_CALLS[cond_p] = _cond_signature


def _loop_error(loop: str, reason: str, by: str) -> KeyReuseError:
    return KeyReuseError(
        f"{loop} {reason} ({by}), so every iteration would draw the same random numbers. "
        "Split the key in the body and carry one of the new keys to the next iteration, or fold "
        "the iteration number into it (random.fold_in)."
    )


def _carried_keys_checked(
    loop: str, body: KeyReuseSignature, uses: list[Sink], num_consts: int, carried: range
) -> None:
    """A loop may not use up a key it gets as a constant (those before its carry, and the
    values its program closes over), nor a carried key that the body does not replace by a
    new one (a `Source` output at the carry's place)."""
    fresh = {s.idx for s in body.sources if s.mask is True}
    for sink in uses:
        position = sink.idx - num_consts
        if sink.idx < num_consts:
            raise _loop_error(
                loop, "draws from a key it closes over or gets as a constant", sink.by
            )
        if position in carried and position not in fresh:
            raise _loop_error(
                loop,
                "draws from a carried key and carries it (or keys made before the draw) to the "
                "next iteration",
                sink.by,
            )


def _scan_signature(params: dict):
    closed = params["jaxpr"]
    body = jaxpr_signature(closed.jaxpr)
    num_consts, num_carry = params["num_consts"], params["num_carry"]
    _carried_keys_checked("scan body", body, body.sinks, num_consts, range(num_carry))
    for sink in body.sinks:
        if sink.idx >= len(closed.jaxpr.invars):
            raise _loop_error("scan body", "draws from a key it closes over", sink.by)
    in_avals, length = closed.in_avals, params["length"]
    parts: list = []
    for sink in body.sinks:
        mask = sink.mask
        if sink.idx >= num_consts + num_carry and mask is not True:
            mask = np.broadcast_to(mask, (length, *in_avals[sink.idx].shape))
        parts.append(Sink(sink.idx, mask, sink.by))
    for forward in body.forwards:
        carried_through = forward.out_idx < num_carry and forward.in_idx in (
            num_consts + forward.out_idx,
            *range(num_consts),
        )
        scanned_through = forward.out_idx >= num_carry and forward.in_idx >= num_consts + num_carry
        if carried_through or scanned_through:
            parts.append(forward)
    parts += [Source(s.idx) for s in body.sources if s.mask is True]
    return KeyReuseSignature(*parts, spent=body.spent), list(closed.consts)


_CALLS[scan_p] = _scan_signature


def _while_signature(params: dict):
    cond_closed, body_closed = params["cond_jaxpr"], params["body_jaxpr"]
    cond = jaxpr_signature(cond_closed.jaxpr)
    body = jaxpr_signature(body_closed.jaxpr)
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    carried = range(len(body_closed.out_avals))
    for name, signature, num_consts, closed in (
        ("while_loop body", body, body_nconsts, body_closed),
        ("while_loop cond", cond, cond_nconsts, cond_closed),
    ):
        _carried_keys_checked(name, body, signature.sinks, num_consts, carried)
        for sink in signature.sinks:
            if sink.idx >= len(closed.jaxpr.invars):
                raise _loop_error(name, "draws from a key it closes over", sink.by)
    body_carried = {s.idx - body_nconsts for s in body.sinks}
    for sink in cond.sinks:
        if sink.idx - cond_nconsts in body_carried:
            raise _loop_error(
                "while_loop", "draws from the same carried key in its cond and its body", sink.by
            )
    carry_start = cond_nconsts + body_nconsts
    parts: list = [Sink(carry_start + s.idx - body_nconsts, s.mask, s.by) for s in body.sinks]
    parts += [Sink(carry_start + s.idx - cond_nconsts, s.mask, s.by) for s in cond.sinks]
    parts += [
        Forward(carry_start + f.out_idx, f.out_idx)
        for f in body.forwards
        if f.in_idx == body_nconsts + f.out_idx
    ]
    parts += [Source(s.idx) for s in body.sources if s.mask is True]
    return KeyReuseSignature(*parts, spent=body.spent), []


_CALLS[while_p] = _while_signature


def _apply_call(program: _Program, eqn: JaxprEqn, signature: KeyReuseSignature) -> None:
    operands, outputs = eqn.invars, eqn.outvars
    for sink in signature.sinks:
        if sink.idx < len(operands):
            program.use(operands[sink.idx], sink.mask, sink.by)
    for forward in signature.forwards:
        if forward.in_idx < len(operands):
            source = operands[forward.in_idx]
            program.select(
                outputs[forward.out_idx], lambda source=source: program.selection(source)
            )
    for view in signature.views:
        program.select(
            outputs[view.out_idx],
            lambda ids=view.ids: _renumbered(program, operands, ids),
        )
    for j, by in signature.spent.items():
        sources = [s for s in signature.sources if s.idx == j]
        mask = True if not sources else ~np.asarray(sources[0].mask)
        program.spend(outputs[j], mask, by)


def _renumbered(program: _Program, operands: Sequence, ids: np.ndarray) -> tuple:
    """A call's `View` ids (over its program's inputs) as ids of this program."""
    offsets = _offsets(operands)
    flat = ids.reshape(-1)
    out = np.full(flat.shape, -1, np.int64)
    among: list = []
    for i, operand in enumerate(operands):
        inside = (flat >= offsets[i]) & (flat < offsets[i + 1])
        if not inside.any():
            continue
        operand_ids, operand_among = program.selection(operand)
        if operand_ids is None:
            among.append(operand_among)
            continue
        out[inside] = operand_ids.reshape(-1)[flat[inside] - offsets[i]]
    if among:
        return None, np.unique(np.concatenate([*among, out[out >= 0]]))
    out = out.reshape(ids.shape)
    return out, out[out >= 0].reshape(-1)


def _read(program: _Program, eqn: JaxprEqn) -> None:
    primitive = eqn.primitive
    if primitive is random_consume_p:
        program.use(eqn.invars[0], True, _describe_use(eqn))
    elif primitive in _MOVES:
        _MOVES[primitive](program, eqn)
    elif primitive in _CALLS:
        signature, _ = _CALLS[primitive](eqn.params)
        _apply_call(program, eqn, signature)


@caches.program_cache
def jaxpr_signature(jaxpr: Jaxpr) -> KeyReuseSignature:
    """The key-reuse signature of a program; raises `KeyReuseError` where it uses a key that
    is already used up, or a loop in it draws from the same key at every iteration."""
    program = _Program()
    for eqn in jaxpr.eqns:
        _read(program, eqn)
    return program.signature(jaxpr)


def without_key_uses(closed: ClosedJaxpr) -> ClosedJaxpr:
    """The program with its `random_consume` markers dropped (in the programs its equations
    carry too): a recomputation of values whose key uses were recorded where they were first
    computed (checkpoint's, in reverse mode), which would otherwise count them twice."""
    return ClosedJaxpr(_without_uses(closed.jaxpr), closed.consts)


def _without_uses(jaxpr: Jaxpr) -> Jaxpr:
    renamed: dict = {}
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [renamed.get(v, v) for v in eqn.invars]
        if eqn.primitive is random_consume_p:
            renamed[eqn.outvars[0]] = invars[0]
            continue
        params = {name: _param_without_uses(value) for name, value in eqn.params.items()}
        eqns.append(JaxprEqn(eqn.primitive, invars, eqn.outvars, params, eqn.source_info))
    outvars = [renamed.get(v, v) for v in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns)


def _param_without_uses(value):
    if isinstance(value, ClosedJaxpr):
        return without_key_uses(value)
    if isinstance(value, Jaxpr):
        return _without_uses(value)
    if isinstance(value, tuple) and any(isinstance(v, (ClosedJaxpr, Jaxpr)) for v in value):
        return tuple(map(_param_without_uses, value))
    return value


# ---------------------------------------------------------------------------------------------
# Eager arrays


class _Cell:
    """One element of an eager key array: who used it up (an empty string while unused)."""

    __slots__ = ("used_by",)

    def __init__(self, used_by: str = ""):
        self.used_by = used_by


def _new_cells(shape: tuple[int, ...], used_by: str = "") -> np.ndarray:
    cells = np.empty(shape, object)
    for index in np.ndindex(*shape):
        cells[index] = _Cell(used_by)
    return cells


def _cells(array: Array) -> np.ndarray:
    cells = getattr(array, "_key_cells", None)
    if cells is None:
        cells = array._key_cells = _new_cells(array.shape)
    return cells


def _followed(x) -> bool:
    return type(x) is Array and (hasattr(x, "_key_cells") or _key_shaped(x))


def _where() -> str:
    from funcgrad.interpreters.staging import user_source_info

    where = user_source_info()
    return f" at {where}" if where is not None else ""


def _check_unused(cells: np.ndarray, by: str) -> None:
    for cell in cells.reshape(-1):
        if cell.used_by:
            raise _reuse_error(by, cell.used_by)


def _mark_used(cells: np.ndarray, by: str) -> None:
    for cell in cells.reshape(-1):
        cell.used_by = by


class _Running(threading.local):
    # Above zero while a primitive whose programs were checked as a whole runs: the
    # primitives it binds in turn are not checked again.
    depth = 0


_running = _Running()


def _eager_use(process_primitive, primitive, args, params):
    (keys,) = args
    by = f"{params['by']}{_where()}"
    cells = _cells(keys)
    _check_unused(cells, by)
    _mark_used(cells, by)
    return process_primitive(primitive, args, params)


def _eager_move(process_primitive, primitive, args, params):
    out = process_primitive(primitive, args, params)
    if not any(_followed(a) for a in args):
        return out
    data = list(_MOVES_DATA[primitive](args))
    pieces, operands, start = [], [], 0
    for i, arg in enumerate(args):
        if i not in data:
            operands.append(np.asarray(arg))
            continue
        if _followed(arg):
            cells = _cells(arg).reshape(-1)
            pieces.append(cells)
            operands.append(np.arange(start, start + cells.size).reshape(arg.shape))
            start += cells.size
        else:
            operands.append(np.full(arg.shape, -1, np.int64))
    ids = np.asarray(_moved(primitive, operands, params), np.int64)
    known = np.concatenate(pieces) if pieces else np.empty(0, object)
    out._key_cells = _new_cells(ids.shape)
    chosen = ids >= 0
    out._key_cells[chosen] = known[ids[chosen]]
    return out


_MOVES_DATA: dict = {prim: (lambda args: (0,)) for prim in _MOVES}
_MOVES_DATA[concatenate_p] = lambda args: range(len(args))
_MOVES_DATA[dynamic_update_slice_p] = lambda args: (0, 1)
_MOVES_DATA[scatter_p] = lambda args: (0, 2)
_MOVES_DATA[select_n_p] = lambda args: range(1, len(args))


def _eager_call(run: Callable[[], list], inputs: list, signature: KeyReuseSignature, what: str):
    """Run a program of this signature on eager `inputs` (its operands, then the values it
    closes over): check and mark the keys it uses, and give its outputs their keys' state."""
    sinks = [s for s in signature.sinks if s.idx < len(inputs) and type(inputs[s.idx]) is Array]
    for sink in sinks:
        cells = _cells(inputs[sink.idx])
        _check_unused(cells if sink.mask is True else cells[sink.mask], f"{sink.by} ({what})")
    _running.depth += 1
    try:
        outs = run()
    finally:
        _running.depth -= 1
    for sink in sinks:
        cells = _cells(inputs[sink.idx])
        _mark_used(cells if sink.mask is True else cells[sink.mask], sink.by)
    for forward in signature.forwards:
        arg = inputs[forward.in_idx] if forward.in_idx < len(inputs) else None
        if type(arg) is Array:
            outs[forward.out_idx]._key_cells = _cells(arg)
    for view in signature.views:
        outs[view.out_idx]._key_cells = _selected_cells(inputs, view.ids)
    for j, by in signature.spent.items():
        out = outs[j]
        sources = [s for s in signature.sources if s.idx == j]
        cells = _new_cells(out.shape)
        _mark_used(cells if not sources else cells[~np.asarray(sources[0].mask)], by)
        out._key_cells = cells
    return outs


def _selected_cells(inputs: list, ids: np.ndarray) -> np.ndarray:
    """The cells of a `View` of `inputs` (new ones where its ids are -1)."""
    offsets = _offsets([core.get_aval(a) for a in inputs])
    cells = _new_cells(ids.shape)
    for i, arg in enumerate(inputs):
        inside = (ids >= offsets[i]) & (ids < offsets[i + 1])
        if inside.any() and type(arg) is Array:
            cells[inside] = _cells(arg).reshape(-1)[ids[inside] - offsets[i]]
    return cells


def _eager_higher_order(process_primitive, primitive, args, params):
    signature, consts = _CALLS[primitive](params)
    return _eager_call(
        lambda: process_primitive(primitive, args, params),
        [*args, *consts],
        signature,
        f"in {primitive.name}",
    )


def _checking(process_primitive):
    """The eval trace's `process_primitive`, checking key uses."""

    def checked(primitive, args, params):
        if _running.depth:
            return process_primitive(primitive, args, params)
        if primitive is random_consume_p:
            return _eager_use(process_primitive, primitive, args, params)
        if primitive in _MOVES:
            return _eager_move(process_primitive, primitive, args, params)
        if primitive in _CALLS:
            return _eager_higher_order(process_primitive, primitive, args, params)
        return process_primitive(primitive, args, params)

    return checked


def jitted_call(program, jaxpr: ClosedJaxpr, name: str, *args):
    """An eager call of a jitted function's `program` (of `jaxpr`, whose inputs are the
    closed-over values, then the arguments), checked against its arguments' keys."""
    return _eager_call(
        lambda: program(*args), list(args), jaxpr_signature(jaxpr.jaxpr), f"in jit({name})"
    )


_unchecked: list = []  # the eval trace's own process_primitive while checking is on


def use(enabled: bool) -> None:
    """Turn checking on or off (`config.update("debug_key_reuse", ...)` calls this)."""
    from funcgrad.transforms import jit

    trace = core.eval_trace()
    if enabled and not _unchecked:
        _unchecked.append(vars(trace).get("process_primitive"))
        trace.process_primitive = _checking(trace.process_primitive)
        jit.check_keys(jitted_call)
    elif not enabled and _unchecked:
        previous = _unchecked.pop()
        if previous is None:
            del trace.process_primitive
        else:
            trace.process_primitive = previous
        jit.check_keys(None)


# ---------------------------------------------------------------------------------------------
# The public checks


def check_key_reuse_jaxpr(jaxpr: Jaxpr | ClosedJaxpr) -> None:
    """Raise `KeyReuseError` if the program uses a key twice (or a loop in it draws from the
    same key at every iteration)."""
    jaxpr_signature(jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr)


jaxpr_type_signature = jaxpr_signature


def function_type_signature(fun: Callable, *args) -> KeyReuseSignature:
    """The signature of `fun` traced on `args` (a pytree of arrays), its inputs numbered in
    the flattened order of `args`, then the values it closes over. Key uses are recorded
    while it is traced whether or not `config.debug_key_reuse` is on."""
    from funcgrad import tree_util
    from funcgrad.config import _scoped
    from funcgrad.interpreters.staging import abstractify, trace_to_jaxpr

    leaves, in_tree = tree_util.tree_flatten(args)

    def flat_fun(*flat):
        return fun(*tree_util.tree_unflatten(in_tree, flat))

    with _scoped("debug_key_reuse", True):
        closed, _ = trace_to_jaxpr(flat_fun, [abstractify(x) for x in leaves], "key reuse check")
    return jaxpr_signature(closed.jaxpr)


def check_key_reuse(fun: Callable, /, *args) -> None:
    """Trace `fun` on `args` and raise `KeyReuseError` if it uses a key twice."""
    function_type_signature(fun, *args)


def consume(key):
    """Record `key` as used up (as a draw from it would), and return it."""
    from funcgrad.config import config
    from funcgrad.lax.random_bits import random_consume

    if config.debug_key_reuse:
        random_consume(key, "key_reuse.consume")
    return key
