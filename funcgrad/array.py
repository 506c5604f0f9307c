"""The concrete, immutable array that eager execution produces, and the devices it lives on."""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from funcgrad import dtypes, transfer_guards
from funcgrad.core import ShapedArray, short_dtype_name


class Device:
    """A place where arrays live: the host CPU, or one of its virtual devices
    (`funcgrad.devices`), owned by the process `process_index`."""

    __slots__ = ("platform", "id", "process_index")

    def __init__(self, platform: str, id: int, process_index: int = 0):
        self.platform = platform
        self.id = id
        self.process_index = process_index

    @property
    def device_kind(self) -> str:
        return self.platform

    def memory_stats(self) -> dict | None:
        """None: a CPU device's memory is the process's, as JAX's CPU devices report it."""
        return None

    def __repr__(self) -> str:
        return f"{self.platform.capitalize()}Device(id={self.id})"


CPU = Device("cpu", 0)


class GpuDevice(Device):
    """A CUDA GPU (`funcgrad.devices("gpu")`), or an emulated GPU that runs the CUDA
    backend's code on the host (`funcgrad.devices("cuda_emulator")`); `runtime` launches its
    kernels and moves its memory (`backends/cuda/executable.py`)."""

    __slots__ = ("runtime",)

    def __init__(self, id: int, runtime):
        self.platform = "gpu"
        self.id = id
        self.runtime = runtime

    @property
    def process_index(self) -> int:
        """A process lists its own GPUs only, made before or after it joined its MPI job."""
        from funcgrad import distributed

        return distributed.process_index()

    @property
    def device_kind(self) -> str:
        return self.runtime.name

    @property
    def backend(self) -> str:
        """The jit backend that compiles for this device."""
        return self.runtime.backend

    def memory_stats(self) -> dict:
        """Bytes of the device's memory: `bytes_limit` (all of it), `bytes_in_use` (arrays,
        programs' working memory and constants, in CuPy's pool), `bytes_reserved` (what the
        pool holds, free blocks included), `bytes_free` (left outside the pool), and
        `bytes_held_by_replays` (buffers that jitted programs' CUDA graphs keep between
        calls, up to an eighth of the device: they go with their programs). An emulated GPU
        knows only the first and the last."""
        return self.runtime.memory_stats()

    def __repr__(self) -> str:
        return f"{'Emulated' if self.backend == 'cuda_emulator' else ''}CudaDevice(id={self.id})"


class _Placement(threading.local):
    # This thread's default device while `devices.default_device` says so, and the CPU in
    # the threads running pmap's shards; None leaves it to the default platform.
    device: Device | None = None


placement = _Placement()


def default_gpu() -> GpuDevice | None:
    """The GPU that new arrays and computations without a GPU operand go to in this thread:
    the default platform's (`DeviceValue.default`), unless `placement` names a device; None
    where that is the CPU."""
    device = placement.device
    if device is None:
        return DeviceValue.default
    return device if isinstance(device, GpuDevice) else None


def on_gpu(values) -> bool:
    """Whether a computation on array values `values` runs on a GPU: one of them is there, or
    this thread's default device is a GPU. Callers test `DeviceValue.made` first, so that a
    process that never placed an array on a GPU pays for nothing more."""
    return any(type(value) is DeviceValue for value in values) or default_gpu() is not None


class _Sized:
    """`ndim` and `size` from a `shape`, for the values that are not NumPy arrays."""

    __slots__ = ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


