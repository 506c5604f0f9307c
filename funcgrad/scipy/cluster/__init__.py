"""funcgrad.scipy.cluster: vector quantization (`vq`)."""

from funcgrad.scipy.cluster import vq

__all__ = ["vq"]
