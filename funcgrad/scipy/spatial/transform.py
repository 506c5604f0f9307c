"""funcgrad.scipy.spatial.transform: `Rotation` and `Slerp`, rotations in three dimensions.

A Rotation holds unit quaternions (x, y, z, w), scalar last, in an array of shape (4,) (one
rotation) or (..., 4) (a stack). Both classes are pytrees whose leaves are arrays, so they
pass into and out of jitted functions and are differentiated like arrays. Small angles take
series where a closed form would divide zero by zero, so derivatives stay finite at the
identity.
"""

from __future__ import annotations

import re

import numpy as np

from funcgrad import numpy as fnp
from funcgrad import random
from funcgrad.array import Array
from funcgrad.numpy._promotion import promote_dtypes_inexact
from funcgrad.tree_util import register_pytree_node

__all__ = ["Rotation", "Slerp"]

# Below this squared sine of half the angle (the angle about 1e-3), angle / sin(angle / 2) and
# its inverse take their Taylor series.
_SMALL = 2.5e-7


def _inexact(x):
    (x,) = promote_dtypes_inexact(x)
    return x


def _unit(quat):
    return quat / fnp.linalg.norm(quat, axis=-1, keepdims=True)


def _compose(p, q):
    """The quaternion product p q: the rotation q followed by p."""
    pv, pw = p[..., :3], p[..., 3:]
    qv, qw = q[..., :3], q[..., 3:]
    vector = pw * qv + qw * pv + fnp.cross(pv, qv)
    scalar = pw * qw - fnp.sum(pv * qv, axis=-1, keepdims=True)
    return fnp.concatenate([vector, scalar], axis=-1)


def _check_last(name: str, x, size: int, what: str):
    if x.ndim == 0 or x.shape[-1] != size:
        raise ValueError(f"Rotation.{name}: expected {what} of shape (..., {size}), got {x.shape}")


def _parse_sequence(seq: str, lengths: tuple[int, ...]) -> tuple[list[int], bool]:
    """The axes (0, 1, 2 for x, y, z) of an Euler sequence and whether it is intrinsic
    (upper case: about the rotating axes) rather than extrinsic (lower case: fixed axes)."""
    if len(seq) not in lengths:
        raise ValueError(
            f"Rotation: an Euler sequence has {' or '.join(map(str, lengths))} axes, got {seq!r}"
        )
    intrinsic = re.fullmatch(r"[XYZ]+", seq) is not None
    if not intrinsic and re.fullmatch(r"[xyz]+", seq) is None:
        raise ValueError(
            f"Rotation: an Euler sequence takes its axes from 'xyz' (extrinsic) or 'XYZ' "
            f"(intrinsic), not both; got {seq!r}"
        )
    if any(a == b for a, b in zip(seq, seq[1:])):
        raise ValueError(f"Rotation: consecutive Euler axes must differ, got {seq!r}")
    return ["xyz".index(c) for c in seq.lower()], intrinsic