class DeviceValue(_Sized):
    """An array's value in a GPU's memory: `storage`, a flat buffer on `device` (a CuPy array
    on a GPU, bfloat16 held as its bits; host memory on the emulated GPU), with the array's
    shape and dtype. Reading it as a NumPy array copies it to the host, as `np.asarray` of a
    GPU array does."""

    __slots__ = ("storage", "shape", "dtype", "device", "_parts", "_host")
    # Whether any array has been placed on a GPU in this process, or a GPU is the default
    # device: until then, eager operations and jit calls skip looking for GPU operands.
    made = False
    # The GPU that new arrays go to, and that operations and jitted calls without a GPU
    # operand run on, when the default platform is a GPU (`devices.use_platform`); else None.
    # Read it through `default_gpu()`.
    default: GpuDevice | None = None

    def __init__(self, storage, shape: tuple[int, ...], dtype: np.dtype, device: GpuDevice):
        self.storage = storage
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self._parts = None  # (a stacked value's, until its storage is gathered: `stacked`)
        self._host = None  # (the copy to the host `copy_to_host_async` started: its wait)
        DeviceValue.made = True

    @classmethod
    def stacked(cls, parts: list[DeviceValue]) -> DeviceValue:
        """The values `parts` (each on its own GPU) stacked along a new leading axis, on the
        first part's GPU. Its storage is gathered there when first read: pmap's results keep
        their shards on their devices, and most are only ever read shard by shard."""
        value = cls.__new__(cls)
        value.shape = (len(parts),) + parts[0].shape
        value.dtype = parts[0].dtype
        value.device = parts[0].device
        value._parts = parts
        value._host = None
        return value

    def __getattr__(self, name: str):
        # Reached only for an unset slot: the storage of a stacked value, not gathered yet.
        if name != "storage" or self._parts is None:
            raise AttributeError(name)
        host = [part.device.runtime.download(part.storage) for part in self._parts]
        self.storage = self.device.runtime.upload(np.concatenate(host))
        return self.storage

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __array__(self, dtype=None, copy=None):
        if self.dtype == dtypes.float0:  # (no data: its storage is a placeholder byte each)
            host = np.zeros(self.shape, self.dtype)
            return host if dtype is None else host.astype(dtype)
        if transfer_guards.active:
            transfer_guards.guard("device_to_host", self.shape, self.dtype, "the host")
        host = (
            self._host() if self._host is not None else self.device.runtime.download(self.storage)
        )
        host = (host.view(self.dtype) if host.dtype != self.dtype else host).reshape(self.shape)
        return host if dtype is None else host.astype(dtype)

    def item(self, *index):
        return np.asarray(self).item(*index)

    def __bool__(self) -> bool:
        return bool(np.asarray(self))

    def __int__(self) -> int:
        return int(np.asarray(self))

    def __float__(self) -> float:
        return float(np.asarray(self))

    def __complex__(self) -> complex:
        return complex(np.asarray(self))


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Place a pytree of arrays on `device`: the host CPU, a GPU, or the emulated GPU; by
    default, the default platform's first device. Arrays already there stay as they are.
    Given a sharding (or a tree prefix of them), the arrays are laid out as it says
    (`funcgrad.sharding`).

    `src`, where `x` lives, is not needed (arrays know their device). Donation is a hint that
    funcgrad does not take here: `x` stays usable. With `may_alias=False` (or a tree prefix
    of bools) every array comes back a distinct array, even one already in place."""
    if donate is True and may_alias is True:
        raise ValueError("device_put: may_alias and donate cannot both be True")
    if not isinstance(donate, bool):
        _per_leaf_flags(donate, x, "donate")
    if transfer_guards.active:
        with transfer_guards.explicit():
            out = _put(x, device)
    else:
        out = _put(x, device)
    if may_alias is None or may_alias is True:
        return out
    return _copied_where_aliased(x, out, may_alias)


def _per_leaf_flags(flag, x, name: str) -> list:
    """`donate` or `may_alias` (a bool, None, or a tree prefix of them), one per leaf of `x`."""
    from funcgrad.sharding import broadcast_prefix

    def is_flag(v) -> bool:
        return v is None or isinstance(v, bool)

    return broadcast_prefix(flag, x, is_flag, f"device_put's {name}", "bool", "its operand")


def _copied_where_aliased(x, out, may_alias) -> list:
    """`out` with each array that is the very array of `x` it came from copied, where
    `may_alias` is False for it."""
    from funcgrad import tree_util

    flags = _per_leaf_flags(may_alias, x, "may_alias")
    leaves, tree = tree_util.tree_flatten(out)
    copied = [
        leaf.copy() if flag is False and type(leaf) is Array and leaf is original else leaf
        for leaf, original, flag in zip(leaves, tree_util.tree_leaves(x), flags)
    ]
    return tree_util.tree_unflatten(tree, copied)


def _put(x, device):
    from funcgrad import sharding, tree_util
    from funcgrad.devices import devices
    from funcgrad.lax.base import asarray

    if device is not None and not isinstance(device, Device):
        return sharding.put(x, device)
    if device is None:
        device = default_gpu()
    if device is None:
        return tree_util.tree_map(_on_host, x)
    if not isinstance(device, GpuDevice) and device not in devices("cpu"):
        raise ValueError(f"unknown device {device!r}; available: {devices('cpu')}")
    if transfer_guards.active and isinstance(device, GpuDevice):
        with transfer_guards.guarded():  # (host data is guarded where it is copied to the GPU)
            x = tree_util.tree_map(asarray, x)
    return sharding.put(x, sharding.SingleDeviceSharding(device))


def _on_host(leaf):
    from funcgrad.core import Tracer
    from funcgrad.lax.base import asarray

    return leaf if isinstance(leaf, Tracer) else to_host(asarray(leaf))


def device_get(x):
    """A pytree with every array read into host memory as a NumPy array (a GPU's copied
    back); other leaves as they are."""
    from funcgrad import tree_util

    def get(leaf):
        return np.asarray(leaf) if type(leaf) is Array else leaf

    if transfer_guards.active:
        with transfer_guards.explicit():
            return tree_util.tree_map(get, x)
    return tree_util.tree_map(get, x)


def on_default_device(array):
    """`array` (made on the host) where new arrays live: the default GPU when there is one."""
    device = default_gpu()
    if device is None or type(array) is not Array:
        return array
    return put_on_gpu(array, device)


def put_on_gpu(array: Array, device: GpuDevice) -> Array:
    value = array._value
    if type(value) is DeviceValue and value.device is device:
        return array
    return Array(place(value, device), array.weak_type)


def place(value, device: GpuDevice) -> DeviceValue:
    """A copy of `value` (host data, or a value on another GPU) on GPU `device`."""
    if transfer_guards.active:
        transfer_guards.to_device(value, device)
        with transfer_guards.guarded():
            host = np.asarray(value)
    else:
        host = np.asarray(value)
    flat = np.ascontiguousarray(host).reshape(-1)  # (which makes a 0-d value 1-d)
    if host.dtype == dtypes.bfloat16 or dtypes.is_narrow(host.dtype):  # CuPy knows neither
        flat = flat.view(np.dtype(f"uint{8 * host.dtype.itemsize}"))  # (their bits)
    return DeviceValue(device.runtime.upload(flat), host.shape, host.dtype, device)


# DLPack's device type of CUDA memory (kDLCUDA).
DLPACK_CUDA = 2


def from_cuda_dlpack(x, device_id: int, copy: bool | None) -> Array:
    """An array on GPU `device_id` sharing the memory of `x` (a CUDA tensor exporting DLPack:
    CuPy's, PyTorch's, ...) through CuPy, copied only when asked to or when strided."""
    from funcgrad.devices import devices

    gpus = devices("gpu")  # names what is missing when there is no GPU
    if device_id >= len(gpus):
        raise ValueError(
            f"the DLPack tensor lives on CUDA device {device_id}; funcgrad finds {gpus}"
        )
    gpu = gpus[device_id]
    with gpu.runtime.context():
        value = gpu.runtime.xp.from_dlpack(x)
        if copy:
            value = value.copy()
        flat = gpu.runtime.xp.ascontiguousarray(value).reshape(-1)
    return Array(DeviceValue(flat, value.shape, np.dtype(value.dtype), gpu))


def to_host(array: Array) -> Array:
    if type(array._value) is not DeviceValue:
        return array
    value = np.asarray(array._value)
    return Array(value[()] if value.ndim == 0 else value, array.weak_type)


def live_arrays(platform: str | None = None) -> list[Array]:
    """The funcgrad arrays alive now and not deleted (on `platform`'s devices: "cpu", "gpu"
    or "cuda", when given). Arrays keep no registry, so that making one costs nothing more;
    they are found by a walk over the objects Python's collector tracks, which costs a pass
    over the heap each time."""
    import gc

    found = [x for x in gc.get_objects() if isinstance(x, Array) and not x.is_deleted()]
    if platform is None:
        return found
    wanted = "gpu" if platform == "cuda" else platform
    return [x for x in found if x.device.platform == wanted]


def copy_to_host_async(x):
    """Start copying every GPU array in the pytree `x` to the host (`Array.copy_to_host_async`),
    and return `x`."""
    from funcgrad import tree_util

    for leaf in tree_util.tree_leaves(x):
        if isinstance(leaf, Array):
            leaf.copy_to_host_async()
    return x


def block_until_ready(x):
    """Wait for every array in the pytree `x` to be computed, and return `x`."""
    from funcgrad import tree_util

    for leaf in tree_util.tree_leaves(x):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
    return x


class Shard(NamedTuple):
    device: Device
    data: Array
    index: tuple  # the slices (or, for pmap's rows, the row) of the array it holds


def sharded(buffers: list, devices: list[Device], weak_type: bool = False) -> Array:
    """An array whose leading axis is split over `devices`, one buffer each: GPU buffers stay
    where they are (the whole value is gathered when read), virtual CPU devices' become
    views of one stacked host array."""
    if isinstance(devices[0], GpuDevice):
        array = Array(DeviceValue.stacked(buffers), weak_type)
        array._shards = tuple(zip(devices, buffers))
        return array
    array = Array(np.stack(buffers), weak_type)
    array._shards = tuple(zip(devices, array._value))
    return array


class _Deleted(_Sized):
    """Stands for the value of a deleted array: it still has a shape and dtype (so the array
    prints and traces its signature), and any use of its data raises."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape = shape
        self.dtype = dtype

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError(
            f"Array has been deleted with shape={short_dtype_name(self.dtype)}{list(self.shape)}: "
            "it was donated to a jitted function (donate_argnums), whose outputs took over its "
            "memory. Keep a copy, or stop donating it, to use it again."
        )

    def __getattr__(self, name: str):
        self.__array__()


