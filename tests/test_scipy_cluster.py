"""funcgrad.scipy.cluster.vq.vq against scipy.cluster.vq: codes and distances of 2-d and 1-d
observations, under jit, and the errors that name mismatched shapes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.cluster.vq as sv

import funcgrad as fg
from funcgrad.scipy.cluster.vq import vq
from tests.checks import assert_close


@pytest.mark.parametrize("shapes", [((9, 3), (4, 3)), ((7,), (3,))])
def test_vq_matches_scipy(shapes):
    rng = np.random.default_rng(0)
    obs, code_book = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    expected_code, expected_dist = sv.vq(obs, code_book)
    for code, dist in (vq(obs, code_book), fg.jit(vq)(obs, code_book)):
        assert_close(code, expected_code, dtype=np.int32)
        assert_close(dist, expected_dist, rtol=1e-12, atol=1e-12)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="same number of axes"):
        vq(np.ones((3, 2)), np.ones(2))
    with pytest.raises(ValueError, match="code_book"):
        vq(np.ones((3, 2)), np.ones((4, 3)))
    # It was argmin's error about an empty axis.
    with pytest.raises(ValueError, match="vq: the code book is empty"):
        vq(np.ones((3, 2)), np.ones((0, 2)))
