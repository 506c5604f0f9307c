"""The stages every compiled backend shares, from a jaxpr to a scheduled program and its
memory plan; a backend renders and runs what they produce."""

from __future__ import annotations

import functools

from funcgrad.compiler import lapack, parallel, passes, radix_sort, rows, special, tiling
from funcgrad.compiler.complex_lowering import lower_complex, mentions_complex
from funcgrad.compiler.donation import carry_readers_first
from funcgrad.compiler.edges import split_at_edges
from funcgrad.compiler.fusion import folds_along_memory, updates_in_windows
from funcgrad.compiler.horizontal import merge_maps
from funcgrad.compiler.index_algebra import (
    CPU_ROW_WORK,
    coalesce_loops,
    collapse_row_nests,
    merge_fold_nests,
    simplify_offsets,
)
from funcgrad.compiler.memory import MemoryPlan, plan_memory
from funcgrad.compiler.schedule import (
    GEMM_DTYPES,
    KernelStep,
    Program,
    all_steps,
    column_folds_with_maps,
    schedule,
    vector_products_fuse,
)
from funcgrad.ir import ClosedJaxpr


def plan(
    closed: ClosedJaxpr,
    reductions: parallel.ReductionSplit | None = None,
    gemm_dtypes: tuple = GEMM_DTYPES,
    contraction_dtypes: tuple = (),
    short_row_group: int = rows.MAX_GROUP,
) -> tuple[ClosedJaxpr, Program, MemoryPlan]:
    """The optimized jaxpr, its program of steps and the program's memory plan. Large
    whole-array reductions become partial folds that may run on threads, as `reductions`
    says (`parallel.split_reductions`), and so, for a GPU, do reductions over a leading axis
    with few columns (`parallel.columns_outer`), after a GPU's kernels written for one thread
    (scatters, sorts, whole-array argmax and argmin, cumulative ops along one line) are
    spread over threads (`parallel.spread_one_thread_kernels`), its perfect loop nests are
    made one loop where that is plain or spreads a kernel over more threads
    (`index_algebra.coalesce_loops`) and its products of few results with long sums are
    split into parts (`parallel.split_products`). Products in `gemm_dtypes` may run as the
    backend's library GEMMs, and convolutions in `contraction_dtypes` as contraction kernels
    (`schedule.schedule`); up to `short_row_group` kernels over short rows
    share a loop (`rows.short_row_groups`), GEMMs make the updates their products feed
    (`schedule._updates`), and, for a GPU, a map kernel makes a fold down the columns of a
    value it stores where that fold runs on blocks (`schedule.column_folds_with_maps`),
    while a CPU's reductions read in order along a reduced axis (through a transpose) fold
    along it (`fusion.folds_along_memory`), its sorts of long lines are radix sorts
    (`radix_sort.sorts_by_radix`), its products of a matrix and a vector fused kernels
    (`schedule.vector_products_fuse`), its small dynamic updates written over their windows
    alone (`fusion.updates_in_windows`), its float32 erf_inv computed in float32
    (`special.erf_inv_in_float32`) and its eigendecompositions of small real matrices by
    Jacobi's rotations (`lapack.small_eighs_rotate`). Every
    kernel's offsets are then simplified with its loops' ranges, a CPU's nests of folds made
    one loop (`index_algebra.merge_fold_nests`) and its transposing nests walked in tiles
    (`tiling`), nests of rows made one loop over the rows (`index_algebra`), and a CPU's
    innermost loops split where their comparisons change (`edges`); last, a
    GPU's independent map kernels are merged into one launch (`horizontal.merge_maps`), and
    a CPU's loop bodies read their carries before they write them where they may
    (`donation.carry_readers_first`)."""
    optimized = passes.optimize(closed)
    if mentions_complex(optimized.jaxpr):
        # Complex values compute as pairs of reals, laid out as the caller's buffers are.
        optimized = passes.optimize(lower_complex(optimized))
    gpu = reductions is not None and bool(reductions.column_threads)
    on_blocks = functools.partial(parallel.column_fold_on_blocks, split=reductions) if gpu else None
    with (
        folds_along_memory.chosen(not gpu),
        radix_sort.sorts_by_radix.chosen(not gpu),
        special.erf_inv_in_float32.chosen(not gpu),
        vector_products_fuse.chosen(not gpu),
        updates_in_windows.chosen(not gpu),
        lapack.small_eighs_rotate.chosen(not gpu),
        rows.short_row_groups.chosen(short_row_group),
        column_folds_with_maps.chosen(on_blocks),
    ):
        program = schedule(optimized, gemm_dtypes, contraction_dtypes)
    if reductions is not None and reductions.column_threads:
        parallel.spread_one_thread_kernels(program)
        for step in all_steps(program):
            if isinstance(step, KernelStep):
                coalesce_loops(step.kernel, reductions.column_threads)
    if reductions is not None:
        parallel.split_reductions(program, reductions)
        if reductions.column_threads:
            parallel.columns_outer(program, reductions)
            parallel.split_products(program)  # (last: its sums of parts are split enough)
    for step in all_steps(program):
        if isinstance(step, KernelStep):
            simplify_offsets(step.kernel)
            if not gpu:
                merge_fold_nests(step.kernel)
                tiling.tile_transposes(step.kernel)
            collapse_row_nests(step.kernel, 1 if gpu else CPU_ROW_WORK)
            if not gpu:
                split_at_edges(step.kernel)
    if reductions is not None and reductions.column_threads:
        merge_maps(program)
    if not gpu:
        carry_readers_first(program)
    return optimized, program, plan_memory(program)
