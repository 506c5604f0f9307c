"""funcgrad.scipy.spatial.transform against scipy.spatial.transform: Rotation's
representations (quaternions either way round and canonical, matrices, rotation vectors,
modified Rodrigues parameters, Euler angles of every kind of sequence, at gimbal lock too),
apply, inv, composition, magnitude, mean and Slerp, for one rotation and for stacks; both
classes through jit as pytrees, and derivatives against central finite differences."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.spatial.transform import Rotation as SciPyRotation
from scipy.spatial.transform import Slerp as SciPySlerp

import funcgrad as fg
from funcgrad.scipy.spatial.transform import Rotation, Slerp
from funcgrad.test_util import check_grads
from tests.checks import assert_close

TOL = dict(rtol=1e-10, atol=1e-10)
SEQUENCES = ["xyz", "zyx", "yxz", "xzx", "zxz", "XYZ", "ZYX", "ZXZ", "YZY"]


def quaternions(shape):
    return np.random.default_rng(0).standard_normal(shape + (4,))


@pytest.mark.parametrize("shape", [(), (6,)])
def test_representations_match_scipy(shape):
    quat = quaternions(shape)
    ours, theirs = Rotation.from_quat(quat), SciPyRotation.from_quat(quat)
    assert_close(ours.as_quat(), theirs.as_quat(), **TOL)
    assert_close(ours.as_quat(canonical=True), theirs.as_quat(canonical=True), **TOL)
    assert_close(ours.as_quat(scalar_first=True), theirs.as_quat(scalar_first=True), **TOL)
    assert_close(ours.as_matrix(), theirs.as_matrix(), **TOL)
    assert_close(ours.as_rotvec(), theirs.as_rotvec(), **TOL)
    assert_close(ours.as_rotvec(degrees=True), theirs.as_rotvec(degrees=True), **TOL)
    assert_close(ours.as_mrp(), theirs.as_mrp(), **TOL)
    assert_close(ours.magnitude(), theirs.magnitude(), **TOL)
    assert_close(ours.inv().as_matrix(), theirs.inv().as_matrix(), **TOL)
    matrix = theirs.as_matrix()
    assert_close(
        Rotation.from_matrix(matrix).as_quat(), SciPyRotation.from_matrix(matrix).as_quat(), **TOL
    )
    assert_close(Rotation.from_rotvec(theirs.as_rotvec()).as_matrix(), matrix, **TOL)
    assert_close(Rotation.from_mrp(theirs.as_mrp()).as_matrix(), matrix, **TOL)
    first = np.roll(quat, 1, axis=-1)
    assert_close(Rotation.from_quat(first, scalar_first=True).as_matrix(), matrix, **TOL)


@pytest.mark.parametrize("shape", [(), (6,)])
@pytest.mark.parametrize("seq", SEQUENCES + ["zy", "X"])
def test_euler_angles_match_scipy(shape, seq):
    rng = np.random.default_rng(1)
    angles = rng.uniform(-3, 3, shape + (len(seq),))
    for degrees in (False, True):
        expected = SciPyRotation.from_euler(seq, angles, degrees).as_matrix()
        assert_close(Rotation.from_euler(seq, angles, degrees).as_matrix(), expected, **TOL)
    if len(seq) == 3:
        quat = quaternions(shape)
        for degrees in (False, True):
            expected = SciPyRotation.from_quat(quat).as_euler(seq, degrees)
            assert_close(Rotation.from_quat(quat).as_euler(seq, degrees), expected, **TOL)


@pytest.mark.parametrize("seq", SEQUENCES)
@pytest.mark.parametrize("middle", [0.0, np.pi / 2, -np.pi / 2, np.pi])
def test_euler_angles_at_gimbal_lock_match_scipy(seq, middle):
    theirs = SciPyRotation.from_euler(seq, [0.4, middle, 0.9])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy warns of the lock
        expected = theirs.as_euler(seq)
    assert_close(Rotation.from_quat(theirs.as_quat()).as_euler(seq), expected, rtol=1e-6, atol=1e-6)


def test_apply_compose_mean_and_slerp_match_scipy():
    rng = np.random.default_rng(2)
    quat, vectors = quaternions((6,)), rng.standard_normal((6, 3))
    ours, theirs = Rotation.from_quat(quat), SciPyRotation.from_quat(quat)
    assert_close(ours.apply(vectors), theirs.apply(vectors), **TOL)
    assert_close(
        ours.apply(vectors[0], inverse=True), theirs.apply(vectors[0], inverse=True), **TOL
    )
    assert_close(ours[2].apply(vectors), theirs[2].apply(vectors), **TOL)
    assert_close(
        (ours * ours.inv()[::-1]).as_matrix(), (theirs * theirs.inv()[::-1]).as_matrix(), **TOL
    )
    assert_close(ours.mean().as_matrix(), theirs.mean().as_matrix(), **TOL)
    weights = rng.uniform(0, 1, 6)
    assert_close(ours.mean(weights).as_matrix(), theirs.mean(weights).as_matrix(), **TOL)
    times, queries = np.array([0.0, 1.0, 2.5, 3.0, 4.0, 6.0]), np.array([0.0, 0.5, 2.7, 3.9, 6.0])
    expected = SciPySlerp(times, theirs)(queries).as_matrix()
    assert_close(Slerp(times, ours)(queries).as_matrix(), expected, **TOL)
    assert_close(
        Slerp(times, ours)(1.3).as_matrix(), SciPySlerp(times, theirs)(1.3).as_matrix(), **TOL
    )


def test_slerp_extrapolates_the_end_intervals():
    # The turn of each end interval, continued: R0 exp(f log(R0^-1 R1)) with f beyond [0, 1].
    quat = quaternions((3,))
    times = np.array([0.0, 1.0, 2.5])
    theirs = SciPyRotation.from_quat(quat)
    slerp = Slerp(times, Rotation.from_quat(quat))
    for t, first, fraction in ((-0.5, 0, -0.5), (3.1, 1, 2.1 / 1.5)):
        turn = (theirs[first].inv() * theirs[first + 1]).as_rotvec()
        expected = theirs[first] * SciPyRotation.from_rotvec(fraction * turn)
        assert_close(slerp(t).as_matrix(), expected.as_matrix(), **TOL)


def test_stacks_identity_and_random():
    rotations = Rotation.from_quat(quaternions((6,)))
    assert len(rotations) == 6 and rotations[1:3].as_quat().shape == (2, 4)
    assert Rotation.concatenate([rotations, rotations[0]]).as_quat().shape == (7, 4)
    assert_close(Rotation.identity().as_matrix(), np.eye(3))
    assert Rotation.identity(3).as_quat().shape == (3, 4)
    drawn = Rotation.random(500, fg.random.key(0)).as_matrix()
    assert_close(
        np.asarray(drawn) @ np.swapaxes(np.asarray(drawn), -1, -2),
        np.broadcast_to(np.eye(3), (500, 3, 3)),
        rtol=1e-5,
        atol=1e-5,
    )
    # Uniform rotations: each matrix entry has mean 0 and variance 1/3.
    assert abs(np.asarray(drawn).mean()) < 0.05 and abs(np.asarray(drawn).var() - 1 / 3) < 0.05
    single = Rotation.identity()
    with pytest.raises(TypeError, match="single rotation"):
        len(single)
    with pytest.raises(TypeError, match="single rotation"):
        single[0]


def test_pytrees_through_jit():
    quat, vectors = quaternions((6,)), np.random.default_rng(3).standard_normal((6, 3))
    rotations = Rotation.from_quat(quat)
    applied = fg.jit(lambda r, v: r.apply(v))(rotations, vectors)
    assert_close(applied, SciPyRotation.from_quat(quat).apply(vectors), **TOL)
    inverted = fg.jit(lambda r: r.inv())(rotations)
    assert isinstance(inverted, Rotation)
    assert_close(inverted.as_quat(), SciPyRotation.from_quat(quat).inv().as_quat(), **TOL)
    times = np.arange(6.0)
    slerp = Slerp(times, rotations)
    out = fg.jit(lambda s, t: s(t).as_matrix())(slerp, np.array([0.5, 4.2]))
    assert_close(
        out, SciPySlerp(times, SciPyRotation.from_quat(quat))([0.5, 4.2]).as_matrix(), **TOL
    )


def test_derivatives_match_finite_differences():
    rng = np.random.default_rng(4)
    rotvec, vectors = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    check_grads(lambda r, v: Rotation.from_rotvec(r).apply(v), (rotvec, vectors), order=2)
    check_grads(lambda q: Rotation.from_quat(q).as_euler("zyx"), (quaternions((3,)),), order=1)
    check_grads(lambda r: Rotation.from_rotvec(r).as_rotvec(), (rotvec,), order=1)
    # At the identity the small-angle series keep the derivative finite: d rotvec / d rotvec = I.
    jacobian = fg.jacfwd(lambda r: Rotation.from_rotvec(r).as_rotvec())(np.zeros(3))
    assert_close(jacobian, np.eye(3), **TOL)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="xyz"):
        Rotation.from_euler("xYz", [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="consecutive"):
        Rotation.from_euler("xxz", [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="shape"):
        Rotation.from_quat(np.ones(3))
    with pytest.raises(ValueError, match="at least 2"):
        Slerp([0.0], Rotation.from_quat(np.ones((1, 4))))
