"""funcgrad.nn's further activations, log-space helpers and dot_product_attention, against
NumPy written out directly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.nn as nn
from funcgrad.test_util import check_grads
from tests import strategies as fst
from tests.checks import assert_close, check_batching, check_staging


def softplus(x):
    return np.logaddexp(x, 0)


@given(fst.arrays(fst.float_dtypes, fst.shapes(0, 2, 0, 5)))
def test_activations_match_numpy(x):
    dtype = x.dtype
    with np.errstate(all="ignore"):
        expected = {
            "mish": x * np.tanh(softplus(x)),
            "squareplus": (x + np.sqrt(x * x + 4)) / 2,
            "sparse_plus": np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4)),
            "sparse_sigmoid": np.clip((x + 1) / 2, 0, 1),
            "tanh": np.tanh(x),
            "identity": x,
        }
    for name, value in expected.items():
        assert_close(getattr(nn, name)(x), np.asarray(value, dtype), dtype)
    positive = np.abs(x) + 0.01
    assert_close(nn.log1mexp(positive), np.log(-np.expm1(-positive)).astype(dtype), dtype)


def test_log_space_helpers():
    x = np.random.default_rng(0).normal(size=(3, 4))
    assert_close(
        nn.logmeanexp(x, axis=1), np.log(np.mean(np.exp(x), axis=1)), rtol=1e-12, atol=1e-12
    )
    mask = x > 0
    expected = np.log(np.sum(np.exp(x) * mask, axis=0) / mask.sum(0))
    assert_close(nn.logmeanexp(x, axis=0, where=mask), expected, rtol=1e-12, atol=1e-12)
    assert_close(nn.logmeanexp(np.float32([1000.0, 1000.0])), np.float32(1000.0), np.float32)
    # log(1 - exp(-x)) keeps its digits at both ends.
    assert_close(nn.log1mexp(np.array([1e-20, 50.0])), [np.log(1e-20), -np.exp(-50.0)], rtol=1e-12)
    check_grads(nn.mish, (x,), 2)
    check_grads(lambda x: nn.sparse_plus(x * 3), (x,), 1)


def test_log1mexp_derivative_near_zero():
    """exp(-x) / (1 - exp(-x)) = 1 / expm1(x), about 1/x near 0: it was nan below
    x = 1e-16, where the branch log1mexp does not take there is log1p(-1)."""
    x = np.array([1e-300, 1e-20, 1e-17, 0.5, np.log(2), 3.0, 50.0])
    assert_close(fg.vmap(fg.grad(nn.log1mexp))(x), 1 / np.expm1(x), rtol=1e-14)
    assert_close(fg.vmap(fg.jacfwd(nn.log1mexp))(x), 1 / np.expm1(x), rtol=1e-14)


def test_squareplus_keeps_its_negative_tail_and_does_not_overflow():
    """float32 squareplus(-1e4) was 0 (x cancelling against sqrt(x**2 + 4)) and
    squareplus(-1e20) was inf (x**2 overflowing); the value is about b / (4|x|) there."""
    x = np.float32([-1e20, -1e30, -1e4, -30.0, -1.0, 0.0, 0.5, 7.0, 1e20, 3e38])
    wide = x.astype(np.float64)
    with np.errstate(over="ignore", divide="ignore"):
        direct = (wide + np.sqrt(wide * wide + 4)) / 2
        tail = 4 / (4 * np.abs(wide))
    expected = np.where(wide < -1e3, tail, np.where(wide > 1e19, wide, direct))
    assert_close(nn.squareplus(x), expected.astype(np.float32), np.float32, rtol=1e-6, atol=0)
    assert_close(nn.squareplus(np.float32([-1e4]), b=0.0), np.float32([0.0]), np.float32)
    moderate = np.float32([-200.0, -3.0, -0.1, 0.0, 0.1, 3.0, 200.0])
    wide = moderate.astype(np.float64)
    assert_close(
        fg.vmap(fg.grad(nn.squareplus))(moderate),
        ((1 + wide / np.sqrt(wide * wide + 4)) / 2).astype(np.float32),
        np.float32,
        rtol=2e-5,
        atol=0,
    )


def test_log1mexp_gradient_is_finite_near_zero():
    """The derivative 1 / expm1(x): it was nan for x below 2**-24 in float32, where the
    untaken log1p(-exp(-x)) branch is -inf."""
    x = np.float32([1e-30, 1e-10, 1e-7, 1e-3, 0.5, 1.0, 20.0])
    expected = 1 / np.expm1(x.astype(np.float64))
    assert_close(fg.vmap(fg.grad(nn.log1mexp))(x), expected.astype(np.float32), np.float32)
    assert_close(fg.jit(fg.grad(nn.log1mexp))(np.float32(0.0)), np.float32(np.inf), np.float32)
    check_grads(nn.log1mexp, (np.array([1e-3, 0.3, 2.0, 9.0]),), 2)


def reference_attention(q, k, v, bias=None, allowed=None, scale=None):
    """Attention head by head with NumPy: each query head uses key head h // group."""
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    if allowed is not None:
        logits = np.where(allowed, logits, -1e30)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", weights, v)