class Rotation:
    """Rotations in 3 dimensions, built by the `from_*` class methods."""

    def __init__(self, quat):
        """Rotations from unit quaternions (x, y, z, w); `from_quat` normalizes them first."""
        self.quat = fnp.asarray(quat)

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_quat(cls, quat, *, scalar_first: bool = False) -> Rotation:
        """From quaternions (..., 4), normalized: (x, y, z, w), or (w, x, y, z) when
        `scalar_first`."""
        quat = _inexact(quat)
        _check_last("from_quat", quat, 4, "quaternions")
        if scalar_first:
            quat = fnp.roll(quat, -1, axis=-1)
        return cls(_unit(quat))

    @classmethod
    def from_matrix(cls, matrix) -> Rotation:
        """From rotation matrices (..., 3, 3), through the quaternion's largest component."""
        m = _inexact(matrix)
        if m.ndim < 2 or m.shape[-2:] != (3, 3):
            raise ValueError(f"Rotation.from_matrix: expected shape (..., 3, 3), got {m.shape}")
        d0, d1, d2 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
        trace = d0 + d1 + d2
        s01, s02, s12 = (
            m[..., 0, 1] + m[..., 1, 0],
            m[..., 0, 2] + m[..., 2, 0],
            m[..., 1, 2] + m[..., 2, 1],
        )
        a01, a20, a12 = (
            m[..., 1, 0] - m[..., 0, 1],
            m[..., 0, 2] - m[..., 2, 0],
            m[..., 2, 1] - m[..., 1, 2],
        )
        # One candidate per choice of the largest of x, y, z, w; each is 4 times that component
        # times the quaternion, so the largest is the best conditioned.
        candidates = fnp.stack(
            [
                fnp.stack([1 - trace + 2 * d0, s01, s02, a12], axis=-1),
                fnp.stack([s01, 1 - trace + 2 * d1, s12, a20], axis=-1),
                fnp.stack([s02, s12, 1 - trace + 2 * d2, a01], axis=-1),
                fnp.stack([a12, a20, a01, 1 + trace], axis=-1),
            ],
            axis=-2,
        )
        choice = fnp.argmax(fnp.stack([d0, d1, d2, trace], axis=-1), axis=-1)
        best = fnp.take_along_axis(candidates, choice[..., None, None], axis=-2)[..., 0, :]
        return cls(_unit(best))

    @classmethod
    def from_rotvec(cls, rotvec, degrees: bool = False) -> Rotation:
        """From rotation vectors (..., 3): the axis scaled by the angle."""
        rotvec = _inexact(rotvec)
        _check_last("from_rotvec", rotvec, 3, "rotation vectors")
        if degrees:
            rotvec = fnp.deg2rad(rotvec)
        squared = fnp.sum(rotvec * rotvec, axis=-1, keepdims=True)
        small = squared < 4 * _SMALL
        angle = fnp.sqrt(fnp.where(small, 1.0, squared))
        scale = fnp.where(small, 0.5 - squared / 48 + squared**2 / 3840, fnp.sin(angle / 2) / angle)
        scalar = fnp.where(small, 1 - squared / 8 + squared**2 / 384, fnp.cos(angle / 2))
        return cls(fnp.concatenate([scale * rotvec, scalar], axis=-1))

    @classmethod
    def from_mrp(cls, mrp) -> Rotation:
        """From modified Rodrigues parameters (..., 3): the axis scaled by tan(angle / 4)."""
        mrp = _inexact(mrp)
        _check_last("from_mrp", mrp, 3, "modified Rodrigues parameters")
        squared = fnp.sum(mrp * mrp, axis=-1, keepdims=True)
        return cls(fnp.concatenate([2 * mrp, 1 - squared], axis=-1) / (1 + squared))

    @classmethod
    def from_euler(cls, seq: str, angles, degrees: bool = False) -> Rotation:
        """From Euler angles about the axes of `seq` (1 to 3 of 'xyz' for fixed axes, or of
        'XYZ' for axes that turn with the body): angles (..., len(seq)), or a scalar for one
        axis."""
        axes, intrinsic = _parse_sequence(seq, (1, 2, 3))
        angles = _inexact(angles)
        if len(axes) == 1 and angles.ndim == 0:
            angles = angles[None]
        _check_last("from_euler", angles, len(axes), f"angles for {seq!r}")
        if degrees:
            angles = fnp.deg2rad(angles)
        quat = None
        for position, axis in enumerate(axes):
            half = angles[..., position] / 2
            parts = [fnp.zeros_like(half)] * 3
            parts[axis] = fnp.sin(half)
            elementary = fnp.stack(parts + [fnp.cos(half)], axis=-1)
            if quat is None:
                quat = elementary
            else:
                quat = _compose(quat, elementary) if intrinsic else _compose(elementary, quat)
        return cls(quat)

    @classmethod
    def identity(cls, num: int | None = None) -> Rotation:
        """The identity rotation, or a stack of `num` of them."""
        quat = np.array([0.0, 0.0, 0.0, 1.0])
        return cls(fnp.asarray(quat if num is None else np.tile(quat, (num, 1)), dtype=float))

    @classmethod
    def random(cls, num: int | None = None, rng=None) -> Rotation:
        """Rotations drawn uniformly (the Haar measure) with the funcgrad PRNG key `rng`."""
        if rng is None:
            raise ValueError("Rotation.random: pass a key from funcgrad.random as rng")
        shape = (4,) if num is None else (num, 4)
        return cls(_unit(random.normal(rng, shape)))

    @classmethod
    def concatenate(cls, rotations) -> Rotation:
        """The rotations of a sequence of Rotation objects, in one stack."""
        return cls(fnp.concatenate([fnp.atleast_2d(r.quat) for r in rotations], axis=0))

    # -- representations -----------------------------------------------------------------------

    def as_quat(self, canonical: bool = False, *, scalar_first: bool = False) -> Array:
        """The unit quaternions (x, y, z, w), or (w, x, y, z) when `scalar_first`. A rotation
        has two, q and -q; `canonical` picks the one whose first nonzero of (w, x, y, z) is
        positive."""
        quat = self.quat
        if canonical:
            w, x, y, z = quat[..., 3], quat[..., 0], quat[..., 1], quat[..., 2]
            first = fnp.where(w != 0, w, fnp.where(x != 0, x, fnp.where(y != 0, y, z)))
            quat = fnp.where((first < 0)[..., None], -quat, quat)
        return fnp.roll(quat, 1, axis=-1) if scalar_first else quat

    def as_matrix(self) -> Array:
        """The rotation matrices (..., 3, 3)."""
        x, y, z, w = (self.quat[..., i] for i in range(4))
        rows = [
            [w * w + x * x - y * y - z * z, 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), w * w - x * x + y * y - z * z, 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), w * w - x * x - y * y + z * z],
        ]
        return fnp.stack([fnp.stack(row, axis=-1) for row in rows], axis=-2)

    def as_rotvec(self, degrees: bool = False) -> Array:
        """The rotation vectors (..., 3), of angles in [0, pi]."""
        quat = fnp.where(self.quat[..., 3:] < 0, -self.quat, self.quat)
        vector, scalar = quat[..., :3], quat[..., 3:]
        squared = fnp.sum(vector * vector, axis=-1, keepdims=True)
        small = squared < _SMALL
        sine = fnp.sqrt(fnp.where(small, 1.0, squared))
        angle = 2 * fnp.arctan2(sine, scalar)
        # angle / sin(angle / 2), with angle^2 ~ 4 sin^2 / cos^2 for small angles
        small_angle2 = 4 * squared / (scalar * scalar)
        series = 2 + small_angle2 / 12 + 7 * small_angle2**2 / 2880
        rotvec = fnp.where(small, series, angle / sine) * vector
        return fnp.rad2deg(rotvec) if degrees else rotvec

    def as_mrp(self) -> Array:
        """The modified Rodrigues parameters (..., 3), of angles at most pi."""
        quat = fnp.where(self.quat[..., 3:] < 0, -self.quat, self.quat)
        return quat[..., :3] / (1 + quat[..., 3:])

    def as_euler(self, seq: str, degrees: bool = False) -> Array:
        """Euler angles (..., 3) about the axes of `seq`: the first and third in [-pi, pi],
        the second in [0, pi] for sequences like 'zxz' and in [-pi/2, pi/2] for 'xyz'. At
        gimbal lock the third is set to zero."""
        axes, intrinsic = _parse_sequence(seq, (3,))
        if intrinsic:
            axes = axes[::-1]
        i, j, k = axes
        symmetric = i == k
        if symmetric:
            k = 3 - i - j
        sign = (i - j) * (j - k) * (k - i) // 2  # the parity of the axes (i, j, k)
        q = self.quat
        w = q[..., 3]
        if symmetric:
            a, b, c, d = w, q[..., i], q[..., j], q[..., k] * sign
        else:
            a, b = w - q[..., j], q[..., i] + q[..., k] * sign
            c, d = q[..., j] + w, q[..., k] * sign - q[..., i]
        middle = 2 * fnp.arctan2(fnp.hypot(c, d), fnp.hypot(a, b))
        half_sum, half_diff = fnp.arctan2(b, a), fnp.arctan2(d, c)
        at_zero = fnp.abs(middle) <= 1e-7
        at_pi = fnp.abs(middle - np.pi) <= 1e-7
        # The outer angles are half_sum -+ half_diff, the first in the order of the
        # extrinsic sequence. At gimbal lock only their sum (or difference) is defined: the
        # first angle of seq carries it and the last is zero.
        locked = at_zero | at_pi
        locked_first = fnp.where(at_zero, 2 * half_sum, 2 * half_diff * (1 if intrinsic else -1))
        outer = [half_sum - half_diff, half_sum + half_diff]
        if intrinsic:
            outer = outer[::-1]
        first = fnp.where(locked, locked_first, outer[0])
        third = fnp.where(locked, 0.0, outer[1])
        if not symmetric:
            middle = middle - np.pi / 2
            if intrinsic:
                first = first * sign
            else:
                third = third * sign
        angles = fnp.stack([first, middle, third], axis=-1)
        angles = fnp.where(angles < -np.pi, angles + 2 * np.pi, angles)
        angles = fnp.where(angles > np.pi, angles - 2 * np.pi, angles)
        return fnp.rad2deg(angles) if degrees else angles

    # -- operations ----------------------------------------------------------------------------

    def apply(self, vectors, inverse: bool = False) -> Array:
        """The vectors (..., 3) rotated (by the inverse rotation when `inverse`); rotations and
        vectors broadcast against each other."""
        vectors = fnp.asarray(vectors)
        _check_last("apply", vectors, 3, "vectors")
        matrix = self.as_matrix()
        if inverse:
            matrix = fnp.swapaxes(matrix, -1, -2)
        return fnp.matmul(matrix, vectors[..., None])[..., 0]

    def inv(self) -> Rotation:
        return Rotation(fnp.concatenate([-self.quat[..., :3], self.quat[..., 3:]], axis=-1))

    def __mul__(self, other: Rotation) -> Rotation:
        """The composition: `other` applied first, then this rotation."""
        if not isinstance(other, Rotation):
            return NotImplemented
        return Rotation(_unit(_compose(self.quat, other.quat)))

    def magnitude(self) -> Array:
        """The angles of the rotations, in [0, pi]."""
        vector_norm = fnp.linalg.norm(self.quat[..., :3], axis=-1)
        return 2 * fnp.arctan2(vector_norm, fnp.abs(self.quat[..., 3]))

    def mean(self, weights=None) -> Rotation:
        """The rotation closest to the (weighted) rotations in the chordal L2 sense: the
        eigenvector of sum_i w_i q_i q_i^T of the largest eigenvalue."""
        quat = self.quat if not self.single else self.quat[None]
        if weights is None:
            weights = fnp.ones(quat.shape[:1], quat.dtype)
        else:
            weights = fnp.asarray(weights)
            if weights.shape != quat.shape[:1]:
                raise ValueError(
                    f"Rotation.mean: expected one weight per rotation, shape {quat.shape[:1]}, "
                    f"got {weights.shape}"
                )
        moments = fnp.einsum("n,ni,nj->ij", weights, quat, quat)
        _, vectors = fnp.linalg.eigh(moments)
        return Rotation(vectors[:, -1])

    # -- a stack -------------------------------------------------------------------------------

    @property
    def single(self) -> bool:
        """Whether this holds one rotation rather than a stack."""
        return self.quat.ndim == 1

    def __len__(self) -> int:
        if self.single:
            raise TypeError("Rotation: a single rotation has no len()")
        return self.quat.shape[0]

    def __getitem__(self, index) -> Rotation:
        if self.single:
            raise TypeError("Rotation: a single rotation cannot be indexed")
        return Rotation(self.quat[index])

    def __repr__(self) -> str:
        return f"Rotation(quat={self.quat!r})"