class Array:
    """An immutable array holding a NumPy value on the host.

    `_value` is a NumPy ndarray or NumPy scalar that funcgrad owns and never exposes writable;
    `weak_type` marks values born from Python scalars, which promote like the scalars did.
    Operators and NumPy-style methods are installed by `funcgrad.numpy`.

    A sharded array (made by `sharded`, e.g. as pmap's result) also holds `_shards`: the
    devices of its leading axis and the slice each holds, which pmap hands back to each device
    as it is. On virtual CPU devices the slices are views of `_value`; on GPUs they are the
    devices' buffers and `_value` is stacked from them on the first GPU when read. An array
    laid out over a mesh (`device_put` with a NamedSharding, shard_map's results) holds its
    `_sharding`, its value whole on the host. While key reuse is checked
    (`funcgrad.key_reuse`), an array given to or made from a random key holds `_key_cells`,
    whether each of its elements is used up. The slots are left unset on other arrays, so
    they pay nothing for them.
    """

    __slots__ = ("_value", "weak_type", "_shards", "_sharding", "_key_cells")
    __array_priority__ = 100

    def __init__(self, value, weak_type: bool = False):
        self._value = value
        self.weak_type = weak_type

    @property
    def aval(self) -> ShapedArray:
        return ShapedArray(self._value.shape, self._value.dtype, self.weak_type)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def size(self) -> int:
        return self._value.size

    @property
    def nbytes(self) -> int:
        return self._value.nbytes

    @property
    def itemsize(self) -> int:
        return self._value.itemsize

    @property
    def device(self) -> Device:
        if type(self._value) is DeviceValue:
            return self._value.device
        shards = getattr(self, "_shards", None)
        if shards is not None:
            return shards[0][0]
        return getattr(getattr(self, "_sharding", None), "device", CPU)

    def devices(self) -> set[Device]:
        if hasattr(self, "_sharding"):
            return set(self._sharding.device_set)
        shards = getattr(self, "_shards", None)
        return {self.device} if shards is None else {device for device, _ in shards}

    @property
    def sharding(self):
        """How the array is laid out over devices (`funcgrad.sharding`)."""
        from funcgrad.sharding import sharding_of

        return sharding_of(self)

    @property
    def addressable_shards(self) -> list[Shard]:
        """The buffers of this array and the devices holding them (one, for an unsharded
        array; one per device of its mesh, for an array laid out over one)."""
        if hasattr(self, "_sharding"):
            from funcgrad.sharding import shards_of

            return shards_of(self)
        shards = getattr(self, "_shards", None)
        if shards is None:
            return [Shard(self.device, self, (slice(None),) * self.ndim)]
        return [
            Shard(device, Array(buffer, self.weak_type), (i,))
            for i, (device, buffer) in enumerate(shards)
        ]

    def block_until_ready(self) -> Array:
        """Wait until the array's value is computed (GPU work runs asynchronously), on every
        device holding a shard of it."""
        if type(self._value) is DeviceValue:
            for device in self.devices():
                device.runtime.synchronize()
        return self

    def copy_to_host_async(self) -> None:
        """Start copying a GPU array's value to the host without waiting: a later read
        (`np.asarray`, printing, `item`) waits only for what is left of the copy, so a training
        loop can ask for its loss early and read it after launching the next step. The host
        copy is kept, as the value never changes. Arrays on the host have nothing to copy."""
        value = self._value
        if type(value) is _Deleted:
            value.__array__()  # (raises, naming the donation)
        if type(value) is DeviceValue and value._host is None and value._parts is None:
            value._host = value.device.runtime.download_async(value.storage)

    def delete(self) -> None:
        """Give up this array's buffer (as donation to a jitted call does): any later use of
        the array raises an error saying it was deleted."""
        self._value = _Deleted(self._value.shape, self._value.dtype)

    def is_deleted(self) -> bool:
        return type(self._value) is _Deleted

    def is_fully_replicated(self) -> bool:
        if hasattr(self, "_sharding"):
            return self._sharding.is_fully_replicated
        return not hasattr(self, "_shards")

    # Conversions out of funcgrad: always read-only views, so the array stays immutable.
    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self._value, dtype=dtype, copy=True)
        view = np.asarray(self._value, dtype=dtype)
        if view is self._value or view.base is not None or not isinstance(self._value, np.ndarray):
            view = view.view()
            view.flags.writeable = False
        return view

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if type(self._value) is DeviceValue:  # the GPU buffer itself, shaped, no copy
            return self._value.device.runtime.shaped(self._value).__dlpack__(stream=stream)
        # np.ascontiguousarray would make a 0-d value 1-d; asarray keeps the shape.
        value = np.asarray(self._value)
        if not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        if max_version is None:
            return value.__dlpack__(stream=stream)
        return value.__dlpack__(stream=stream, max_version=max_version, copy=copy)

    def __dlpack_device__(self):
        if type(self._value) is DeviceValue:
            return self._value.device.runtime.shaped(self._value).__dlpack_device__()
        return np.asarray(self._value).__dlpack_device__()

    def __setitem__(self, index, value):
        raise TypeError(
            "funcgrad arrays are immutable: item assignment is not supported. "
            "Use x = x.at[index].set(value) to get an updated copy."
        )

    def __hash__(self):
        raise TypeError("unhashable type: funcgrad Array")

    def __bool__(self) -> bool:
        return bool(self._value)

    def __int__(self) -> int:
        return int(self._value)

    def __float__(self) -> float:
        return float(self._value)

    def __complex__(self) -> complex:
        return complex(self._value)

    def __index__(self) -> int:
        if not dtypes.is_int(self.dtype) and not dtypes.is_bool(self.dtype):
            raise TypeError(f"only integer arrays can be used as an index, got {self.dtype}")
        return int(self._value)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        shards = getattr(self, "_shards", None)
        if shards is not None:  # each device's buffer, where it is
            return (Array(buffer, self.weak_type) for _, buffer in shards)
        if type(self._value) is DeviceValue:  # rows sliced on the GPU, left there
            return (self[i] for i in range(self.shape[0]))
        return (Array(row, self.weak_type) for row in np.asarray(self._value))

    def __reduce__(self):
        return (Array, (np.asarray(self._value), self.weak_type))

    def __format__(self, spec: str) -> str:
        if self.ndim == 0:
            return format(self._value.item(), spec)
        return format(np.asarray(self._value), spec)

    def item(self, *index):
        return np.asarray(self._value).item(*index)

    def tolist(self):
        return np.asarray(self._value).tolist()

    def copy(self) -> Array:
        """A distinct array of the same value. Arrays are immutable, so the two share the
        buffer; but donating one to a jitted call (which deletes it) leaves the other."""
        copied = Array(self._value, self.weak_type)
        for slot in ("_shards", "_sharding", "_key_cells"):
            if hasattr(self, slot):
                setattr(copied, slot, getattr(self, slot))
        return copied

    def __copy__(self) -> Array:
        return self

    def __deepcopy__(self, memo) -> Array:
        return self

    def __repr__(self) -> str:
        if self.is_deleted():
            return f"Array(<deleted>, shape={self.shape}, dtype={self.dtype.name})"
        value = np.asarray(self._value)
        prefix = "Array("
        body = np.array2string(value, separator=", ", prefix=prefix)
        suffix = f", dtype={value.dtype.name}"
        if self.weak_type:
            suffix += ", weak_type=True"
        return f"{prefix}{body}{suffix})"

    def __str__(self) -> str:
        return str(np.asarray(self._value))

    def _repr_html_(self) -> str:
        from funcgrad.viz import array_html

        return array_html(self)

    def str_short(self) -> str:
        return f"{short_dtype_name(self.dtype)}{list(self.shape)}"
