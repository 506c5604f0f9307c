"""The sparse rules of primitives that hold programs: jit, checkpoint, cond, while and scan.

Each stages its programs again over the flattened operands (sparse arrays become their leaves)
with their sparse rules, and binds the same primitive, so a jitted function or a loop stays one
equation. A loop's carry must keep its structure through the body: the same format and number
of stored elements. A body that only loses the promises of sorted or unique indices is staged
again with them dropped from the carry; a carry that enters dense is kept dense.
"""

from __future__ import annotations

from collections.abc import Callable

from funcgrad import core, tree_util
from funcgrad.core import Primitive
from funcgrad.experimental.sparse._interpreter import (
    PROGRAM_RULES,
    flattened,
    forget_order,
    hoisted,
    is_sparse,
    sparse_program,
)
from funcgrad.ir import ClosedJaxpr
from funcgrad.lax.control_flow.conditionals import cond_p
from funcgrad.lax.control_flow.loops import while_p
from funcgrad.lax.control_flow.scan import scan_p
from funcgrad.transforms.checkpoint import checkpoint_p
from funcgrad.transforms.jit import jit_p


def _call(primitive: Primitive) -> Callable:
    """The rule of a primitive that calls its program `jaxpr` on its operands (jit,
    checkpoint): the same call of the program made sparse."""

    def rule(*operands, jaxpr: ClosedJaxpr, **params) -> list:
        leaves, in_tree, in_avals = flattened(operands)
        name = params.get("name", primitive.name)
        program, out_tree = sparse_program(jaxpr, in_tree, in_avals, name)
        if "name" in params:
            params = {**params, "name": f"sparsify({name})"}
        outs = primitive.bind(*leaves, jaxpr=program, **params)
        return tree_util.tree_unflatten(out_tree, outs)

    return rule


def _cond(index, *operands, branches: tuple[ClosedJaxpr, ...]) -> list:
    if is_sparse(index):
        raise NotImplementedError("sparsify: cond with a sparse branch index")
    leaves, in_tree, in_avals = flattened(operands)
    for forget in (False, True):
        programs = [
            sparse_program(branch, in_tree, in_avals, f"branch {i}", forget)
            for i, branch in enumerate(branches)
        ]
        layouts = [
            (out_tree, tuple((a.shape, a.dtype) for a in program.out_avals))
            for program, out_tree in programs
        ]
        if all(layout == layouts[0] for layout in layouts):
            outs = cond_p.bind(index, *leaves, branches=tuple(program for program, _ in programs))
            return tree_util.tree_unflatten(programs[0][1], outs)
    raise NotImplementedError(
        "sparsify: the branches of a cond give results of different sparse structures "
        f"(sparse or dense, and the number of stored elements), {[t for t, _ in layouts]}; "
        "make them agree, for instance with .todense() or sum_duplicates(nse=...)"
    )