class Slerp:
    """Spherical linear interpolation between rotations given at increasing `times`: at a time
    between two of them, the rotation turned by the same fraction of the way from the one to
    the next about a fixed axis. Times beyond the ends extrapolate the first or last
    interval."""

    def __init__(self, times, rotations: Rotation):
        if not isinstance(rotations, Rotation):
            raise TypeError(f"Slerp: rotations must be a Rotation, got {type(rotations).__name__}")
        if rotations.single or len(rotations) < 2:
            raise ValueError("Slerp: needs a stack of at least 2 rotations")
        times = fnp.asarray(times, dtype=rotations.quat.dtype)
        if times.shape != (len(rotations),):
            raise ValueError(
                f"Slerp: expected one time per rotation, shape ({len(rotations)},), got "
                f"{times.shape}"
            )
        self.times = times
        self.rotations = rotations[:-1]
        self.rotvecs = (self.rotations.inv() * rotations[1:]).as_rotvec()

    def __call__(self, times) -> Rotation:
        """The interpolated rotations at `times` (a scalar: one rotation; 1-d: a stack)."""
        times = fnp.asarray(times, dtype=self.times.dtype)
        if times.ndim > 1:
            raise ValueError(f"Slerp: times must be a scalar or 1-d, got shape {times.shape}")
        interval = fnp.clip(fnp.searchsorted(self.times, times) - 1, 0, self.times.shape[0] - 2)
        start = self.times[interval]
        fraction = (times - start) / (self.times[interval + 1] - start)
        turn = Rotation.from_rotvec(self.rotvecs[interval] * fraction[..., None])
        return self.rotations[interval] * turn


def _rotation_unflatten(_, children) -> Rotation:
    rotation = object.__new__(Rotation)
    (rotation.quat,) = children
    return rotation


register_pytree_node(Rotation, lambda r: ((r.quat,), None), _rotation_unflatten)


def _slerp_flatten(slerp: Slerp):
    return (slerp.times, slerp.rotations, slerp.rotvecs), None


def _slerp_unflatten(_, children) -> Slerp:
    slerp = object.__new__(Slerp)
    slerp.times, slerp.rotations, slerp.rotvecs = children
    return slerp


register_pytree_node(Slerp, _slerp_flatten, _slerp_unflatten)
