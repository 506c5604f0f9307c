"""funcgrad.scipy: SciPy's functions over funcgrad arrays, with SciPy's names."""

from funcgrad.scipy import (
    cluster,
    fft,
    integrate,
    interpolate,
    linalg,
    ndimage,
    optimize,
    signal,
    sparse,
    spatial,
    special,
    stats,
)

__all__ = [
    "cluster",
    "fft",
    "integrate",
    "interpolate",
    "linalg",
    "ndimage",
    "optimize",
    "signal",
    "sparse",
    "spatial",
    "special",
    "stats",
]
