"""funcgrad: composable transformations (grad, vmap, jit) of pure functions over arrays."""

from funcgrad import (
    checkpoints,
    custom_batching,
    custom_derivatives,
    data,
    debug,
    distributed,
    dlpack,
    dtypes,
    experimental,
    flatten_util,
    image,
    lax,
    nn,
    numpy,
    ops,
    optim,
    random,
    scipy,
    sharding,
    test_util,
    testing,
    tree,
    tree_util,
    version,
    viz,
)
from funcgrad.array import Array, Device, block_until_ready, device_get, device_put
from funcgrad.caches import clear_caches
from funcgrad.callbacks import pure_callback
from funcgrad.config import (
    checking_leaks,
    config,
    debug_infs,
    debug_nans,
    default_matmul_precision,
    disable_jit,
    enable_x64,
    log_compiles,
)
from funcgrad.core import ShapedArray, ShapeDtypeStruct
from funcgrad.devices import (
    default_backend,
    default_device,
    device_count,
    devices,
    local_device_count,
    local_devices,
    process_count,
    process_index,
)
from funcgrad.environment import print_environment_info
from funcgrad.sharding import P, make_mesh, set_mesh
from funcgrad.transforms.autodiff import (
    fwd_and_bwd,
    grad,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    linearize,
    value_and_grad,
    vjp,
)
from funcgrad.transforms.checkpoint import checkpoint, checkpoint_policies, remat
from funcgrad.transforms.custom_derivatives import custom_gradient, custom_jvp, custom_vjp
from funcgrad.transforms.jit import jit
from funcgrad.transforms.linear_transpose import linear_transpose
from funcgrad.transforms.make_jaxpr import eval_shape, make_jaxpr
from funcgrad.transforms.pmap import pmap
from funcgrad.transforms.shard_map import shard_map
from funcgrad.transforms.tracing_tools import (
    closure_convert,
    ensure_compile_time_eval,
    named_call,
    named_scope,
    typeof,
)
from funcgrad.transforms.vmap import vmap

jacobian = jacrev
float0 = dtypes.float0

__version__ = version.__version__
__version_info__ = version.__version_info__

__all__ = [
    "print_environment_info",
    "typeof",
    "named_scope",
    "named_call",
    "ensure_compile_time_eval",
    "closure_convert",
    "clear_caches",
    "Array",
    "Device",
    "ShapeDtypeStruct",
    "ShapedArray",
    "block_until_ready",
    "checkpoint",
    "config",
    "checkpoint_policies",
    "checking_leaks",
    "custom_batching",
    "custom_derivatives",
    "custom_gradient",
    "custom_jvp",
    "custom_vjp",
    "debug",
    "debug_infs",
    "debug_nans",
    "default_backend",
    "default_device",
    "default_matmul_precision",
    "device_count",
    "device_get",
    "device_put",
    "devices",
    "disable_jit",
    "distributed",
    "dlpack",
    "dtypes",
    "enable_x64",
    "eval_shape",
    "experimental",
    "flatten_util",
    "float0",
    "fwd_and_bwd",
    "grad",
    "hessian",
    "image",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jit",
    "jvp",
    "linearize",
    "local_device_count",
    "local_devices",
    "lax",
    "linear_transpose",
    "log_compiles",
    "make_jaxpr",
    "nn",
    "numpy",
    "ops",
    "P",
    "make_mesh",
    "pmap",
    "set_mesh",
    "shard_map",
    "sharding",
    "process_count",
    "process_index",
    "pure_callback",
    "random",
    "remat",
    "scipy",
    "test_util",
    "tree",
    "tree_util",
    "value_and_grad",
    "version",
    "vmap",
    "vjp",
]