@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.sampled_from([(2, 2), (4, 2), (3, 1)]),
    st.booleans(),
    st.integers(0, 99),
)
def test_dot_product_attention_matches_numpy(t, s, heads, causal, seed):
    r = np.random.default_rng(seed)
    n, kv = heads
    q, k, v = (
        r.normal(size=(2, t, n, 3)),
        r.normal(size=(2, s, kv, 3)),
        r.normal(size=(2, s, kv, 3)),
    )
    bias = r.normal(size=(1, n, t, s))
    allowed = np.tril(np.ones((t, s), bool)) if causal else None
    expected = reference_attention(q, k, v, bias, allowed)
    actual = nn.dot_product_attention(q, k, v, bias, is_causal=causal)
    assert_close(actual, expected, rtol=1e-10, atol=1e-10)


def test_attention_masks_and_options():
    r = np.random.default_rng(0)
    q, k, v = r.normal(size=(2, 5, 2, 4)), r.normal(size=(2, 6, 2, 4)), r.normal(size=(2, 6, 2, 4))
    lengths = np.array([3, 6])
    key_allowed = np.arange(6)[None, None, None, :] < lengths[:, None, None, None]
    expected = reference_attention(q, k, v, allowed=key_allowed)
    assert_close(
        nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths),
        expected,
        rtol=1e-10,
        atol=1e-10,
    )
    # Queries past their length are padding: their outputs are 0 (they were the mean of
    # the values, every logit of theirs removed), as JAX gives.
    query_lengths = np.array([2, 5])
    query_allowed = np.arange(5)[None, None, :, None] < query_lengths[:, None, None, None]
    expected = reference_attention(q, k, v, allowed=key_allowed & query_allowed)
    expected = expected * (np.arange(5)[None, :] < query_lengths[:, None])[..., None, None]
    assert_close(
        nn.dot_product_attention(
            q, k, v, query_seq_lengths=query_lengths, key_value_seq_lengths=lengths
        ),
        expected,
        rtol=1e-10,
        atol=1e-10,
    )
    window = np.abs(np.arange(5)[:, None] - np.arange(6)[None, :]) <= 1
    assert_close(
        nn.dot_product_attention(q[0], k[0], v[0], local_window_size=(1, 1)),
        reference_attention(q[:1], k[:1], v[:1], allowed=window)[0],
        rtol=1e-10,
        atol=1e-10,
    )
    mask = r.uniform(size=(2, 1, 5, 6)) > 0.3
    assert_close(
        nn.dot_product_attention(q, k, v, mask=mask, scale=0.5),
        reference_attention(q, k, v, allowed=mask, scale=0.5),
        rtol=1e-10,
        atol=1e-10,
    )
    out, residual = nn.dot_product_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), return_residual=True
    )
    assert out.dtype == np.float32 and residual.shape == (2, 5, 2)
    logits = np.einsum("btnh,bsnh->btns", q, k) / 2
    assert_close(
        residual,
        np.log(np.exp(logits).sum(-1)).astype(np.float32),
        np.float32,
        rtol=1e-5,
        atol=1e-5,
    )
    check_staging(lambda q: nn.dot_product_attention(q, k, v, is_causal=True), q)
    check_grads(
        lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True),
        (q, k, v),
        1,
        atol=1e-5,
        rtol=1e-5,
    )
    check_batching(
        lambda q: nn.dot_product_attention(q, k[0], v[0]), [q], (0,), rtol=1e-10, atol=1e-10
    )
    with pytest.raises(ValueError, match="multiple of the key's"):
        nn.dot_product_attention(q, r.normal(size=(2, 6, 3, 4)), r.normal(size=(2, 6, 3, 4)))
    assert fg.grad(lambda q: nn.dot_product_attention(q, k, v).sum())(q).shape == q.shape
