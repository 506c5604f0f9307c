"""funcgrad.scipy: SciPy's functions over funcgrad arrays, with SciPy's names."""

import funcgrad.scipy.cluster
import funcgrad.scipy.fft
import funcgrad.scipy.interpolate
import funcgrad.scipy.ndimage
import funcgrad.scipy.signal
import funcgrad.scipy.spatial
from funcgrad.scipy import linalg, special, stats

__all__ = ["linalg", "special", "stats"]
__all__ += ["cluster", "fft", "interpolate", "ndimage", "signal", "spatial"]
