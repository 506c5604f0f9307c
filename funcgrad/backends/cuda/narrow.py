"""Products of few columns as kernels of funcgrad's own, not cuBLAS calls.

A GEMM whose result has a handful of columns (a classifier's 10 outputs: 256 x 10 from a sum
of 1,024 terms, or its weight gradient, 1,024 x 10 from 256) is a few multiply-adds per
element read: its time is launches and passes over memory. cuBLAS runs such a product as two
kernels, a SIMT GEMM split over the sum and then the split's reduction (the MLP step's three
took 17.3 µs on an H100, XLA's 10.4). Here it is one kernel: each block takes a few rows of
the result; its threads split each row's sum, every thread keeping a running sum per column
for its share of the terms, and the block folds them pairwise in shared memory, in a fixed
order. One pass over the wide operand, whichever way it is stored:

- stored by rows (its sum's terms contiguous), a block takes one row and its threads split
  the terms: neighbouring threads read neighbouring terms;
- stored transposed (its rows contiguous), a block takes 32 rows, a warp's lanes one each,
  and its warps split the terms: a warp reads 32 neighbouring elements per term.
"""

from __future__ import annotations

import numpy as np

from funcgrad.backends.cuda.render import LAUNCH_BLOCK, CudaKernel, memory_type
from funcgrad.compiler.schedule import GemmStep

# Results of at most this many columns, float32 or float64, one product (no batch), of at
# most MAX_TERMS multiply-adds a column (rows times terms: beyond, cuBLAS's split of the
# sums over the whole GPU wins).
MAX_COLUMNS = 16
MAX_TERMS = 1 << 24
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def narrow_gemm(step: GemmStep, name: str, hosts: dict) -> CudaKernel | None:
    """`step` as one kernel (its operands' and result's buffers its parameters), or None where
    cuBLAS takes it. An update's addend is read where it is: in the result's own memory where
    the result lives in it (`hosts`: donated), so that one parameter names that memory."""
    m, n, k = step.m, step.n, step.k
    if step.batch != 1 or n > MAX_COLUMNS or step.out.dtype not in DTYPES:
        return None
    if m * k > MAX_TERMS or m * n * k == 0:
        return None
    t = memory_type(step.out.dtype)
    rows = 32 if step.transpose_lhs else 1  # (rows a block takes: see the module's notes)
    lhs, rhs, out = step.lhs.name, step.rhs.name, step.out.name
    addend = step.addend
    if addend is not None and hosts.get(step.out) is addend:
        addend = step.out
    total = "part[q]"
    if addend is not None:
        total = f"({t}){step.alpha!r} * part[q] + ({t}){step.beta!r} * {addend.name}[at]"
    a = f"{lhs}[p * {m}LL + i]" if step.transpose_lhs else f"{lhs}[i * {k}LL + p]"
    b = f"{rhs}[j * {k}LL + p]" if step.transpose_rhs else f"{rhs}[p * {n}LL + j]"
    groups = -(-m // rows)
    # Thread t holds row t % rows's sums over terms t / rows, t / rows + lanes, ...; the
    # threads of each row then fold their sums pairwise in shared memory, halving the
    # threads at each step (a block is a power of two threads, `rows` or more).
    body = f"""  __shared__ {t} part[{LAUNCH_BLOCK * n}];
  const int lanes = blockDim.x / {rows};
  const int first = threadIdx.x / {rows};
  for (long long g = blockIdx.x; g < {groups}LL; g += gridDim.x) {{
    const long long i = g * {rows}LL + threadIdx.x % {rows};
    {t} sums[{n}];
    for (int j = 0; j < {n}; ++j) sums[j] = 0;
    if (i < {m}LL) {{
      for (long long p = first; p < {k}LL; p += lanes) {{
        const {t} a = {a};
        for (int j = 0; j < {n}; ++j) sums[j] += a * {b};
      }}
    }}
    for (int j = 0; j < {n}; ++j) part[threadIdx.x * {n} + j] = sums[j];
    __syncthreads();
    for (int half = lanes / 2; half > 0; half /= 2) {{
      if (first < half) {{
        for (int j = 0; j < {n}; ++j) {{
          part[threadIdx.x * {n} + j] += part[(threadIdx.x + half * {rows}) * {n} + j];
        }}
      }}
      __syncthreads();
    }}
    for (int q = threadIdx.x; q < {rows * n}; q += blockDim.x) {{
      const long long row = g * {rows}LL + q / {n}, at = row * {n}LL + q % {n};
      if (row < {m}LL) {out}[at] = {total};
    }}
    __syncthreads();  // (the next rows' sums go where these were)
  }}"""
    operands = [step.lhs, step.rhs] + ([addend] if addend not in (None, step.out) else [])
    operands = list(dict.fromkeys(operands))  # (x @ x.T reads one buffer)
    return CudaKernel(
        name=name,
        params=[*operands, step.out],
        const_params=[True] * len(operands) + [False],
        threads=groups,
        body=body,
        row_width=k,  # (a block each group of rows, of the launcher's size)
        shared_bytes=LAUNCH_BLOCK * n * step.out.dtype.itemsize,
    )
