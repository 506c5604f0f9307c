"""Host memory for the outputs and arenas of compiled calls, kept warm between calls.

Memory of many megabytes comes fresh from the operating system: the first write to each page
faults, and the kernel zeroes the page. For a pass over large arrays that costs about as much
as the pass itself (x + 1 on 16M float32: 6 of its 9 ms on this machine). So large buffers are
handed out again once nothing refers to them any more.

A kept block is one uint8 array; everything handed out is a view of it, and every view's base
is the block itself (NumPy points a view of a view at the owner), as is any buffer exported
from them. So a block that only this pool refers to is free, and no reader or writer can be
left behind when it is reused. Blocks are matched by exact size: a program asks for the same
sizes at every call.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np

# Smaller buffers come from malloc's own free lists, already mapped.
MIN_BYTES = 1 << 20
# At most this much memory stays kept; the oldest blocks are let go first (a block still in
# use lives on as an ordinary array and is freed when its last view goes).
KEPT_BYTES = 512 << 20

# References to a kept block that nobody else holds: the pool's list and getrefcount's own
# argument.
_UNUSED = 2


class BufferPool:
    def __init__(self, kept_bytes: int = KEPT_BYTES):
        self._kept_bytes = kept_bytes
        self._blocks: list[np.ndarray] = []  # oldest first
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialized C-contiguous array, as np.empty gives."""
        return self._block(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)

    def _block(self, nbytes: int) -> np.ndarray:
        with self._lock:
            blocks = self._blocks
            for k in range(len(blocks)):
                if blocks[k].nbytes == nbytes and sys.getrefcount(blocks[k]) == _UNUSED:
                    block = blocks.pop(k)
                    blocks.append(block)  # the most recently used go last
                    return block
            block = np.empty(nbytes, np.uint8)
            if nbytes <= self._kept_bytes:
                kept = sum(b.nbytes for b in self._blocks)
                while kept + nbytes > self._kept_bytes:
                    kept -= self._blocks.pop(0).nbytes
                self._blocks.append(block)
            return block


pool = BufferPool()


def allocator(shape: tuple[int, ...], dtype: np.dtype):
    """np.empty for buffers of this size, or the pool's."""
    return pool.empty if math.prod(shape) * dtype.itemsize >= MIN_BYTES else np.empty
