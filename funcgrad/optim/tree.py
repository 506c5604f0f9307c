"""`tree_utils` under short names (`optim.tree.add` for `optim.tree_utils.tree_add`), as
Optax's `optax.tree` namespace gives them."""

from funcgrad.optim import tree_utils as _tree_utils

add = _tree_utils.tree_add
add_scale = _tree_utils.tree_add_scale
allclose = _tree_utils.tree_allclose
batch_shape = _tree_utils.tree_batch_shape
bias_correction = _tree_utils.tree_bias_correction
cast = _tree_utils.tree_cast
cast_like = _tree_utils.tree_cast_like
clip = _tree_utils.tree_clip
conj = _tree_utils.tree_conj
div = _tree_utils.tree_div
dtype = _tree_utils.tree_dtype
full_like = _tree_utils.tree_full_like
get = _tree_utils.tree_get
get_all_with_path = _tree_utils.tree_get_all_with_path
map_params = _tree_utils.tree_map_params
max = _tree_utils.tree_max
min = _tree_utils.tree_min
mul = _tree_utils.tree_mul
norm = _tree_utils.tree_norm
ones_like = _tree_utils.tree_ones_like
random_like = _tree_utils.tree_random_like
real = _tree_utils.tree_real
scale = _tree_utils.tree_scale
set = _tree_utils.tree_set
size = _tree_utils.tree_size
split_key_like = _tree_utils.tree_split_key_like
sub = _tree_utils.tree_sub
sum = _tree_utils.tree_sum
unwrap_random_key_data = _tree_utils.tree_unwrap_random_key_data
update_infinity_moment = _tree_utils.tree_update_infinity_moment
update_moment = _tree_utils.tree_update_moment
update_moment_per_elem_norm = _tree_utils.tree_update_moment_per_elem_norm
vdot = _tree_utils.tree_vdot
where = _tree_utils.tree_where
zeros_like = _tree_utils.tree_zeros_like

__all__ = [
    "add",
    "add_scale",
    "allclose",
    "batch_shape",
    "bias_correction",
    "cast",
    "cast_like",
    "clip",
    "conj",
    "div",
    "dtype",
    "full_like",
    "get",
    "get_all_with_path",
    "map_params",
    "max",
    "min",
    "mul",
    "norm",
    "ones_like",
    "random_like",
    "real",
    "scale",
    "set",
    "size",
    "split_key_like",
    "sub",
    "sum",
    "unwrap_random_key_data",
    "update_infinity_moment",
    "update_moment",
    "update_moment_per_elem_norm",
    "vdot",
    "where",
    "zeros_like",
]