class _LoopBody:
    """A loop body made sparse so that its carry keeps its structure: the program over the
    leaves of (consts, carry, per-iteration inputs), hoisted, and the carry it runs on."""

    def __init__(self, body: ClosedJaxpr, consts, carry, xs=(), what: str = "while_loop"):
        carry = list(carry)
        for _ in range(2):
            failure = self._stage(body, list(consts), carry, list(xs), what)
            if failure is None:
                return
            carry_tree, out_trees = failure
            # A carry the body makes dense is dense from the start.
            densified = [
                i
                for i, (x, out) in enumerate(zip(carry, out_trees))
                if is_sparse(x) and tree_util.treedef_is_leaf(out)
            ]
            if not densified:
                break
            carry = [x.todense() if i in densified else x for i, x in enumerate(carry)]
        raise NotImplementedError(
            f"sparsify: the body of a {what} changes the structure of its carry from "
            f"{tree_util.treedef_tuple(carry_tree.children())} to "
            f"{tree_util.treedef_tuple(out_trees)} (sparse arrays must keep "
            "their format and number of stored elements); make it keep them, for instance "
            "with .sum_duplicates(nse=...) or .todense()"
        )

    def _stage(self, body, consts: list, carry: list, xs: list, what: str):
        """Stage the body on `carry` (keeping dense carries dense), and then without the
        promises of sorted and unique indices; None when one keeps the carry's structure, else
        the carry's structure and the body's first try's."""
        densify = frozenset(i for i, x in enumerate(carry) if not is_sparse(x))
        n_xs = len(tree_util.tree_leaves(xs))
        failure = None
        for forget in (False, True):
            carry_in = [forget_order(x) for x in carry] if forget else carry
            leaves, in_tree, in_avals = flattened([*consts, *carry_in, *xs])
            # Each iteration sees one row of every per-iteration input.
            n_fixed = len(leaves) - n_xs
            in_avals = in_avals[:n_fixed] + tuple(
                core.ShapedArray(a.shape[1:], a.dtype, a.weak_type) for a in in_avals[n_fixed:]
            )
            program, out_tree = sparse_program(body, in_tree, in_avals, what, forget, densify)
            carry_leaves, carry_tree = tree_util.tree_flatten(carry_in)
            out_trees = out_tree.children()[: len(carry)]
            expected = [(x.shape, x.dtype) for x in carry_leaves]
            got = [(a.shape, a.dtype) for a in program.out_avals[: len(carry_leaves)]]
            if out_trees == carry_tree.children() and got == expected:
                self.program, self.consts = hoisted(program)
                self.out_tree = out_tree
                self.carry, self.forget = carry_in, forget
                self.carry_leaves = carry_leaves
                self.leading = leaves[: n_fixed - len(carry_leaves)]
                self.xs_leaves = leaves[n_fixed:]
                return None
            failure = failure or (carry_tree, out_trees)
        return failure

    @property
    def num_consts(self) -> int:
        return len(self.consts) + len(self.leading)


def _while(*operands, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int) -> list:
    cond_consts = operands[:cond_nconsts]
    body_consts = operands[cond_nconsts : cond_nconsts + body_nconsts]
    carry = operands[cond_nconsts + body_nconsts :]
    body = _LoopBody(body_jaxpr, body_consts, carry)
    leaves, in_tree, in_avals = flattened([*cond_consts, *body.carry])
    cond_program, _ = sparse_program(cond_jaxpr, in_tree, in_avals, "while_cond", body.forget)
    cond_program, cond_hoisted = hoisted(cond_program)
    cond_leading = leaves[: len(leaves) - len(body.carry_leaves)]
    outs = while_p.bind(
        *cond_hoisted,
        *cond_leading,
        *body.consts,
        *body.leading,
        *body.carry_leaves,
        cond_jaxpr=cond_program,
        body_jaxpr=body.program,
        cond_nconsts=len(cond_hoisted) + len(cond_leading),
        body_nconsts=body.num_consts,
    )
    return tree_util.tree_unflatten(body.out_tree, outs)


def _scan(*operands, jaxpr, num_consts: int, num_carry: int, **params) -> list:
    consts = operands[:num_consts]
    carry = operands[num_consts : num_consts + num_carry]
    xs = operands[num_consts + num_carry :]
    for x in xs:
        if is_sparse(x) and x.n_batch == 0:
            raise NotImplementedError(
                f"sparsify: scan over a sparse array {x!r} needs its leading dimension to be a "
                "batch dimension, whose rows the iterations take; convert it with "
                "update_layout(n_batch=1) (which stores its elements once per row) or "
                ".todense() first"
            )
    body = _LoopBody(jaxpr, consts, carry, xs, "scan")
    outs = scan_p.bind(
        *body.consts,
        *body.leading,
        *body.carry_leaves,
        *body.xs_leaves,
        jaxpr=body.program,
        num_consts=body.num_consts,
        num_carry=len(body.carry_leaves),
        **params,
    )
    # The stacked outputs' leaves gain a leading dimension, which sparse arrays take as a
    # batch dimension.
    return tree_util.tree_unflatten(body.out_tree, outs)


PROGRAM_RULES.update(
    {
        "jit": _call(jit_p),
        "checkpoint": _call(checkpoint_p),
        "cond": _cond,
        "while": _while,
        "scan": _scan,
    }
)
