"""funcgrad.experimental.sparse: sparse arrays in the batched coordinate (BCOO) and batched
compressed-row (BCSR) formats, and the older matrix formats COO, CSR and CSC built on them.

A `BCOO` array stores only its specified elements: their values (`data`) and their indices
(`indices`). It is a pytree, and every operation on it is made of gathers, scatters and
products, so jit, grad, vmap and the compiled backends apply to code that uses it.
"""

from funcgrad.experimental.sparse import linalg
from funcgrad.experimental.sparse.ad import grad, jacfwd, jacobian, jacrev, value_and_grad
from funcgrad.experimental.sparse.api import empty, eye, todense
from funcgrad.experimental.sparse.bcoo import (
    BCOO,
    bcoo_extract,
    bcoo_fromdense,
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_sort_indices,
    bcoo_sum_duplicates,
    bcoo_todense,
    bcoo_transpose,
)
from funcgrad.experimental.sparse.bcoo_products import (
    bcoo_conv_general_dilated,
    bcoo_dot_general,
    bcoo_dot_general_sampled,
    bcoo_multiply_dense,
    bcoo_multiply_sparse,
    bcoo_spdot_general,
)
from funcgrad.experimental.sparse.bcoo_structure import (
    SparseEfficiencyError,
    SparseEfficiencyWarning,
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    bcoo_dynamic_slice,
    bcoo_gather,
    bcoo_rev,
    bcoo_slice,
    bcoo_squeeze,
    bcoo_update_layout,
)
from funcgrad.experimental.sparse.bcsr import (
    BCSR,
    bcsr_broadcast_in_dim,
    bcsr_concatenate,
    bcsr_dot_general,
    bcsr_extract,
    bcsr_fromdense,
    bcsr_sum_duplicates,
    bcsr_todense,
)
from funcgrad.experimental.sparse.coo import (
    COO,
    coo_fromdense,
    coo_matmat,
    coo_matvec,
    coo_todense,
)
from funcgrad.experimental.sparse.csr import (
    CSC,
    CSR,
    csr_fromdense,
    csr_matmat,
    csr_matvec,
    csr_todense,
)
from funcgrad.experimental.sparse.random import random_bcoo
from funcgrad.experimental.sparse.transform import sparsify

__all__ = [
    "BCOO",
    "BCSR",
    "COO",
    "CSC",
    "CSR",
    "SparseEfficiencyError",
    "SparseEfficiencyWarning",
    "bcoo_broadcast_in_dim",
    "bcoo_concatenate",
    "bcoo_conv_general_dilated",
    "bcoo_dot_general",
    "bcoo_dot_general_sampled",
    "bcoo_dynamic_slice",
    "bcoo_extract",
    "bcoo_fromdense",
    "bcoo_gather",
    "bcoo_multiply_dense",
    "bcoo_multiply_sparse",
    "bcoo_reduce_sum",
    "bcoo_reshape",
    "bcoo_rev",
    "bcoo_slice",
    "bcoo_sort_indices",
    "bcoo_spdot_general",
    "bcoo_squeeze",
    "bcoo_sum_duplicates",
    "bcoo_todense",
    "bcoo_transpose",
    "bcoo_update_layout",
    "bcsr_broadcast_in_dim",
    "bcsr_concatenate",
    "bcsr_dot_general",
    "bcsr_extract",
    "bcsr_fromdense",
    "bcsr_sum_duplicates",
    "bcsr_todense",
    "coo_fromdense",
    "coo_matmat",
    "coo_matvec",
    "coo_todense",
    "csr_fromdense",
    "csr_matmat",
    "csr_matvec",
    "csr_todense",
    "empty",
    "eye",
    "grad",
    "jacfwd",
    "jacobian",
    "jacrev",
    "linalg",
    "random_bcoo",
    "sparsify",
    "todense",
    "value_and_grad",
]
