"""funcgrad.scipy.spatial: rotations in three dimensions (`transform`)."""

from funcgrad.scipy.spatial import transform

__all__ = ["transform"]
