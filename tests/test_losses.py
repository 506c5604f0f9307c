"""funcgrad's losses (funcgrad.nn.losses, also funcgrad.optim.losses) against NumPy written
from each loss's definition, per example where a loop reads more plainly; derivatives
against central finite differences in float64; jit against eager, vmap against a loop; and
finite values and gradients at logits of +-1e4, where the mathematics is finite."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import nn, optim
from funcgrad.test_util import check_grads
from tests.checks import assert_close, check_batching, check_staging

L = optim.losses
TIGHT = dict(rtol=1e-12, atol=1e-12)


def rng(seed=0):
    return np.random.default_rng(seed)


def log_softmax(x):
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0, x)


# ---------------------------------------------------------------------------------------------
# Where they are found


def test_losses_are_reachable_under_optax_names():
    assert set(L.__all__) == set(nn.losses.__all__)
    for name in nn.losses.__all__:
        assert getattr(L, name) is getattr(nn.losses, name)
    # The names Optax's top level gives its losses.
    top_level = """convex_kl_divergence cosine_distance cosine_similarity ctc_loss
        ctc_loss_with_forward_probs generalized_kl_divergence hinge_loss huber_loss
        kl_divergence l2_loss log_cosh ntxent safe_softmax_cross_entropy
        sigmoid_binary_cross_entropy sigmoid_focal_loss smooth_labels softmax_cross_entropy
        softmax_cross_entropy_with_integer_labels squared_error""".split()
    for name in top_level:
        assert getattr(optim, name) is getattr(nn.losses, name)


# ---------------------------------------------------------------------------------------------
# Regression


def test_regression_losses_match_their_definitions():
    x, y = rng().normal(size=(2, 4, 5)) * 2
    e = x - y
    assert_close(L.squared_error(x, y), e * e, **TIGHT)
    assert_close(L.squared_error(x), x * x, **TIGHT)
    assert_close(L.l2_loss(x, y), e * e / 2, **TIGHT)
    assert_close(L.mean_squared_error(x, y), (e * e).mean(-1), **TIGHT)
    for delta in (1.0, 0.7, 3.0):
        wanted = np.where(np.abs(e) <= delta, e * e / 2, delta * (np.abs(e) - delta / 2))
        assert_close(L.huber_loss(x, y, delta=delta), wanted, **TIGHT)
    assert_close(L.log_cosh(x, y), np.log(np.cosh(e)), **TIGHT)
    assert_close(L.log_cosh(x), np.log(np.cosh(x)), **TIGHT)
    with pytest.raises(ValueError, match=r"predictions \(4, 5\) and targets \(4, 1\)"):
        L.squared_error(x, y[:, :1])


def test_cosine_similarity_and_distance():
    x, y = rng(1).normal(size=(2, 4, 5))
    cosines = [a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(x, y)]
    assert_close(L.cosine_similarity(x, y), cosines, **TIGHT)
    assert_close(L.cosine_distance(x, y), 1 - np.array(cosines), **TIGHT)
    columns = [a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(x.T, y.T)]
    assert_close(L.cosine_similarity(x, y, axis=0), columns, **TIGHT)
    mask = x > -0.5
    masked = [
        a[m] @ b[m] / (np.linalg.norm(a[m]) * np.linalg.norm(b[m])) for a, b, m in zip(x, y, mask)
    ]
    assert_close(L.cosine_similarity(x, y, where=mask), masked, **TIGHT)
    # epsilon bounds the squared norms from below: a zero vector gives 0, not nan.
    zero = np.zeros(5)
    assert np.isnan(float(L.cosine_similarity(zero, y[0])))
    assert float(L.cosine_similarity(zero, y[0], epsilon=1e-12)) == 0.0
    small = x[0] * 1e-3
    wanted = small @ y[0] / (np.sqrt(0.5) * np.linalg.norm(y[0]))
    assert_close(L.cosine_similarity(small, y[0], epsilon=0.5), wanted, **TIGHT)


def test_huber_derivative_is_the_clipped_error():
    e = np.array([-3.0, -1.0, -0.4, 0.0, 0.4, 1.0, 3.0])
    assert_close(fg.vmap(fg.grad(L.huber_loss))(e), np.clip(e, -1, 1), **TIGHT)
    assert_close(fg.vmap(fg.grad(L.log_cosh))(e), np.tanh(e), **TIGHT)


# ---------------------------------------------------------------------------------------------
# Cross-entropies


def test_softmax_cross_entropy_and_its_masks():
    x = rng(2).normal(size=(4, 5)) * 3
    labels = rng(3).dirichlet(np.ones(5), size=4)
    assert_close(
        L.softmax_cross_entropy(x, labels),
        [-(y * log_softmax(row)).sum() for row, y in zip(x, labels)],
        **TIGHT,
    )
    assert_close(
        L.softmax_cross_entropy(x, labels, axis=0),
        [-(y * log_softmax(col)).sum() for col, y in zip(x.T, labels.T)],
        **TIGHT,
    )
    classes = rng(4).random((4, 5)) > 0.4
    classes[:, 0] = True
    wanted = [-(y[m] * log_softmax(row[m])).sum() for row, y, m in zip(x, labels, classes)]
    assert_close(L.softmax_cross_entropy(x, labels, where=classes), wanted, **TIGHT)
    examples = np.array([True, False, True, True])
    full = L.softmax_cross_entropy(x, labels)
    assert_close(L.softmax_cross_entropy(x, labels, where=examples), np.where(examples, full, 0))
    with pytest.raises(ValueError, match=r"logits \(4, 5\) and labels \(4, 4\)"):
        L.softmax_cross_entropy(x, labels[:, :4])


def test_integer_labels_over_one_or_several_class_axes():
    x = rng(5).normal(size=(4, 5)) * 3
    labels = np.array([0, 4, 2, 2])
    wanted = [-log_softmax(row)[k] for row, k in zip(x, labels)]
    assert_close(L.softmax_cross_entropy_with_integer_labels(x, labels), wanted, **TIGHT)
    classes = rng(6).random((4, 5)) > 0.4
    classes[np.arange(4), labels] = True
    wanted = [-(row[k] - np.log(np.exp(row[m]).sum())) for row, k, m in zip(x, labels, classes)]
    assert_close(
        L.softmax_cross_entropy_with_integer_labels(x, labels, where=classes), wanted, **TIGHT
    )
    # An example with no class left has loss 0.
    examples = np.array([True, True, False, True])
    full = np.asarray(L.softmax_cross_entropy_with_integer_labels(x, labels))
    got = L.softmax_cross_entropy_with_integer_labels(x, labels, where=examples)
    assert_close(got, np.where(examples, full, 0), **TIGHT)
    # Classes on axes (1, 2) of (batch, 3, 4, time): a label is a flat index into the 3 x 4.
    blocks = rng(7).normal(size=(2, 3, 4, 5))
    flat_labels = rng(8).integers(0, 12, (2, 5))
    wanted = [
        [-log_softmax(blocks[b, :, :, t].ravel())[flat_labels[b, t]] for t in range(5)]
        for b in range(2)
    ]
    got = L.softmax_cross_entropy_with_integer_labels(blocks, flat_labels, axis=(1, 2))
    assert_close(got, wanted, **TIGHT)
    with pytest.raises(TypeError, match="labels must be integers, got float64"):
        L.softmax_cross_entropy_with_integer_labels(x, labels.astype(float))
    with pytest.raises(ValueError, match=r"labels must have shape \(2, 5\)"):
        L.softmax_cross_entropy_with_integer_labels(blocks, flat_labels.T, axis=(1, 2))


def test_safe_softmax_cross_entropy_takes_zero_log_zero_as_zero():
    x = np.array([[-np.inf, 0.5, 1.0], [0.2, -0.3, 2.0]])
    labels = np.array([[0.0, 0.3, 0.7], [0.2, 0.2, 0.6]])
    finite = [
        -(labels[0, 1:] * log_softmax(x[0, 1:])).sum(),
        -(labels[1] * log_softmax(x[1])).sum(),
    ]
    assert_close(L.safe_softmax_cross_entropy(x, labels), finite, **TIGHT)
    assert np.isnan(np.asarray(L.softmax_cross_entropy(x, labels))[0])
    grad = fg.grad(lambda z: L.safe_softmax_cross_entropy(z, labels).sum())(x)
    p = np.exp(log_softmax(x[0, 1:]))
    assert_close(grad[0], np.concatenate([[0.0], p - labels[0, 1:]]), **TIGHT)


def test_poly_loss_and_label_smoothing():
    x = rng(9).normal(size=(4, 5))
    labels = np.eye(5)[[1, 0, 4, 4]]
    for epsilon in (2.0, -1.0):
        wanted = [
            -(y * log_softmax(row)).sum() + epsilon * (1 - (y * np.exp(log_softmax(row))).sum())
            for row, y in zip(x, labels)
        ]
        assert_close(L.poly_loss_cross_entropy(x, labels, epsilon=epsilon), wanted, **TIGHT)
    classes = np.ones((4, 5), bool)
    classes[:, 2] = False
    labels_kept = labels[:, [0, 1, 3, 4]]
    wanted = [
        -(y * log_softmax(row)).sum() + 2 * (1 - (y * np.exp(log_softmax(row))).sum())
        for row, y in zip(x[:, [0, 1, 3, 4]], labels_kept)
    ]
    assert_close(L.poly_loss_cross_entropy(x, labels, where=classes), wanted, **TIGHT)

    assert_close(L.smooth_labels(labels, 0.1), 0.9 * labels + 0.1 / 5, **TIGHT)
    assert_close(L.smooth_labels(labels, 0.1, axis=(0, 1)), 0.9 * labels + 0.1 / 20, **TIGHT)
    smoothed = L.smooth_labels(labels, 0.2, where=classes)
    assert_close(smoothed, 0.8 * labels + 0.2 / 4, **TIGHT)


def test_sigmoid_focal_loss_matches_the_papers_definition():
    x = rng(10).normal(size=(3, 4)) * 3
    y = (rng(11).random((3, 4)) > 0.5).astype(float)
    p = sigmoid(x)
    p_t = y * p + (1 - y) * (1 - p)
    for gamma in (0.0, 0.5, 2.0):
        assert_close(
            L.sigmoid_focal_loss(x, y, gamma=gamma), -((1 - p_t) ** gamma) * np.log(p_t), **TIGHT
        )
        alpha_t = 0.25 * y + 0.75 * (1 - y)
        wanted = -alpha_t * (1 - p_t) ** gamma * np.log(p_t)
        assert_close(L.sigmoid_focal_loss(x, y, alpha=0.25, gamma=gamma), wanted, **TIGHT)
    # Soft labels: the cross-entropy scaled by ((1 - y) p + y (1 - p))**gamma.
    soft = rng(12).random((3, 4))
    cross_entropy = -soft * np.log(p) - (1 - soft) * np.log(1 - p)
    wanted = ((1 - soft) * p + soft * (1 - p)) ** 2 * cross_entropy
    assert_close(L.sigmoid_focal_loss(x, soft), wanted, **TIGHT)
    assert_close(L.sigmoid_binary_cross_entropy(x, soft), cross_entropy, **TIGHT)


# ---------------------------------------------------------------------------------------------
# Margin losses


def sparsemax(s):
    """The projection onto the simplex by bisection on the threshold tau, where the
    positive parts of s - tau sum to 1."""
    low, high = s.max() - 1, s.max()
    for _ in range(100):
        tau = (low + high) / 2
        low, high = (tau, high) if np.maximum(s - tau, 0).sum() > 1 else (low, tau)
    return np.maximum(s - (low + high) / 2, 0)


def test_margin_losses_match_their_definitions():
    x = rng(13).normal(size=(4, 5)) * 2
    t = np.sign(rng(14).normal(size=(4, 5)))
    labels = np.array([3, 0, 1, 3])
    assert_close(L.hinge_loss(x, t), np.maximum(0, 1 - x * t), **TIGHT)
    assert_close(L.perceptron_loss(x, t), np.maximum(0, -x * t), **TIGHT)
    hinge = [max(s[k] + (k != y) for k in range(5)) - s[y] for s, y in zip(x, labels)]
    assert_close(L.multiclass_hinge_loss(x, labels), hinge, **TIGHT)
    perceptron = [s.max() - s[y] for s, y in zip(x, labels)]
    assert_close(L.multiclass_perceptron_loss(x, labels), perceptron, **TIGHT)
    with pytest.raises(ValueError, match=r"predictor_outputs \(4, 5\) and targets \(5,\)"):
        L.perceptron_loss(x, t[0])
    with pytest.raises(ValueError, match=r"labels must have shape scores.shape\[:-1\] = \(4,\)"):
        L.multiclass_hinge_loss(x, labels[:2])


def test_sparsemax_losses():
    x = rng(15).normal(size=(6,)) * 2
    y = np.array([0, 1, 1, 0, 1, 0])
    # Zero where sparse_sigmoid(x) = (x + 1) / 2 clipped to [0, 1] equals y, quadratic between.
    z = np.where(y == 1, -x, x)
    wanted = np.where(z <= -1, 0, np.where(z >= 1, z, (z + 1) ** 2 / 4))
    assert_close(L.sparsemax_loss(x, y), wanted, **TIGHT)

    scores = rng(16).normal(size=(5, 4))
    scores[0] = [3.0, 0.1, -2.0, 0.0]  # sparsemax all on class 0
    labels = np.array([0, 2, 1, 3, 0])
    wanted, grads = [], []
    for s, k in zip(scores, labels):
        p = sparsemax(s)
        wanted.append(p @ s + (1 - p @ p) / 2 - s[k])
        grads.append(p - np.eye(4)[k])
    assert_close(L.multiclass_sparsemax_loss(scores, labels), wanted, rtol=1e-12, atol=1e-12)
    assert float(L.multiclass_sparsemax_loss(scores, labels)[0]) == 0.0
    grad = fg.grad(lambda s: L.multiclass_sparsemax_loss(s, labels).sum())(scores)
    assert_close(grad, np.array(grads), rtol=1e-9, atol=1e-9)
    # Leading axes are examples too.
    batched = L.multiclass_sparsemax_loss(scores[None].repeat(2, 0), labels[None].repeat(2, 0))
    assert_close(batched, np.array([wanted, wanted]), rtol=1e-12, atol=1e-12)


def test_fenchel_young_loss_of_logsumexp_is_the_cross_entropy():
    x = rng(17).normal(size=(3, 5))
    targets = rng(18).dirichlet(np.ones(5), size=3)
    loss = L.make_fenchel_young_loss(nn.logsumexp)
    wanted = [-(y * log_softmax(row)).sum() for row, y in zip(x, targets)]
    assert_close(loss(x, targets), wanted, **TIGHT)
    # With max it is the multiclass perceptron loss of one-hot targets.
    labels = np.array([1, 4, 0])
    perceptron = L.make_fenchel_young_loss(fnp.max)(x, np.eye(5)[labels])
    assert_close(perceptron, L.multiclass_perceptron_loss(x, labels), **TIGHT)


# ---------------------------------------------------------------------------------------------
# Divergences


def test_kl_divergences_match_their_definitions():
    log_p = np.log(rng(19).dirichlet(np.ones(5), size=3))
    q = rng(20).dirichlet(np.ones(5), size=3)
    q[0, 2] = 0.0  # 0 log 0 = 0
    kl = [
        sum(qi * (np.log(qi) - lpi) for qi, lpi in zip(qr, lr) if qi > 0)
        for qr, lr in zip(q, log_p)
    ]
    assert_close(L.kl_divergence(log_p, q), kl, **TIGHT)
    with np.errstate(divide="ignore"):
        log_q = np.log(q)
    assert_close(L.kl_divergence_with_log_targets(log_p, log_q), kl, **TIGHT)
    mass_gap = (np.exp(log_p) - q).sum(-1)
    assert_close(L.generalized_kl_divergence(log_p, q), np.array(kl) + mass_gap, **TIGHT)
    assert_close(L.convex_kl_divergence(log_p, q), np.array(kl) + mass_gap, **TIGHT)
    # Unnormalized measures: the generalized divergence stays positive where KL turns negative.
    heavy = np.log(np.full(5, 2.0))
    assert float(L.kl_divergence(heavy, q[1])) < 0 < float(L.generalized_kl_divergence(heavy, q[1]))
    mask = np.array([[1, 1, 0, 1, 1]] * 3, bool)
    kl_masked = [
        sum(qi * (np.log(qi) - lpi) for qi, lpi in zip(qr[m], lr[m]) if qi > 0)
        for qr, lr, m in zip(q, log_p, mask)
    ]
    assert_close(L.kl_divergence(log_p, q, where=mask), kl_masked, **TIGHT)
    columns = [(qc * (np.log(qc) - lc)).sum() for qc, lc in zip(q[1:].T, log_p[1:].T)]
    assert_close(L.kl_divergence(log_p[1:], q[1:], axis=0), columns, **TIGHT)
    # The derivative in a zero target is finite (log 0 is not differentiated).
    grad = fg.grad(lambda t: L.kl_divergence(log_p[0], t))(q[0])
    assert np.all(np.isfinite(np.asarray(grad)))


# ---------------------------------------------------------------------------------------------
# Embeddings


def test_triplet_margin_loss():
    a, p, n = rng(21).normal(size=(3, 4, 6))
    for degree in (1, 2, 3):

        def distance(x, y, degree=degree):
            return ((np.abs(x - y) ** degree).sum(-1) + 1e-6) ** (1 / degree)

        wanted = np.maximum(distance(a, p) - distance(a, n) + 0.5, 0)
        got = L.triplet_margin_loss(a, p, n, norm_degree=degree, margin=0.5)
        assert_close(got, wanted, **TIGHT)
    wanted = np.maximum(np.linalg.norm(a - p, axis=0) - np.linalg.norm(a - n, axis=0) + 1, 0)
    assert_close(L.triplet_margin_loss(a, p, n, axis=0, eps=0.0), wanted, **TIGHT)


def ntxent_reference(embeddings, labels, temperature):
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    s = unit @ unit.T / temperature
    losses = []
    for i, j in itertools.permutations(range(len(labels)), 2):
        if labels[i] != labels[j]:
            continue
        negatives = [k for k in range(len(labels)) if labels[k] != labels[i]]
        denominator = np.exp(s[i, j]) + sum(np.exp(s[i, k]) for k in negatives)
        losses.append(-np.log(np.exp(s[i, j]) / denominator))
    return np.mean(losses)


def test_ntxent():
    embeddings = rng(22).normal(size=(6, 3))
    labels = np.array([0, 0, 1, 1, 2, 0])
    for temperature in (0.07, 1.0):
        wanted = ntxent_reference(embeddings, labels, temperature)
        assert_close(L.ntxent(embeddings, labels, temperature), wanted, rtol=1e-11, atol=1e-11)
    # No negatives: each positive is the only choice, so the loss is 0.
    assert float(L.ntxent(embeddings, np.zeros(6, int))) == 0.0
    with pytest.raises(ValueError, match=r"\(6, 3\) and \(5,\)"):
        L.ntxent(embeddings, labels[:5])


# ---------------------------------------------------------------------------------------------
# Segmentation and ranking


def dice_reference(probs, targets, alpha=0.5, beta=0.5, smooth=1.0):
    """Per example and class, over the spatial axes (all but the first and last)."""
    batch, classes = probs.shape[0], probs.shape[-1]
    out = np.zeros((batch, classes))
    for b in range(batch):
        for c in range(classes):
            p, t = probs[b, ..., c].ravel(), targets[b, ..., c].ravel()
            overlap = (p * t).sum()
            fp, fn = p.sum() - overlap, t.sum() - overlap
            out[b, c] = 1 - (overlap + smooth) / (overlap + alpha * fp + beta * fn + smooth)
    return out


def test_dice_losses():
    logits = rng(23).normal(size=(2, 4, 4, 3))
    targets = np.eye(3)[rng(24).integers(0, 3, (2, 4, 4))]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    per_class = dice_reference(probs, targets)
    assert_close(L.dice_loss(logits, targets), per_class.mean(-1), **TIGHT)
    assert_close(L.dice_loss(logits, targets, reduction="none"), per_class, **TIGHT)
    assert_close(L.dice_loss(probs, targets, apply_softmax=False), per_class.mean(-1), **TIGHT)
    tversky = dice_reference(probs, targets, alpha=0.3, beta=0.7, smooth=0.5)
    got = L.dice_loss(logits, targets, alpha=0.3, beta=0.7, smooth=0.5, reduction="sum")
    assert_close(got, tversky.sum(-1), **TIGHT)
    weights = np.array([0.5, 1.0, 2.0])
    got = L.dice_loss(logits, targets, class_weights=weights, ignore_background=True)
    assert_close(got, (per_class * weights)[:, 1:].mean(-1), **TIGHT)

    volumes = targets.sum((0, 1, 2))
    class_weights = 1 / (volumes**2 + 1e-7)
    class_weights *= 3 / class_weights.sum()
    wanted = (per_class * class_weights).mean()
    assert_close(L.multiclass_generalized_dice_loss(logits, targets), wanted, **TIGHT)

    # One channel: the sigmoid, with or without the channel axis, or probabilities as given.
    binary = dice_reference(sigmoid(logits[..., :1]), targets[..., :1])[:, 0]
    assert_close(L.binary_dice_loss(logits[..., 0], targets[..., 0]), binary, **TIGHT)
    assert_close(L.binary_dice_loss(logits[..., :1], targets[..., :1]), binary, **TIGHT)
    as_given = sigmoid(logits[..., 0])
    got = L.binary_dice_loss(as_given, targets[..., 0], apply_sigmoid=False)
    assert_close(got, binary, **TIGHT)

    with pytest.raises(ValueError, match="must be probabilities that sum to 1"):
        L.dice_loss(probs * 2, targets, apply_softmax=False)
    with pytest.raises(ValueError, match="reduction must be one of"):
        L.dice_loss(logits, targets, reduction="max")
    with pytest.raises(ValueError, match=r"\(2, 4, 4, 3\) and targets \(2, 4, 4, 2\)"):
        L.dice_loss(logits, targets[..., :2])


def test_ranking_softmax_loss():
    scores = rng(25).normal(size=(3, 5))
    labels = (rng(26).random((3, 5)) > 0.5).astype(float)
    per_list = [-(y * log_softmax(s)).sum() for s, y in zip(scores, labels)]
    assert_close(L.ranking_softmax_loss(scores, labels), np.mean(per_list), **TIGHT)
    assert_close(L.ranking_softmax_loss(scores, labels, reduce_fn=None), per_list, **TIGHT)
    assert_close(L.ranking_softmax_loss(scores, labels, reduce_fn=fnp.sum), sum(per_list), **TIGHT)
    weights = rng(27).random((3, 5))
    weighted = [-(w * y * log_softmax(s)).sum() for s, y, w in zip(scores, labels, weights)]
    assert_close(L.ranking_softmax_loss(scores, labels, weights=weights), np.mean(weighted))
    items = rng(28).random((3, 5)) > 0.3
    items[1] = False  # a list with no valid item leaves the mean
    masked = [
        -(y[m] * log_softmax(s[m])).sum() if m.any() else None
        for s, y, m in zip(scores, labels, items)
    ]
    got = L.ranking_softmax_loss(scores, labels, where=items)
    assert_close(got, (masked[0] + masked[2]) / 2, **TIGHT)
    got = L.ranking_softmax_loss(scores, labels, where=items, reduce_fn=None)
    assert_close(got, [masked[0], 0.0, masked[2]], **TIGHT)
    assert float(L.ranking_softmax_loss(scores, labels, where=np.zeros((3, 5), bool))) == 0.0


# ---------------------------------------------------------------------------------------------
# CTC


def ctc_brute_force(logits, labels, blank):
    """-log of the total probability of every alignment (one class per frame) that reads as
    `labels` once repeats are merged and blanks dropped."""
    log_probs = np.array([log_softmax(frame) for frame in logits])
    frames, classes = logits.shape
    total = 0.0
    for path in itertools.product(range(classes), repeat=frames):
        read = [s for i, s in enumerate(path) if s != blank and (i == 0 or s != path[i - 1])]
        if read == list(labels):
            total += math.exp(sum(log_probs[t, s] for t, s in enumerate(path)))
    return -math.log(total) if total > 0 else math.inf


def graves_alpha(logits, labels, blank):
    """Graves et al.'s forward variables alpha[t, s] over the labels with blanks around and
    between them, (blank, l1, blank, ..., lN, blank), in probability space."""
    probs = np.array([np.exp(log_softmax(frame)) for frame in logits])
    extended = [blank]
    for label in labels:
        extended += [label, blank]
    alpha = np.zeros((len(logits), len(extended)))
    alpha[0, 0] = probs[0, blank]
    if len(extended) > 1:
        alpha[0, 1] = probs[0, extended[1]]
    for t in range(1, len(logits)):
        for s, symbol in enumerate(extended):
            total = alpha[t - 1, s] + (alpha[t - 1, s - 1] if s >= 1 else 0)
            if s >= 2 and symbol != blank and symbol != extended[s - 2]:
                total += alpha[t - 1, s - 2]
            alpha[t, s] = total * probs[t, symbol]
    return alpha


CTC_LABELS = np.array([[1, 2, 2], [2, 1, 0], [1, 1, 0], [3, 0, 0]])
CTC_LABEL_PADDINGS = np.array([[0, 0, 0], [0, 0, 1], [0, 0, 1], [0, 1, 1]], float)
CTC_FRAME_COUNTS = (5, 4, 5, 3)


def ctc_batch(seed, frames=5, classes=4):
    logits = rng(seed).normal(size=(4, frames, classes)) * 1.5
    paddings = (np.arange(frames)[None] >= np.array(CTC_FRAME_COUNTS)[:, None]).astype(float)
    return logits, paddings


@pytest.mark.parametrize("blank_id", [0, 3])
def test_ctc_loss_sums_every_alignment(blank_id):
    logits, paddings = ctc_batch(29)
    labels = CTC_LABELS if blank_id == 0 else np.where(CTC_LABELS == 3, 0, CTC_LABELS)
    loss = np.asarray(L.ctc_loss(logits, paddings, labels, CTC_LABEL_PADDINGS, blank_id=blank_id))
    for b, frames in enumerate(CTC_FRAME_COUNTS):
        length = int((CTC_LABEL_PADDINGS[b] == 0).sum())
        wanted = ctc_brute_force(logits[b, :frames], labels[b, :length], blank_id)
        assert loss[b] == pytest.approx(wanted, rel=1e-12)


def test_ctc_of_no_labels_and_of_impossible_ones():
    logits, paddings = ctc_batch(30, frames=3)
    labels = np.zeros((4, 0), int)
    loss = L.ctc_loss(logits[:1], paddings[:1], labels[:1], labels[:1].astype(float))
    assert float(loss[0]) == pytest.approx(ctc_brute_force(logits[0], [], 0), rel=1e-12)
    # 1, 1 needs a blank between: three frames at least; two give (nearly) probability 0.
    two_frames = np.array([[0, 0, 1.0]])
    loss = L.ctc_loss(logits[:1], two_frames, np.array([[1, 1]]), np.zeros((1, 2)))
    assert float(loss[0]) > 1e4


def test_ctc_forward_probabilities_are_graves_alphas():
    logits, paddings = ctc_batch(31, frames=8, classes=5)
    labels = np.array([[1, 2, 2], [2, 1, 1], [4, 3, 0], [3, 3, 3]])
    label_paddings = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]], float)
    frame_counts = (8, 8, 6, 7)
    paddings = (np.arange(8)[None] >= np.array(frame_counts)[:, None]).astype(float)
    loss, log_blank, log_label = L.ctc_loss_with_forward_probs(
        logits, paddings, labels, label_paddings
    )
    assert log_blank.shape == (8, 4, 4) and log_label.shape == (8, 4, 3)
    log_blank, log_label = np.asarray(log_blank), np.asarray(log_label)
    for b, frames in enumerate(frame_counts):
        length = int((label_paddings[b] == 0).sum())
        alpha = graves_alpha(logits[b, :frames], labels[b, :length], 0)
        # Frames after the last real one carry its state; the final frame holds the sums
        # that end either in a blank or on the label.
        last = alpha[-1].copy()
        last[2::2] += alpha[-1][1::2]
        for t in range(8):
            row = alpha[min(t, frames - 1)] if t < 7 else last
            blank_got, label_got = log_blank[t, b, : length + 1], log_label[t, b, :length]
            for got, want in ((blank_got, row[0::2]), (label_got, row[1::2])):
                reachable = want > 0
                with np.errstate(divide="ignore"):
                    assert_close(got[reachable], np.log(want[reachable]), rtol=1e-12, atol=1e-12)
                assert np.all(got[~reachable] < -1e4)
        assert float(loss[b]) == pytest.approx(-np.log(last[2 * length]), rel=1e-12)


def test_ctc_input_errors():
    logits, paddings = ctc_batch(32)
    with pytest.raises(ValueError, match=r"logit_paddings must have shape \(batch, frames\)"):
        L.ctc_loss(logits, paddings[:, :3], CTC_LABELS, CTC_LABEL_PADDINGS)
    with pytest.raises(ValueError, match=r"label_paddings must have the labels' shape \(4, 3\)"):
        L.ctc_loss(logits, paddings, CTC_LABELS, CTC_LABEL_PADDINGS[:, :2])
    with pytest.raises(ValueError, match=r"logits must have shape \(batch, frames, classes\)"):
        L.ctc_loss(logits[0], paddings, CTC_LABELS, CTC_LABEL_PADDINGS)
    with pytest.raises(TypeError, match="labels must be integers"):
        L.ctc_loss(logits, paddings, CTC_LABELS * 1.0, CTC_LABEL_PADDINGS)


# ---------------------------------------------------------------------------------------------
# Derivatives, staging and batching


def _smooth_cases():
    """(name, loss of the float64 arrays it differentiates in, those arrays): each loss away
    from its kinks, the fixed arguments (labels, masks, paddings) closed over."""
    r = rng(33)
    x, y = r.normal(size=(2, 3, 4))
    probs = r.dirichlet(np.ones(4), size=3)
    labels = np.array([2, 0, 3])
    mask = np.array([[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1]], bool)
    logits, paddings = ctc_batch(34)
    image = r.normal(size=(2, 3, 3, 4))
    image_targets = np.eye(4)[r.integers(0, 4, (2, 3, 3))]
    cases = [
        ("huber", lambda a, b: L.huber_loss(a, b, delta=0.8), (x, y)),
        ("log_cosh", L.log_cosh, (x, y)),
        ("cosine", lambda a, b: L.cosine_distance(a, b, where=mask), (x, y)),
        ("softmax_ce", lambda a, p: L.softmax_cross_entropy(a, p, where=mask), (x, probs)),
        ("integer_ce", lambda a: L.softmax_cross_entropy_with_integer_labels(a, labels), (x,)),
        ("safe_ce", L.safe_softmax_cross_entropy, (x, probs)),
        ("poly", lambda a, p: L.poly_loss_cross_entropy(a, p, epsilon=1.5), (x, probs)),
        ("sigmoid_ce", L.sigmoid_binary_cross_entropy, (x, probs)),
        ("focal", lambda a, p: L.sigmoid_focal_loss(a, p, alpha=0.3, gamma=1.5), (x, probs)),
        ("kl", L.kl_divergence, (np.log(probs[::-1]), probs)),
        ("kl_log", L.kl_divergence_with_log_targets, (np.log(probs[::-1]), np.log(probs))),
        ("generalized_kl", L.generalized_kl_divergence, (x, probs)),
        ("sparsemax", lambda a: L.multiclass_sparsemax_loss(a * 0.3, labels), (x,)),
        ("triplet", lambda a, p, n: L.triplet_margin_loss(a, p, n, margin=5.0), (x, y, -x)),
        ("ntxent", lambda e: L.ntxent(e, np.array([0, 1, 0, 1])), (r.normal(size=(4, 3)),)),
        ("dice", L.dice_loss, (image, image_targets)),
        ("generalized_dice", L.multiclass_generalized_dice_loss, (image, image_targets)),
        ("ranking", lambda a: L.ranking_softmax_loss(a, probs, where=mask), (x,)),
        (
            "ctc",
            lambda a: L.ctc_loss(a, paddings, CTC_LABELS, CTC_LABEL_PADDINGS),
            (logits,),
        ),
    ]
    return [pytest.param(loss, args, id=name) for name, loss, args in cases]


@pytest.mark.parametrize("loss, args", _smooth_cases())
def test_gradients_match_finite_differences(loss, args):
    check_grads(loss, args, order=1)


@pytest.mark.parametrize("loss, args", _smooth_cases())
def test_jit_matches_eager(loss, args):
    check_staging(loss, *args)


def test_second_derivatives_of_the_cross_entropy_and_ctc():
    x = rng(35).normal(size=(2, 4))
    check_grads(lambda a: L.softmax_cross_entropy_with_integer_labels(a, np.array([1, 3])), (x,), 2)
    logits, paddings = ctc_batch(36, frames=4)
    check_grads(lambda a: L.ctc_loss(a, paddings, CTC_LABELS, CTC_LABEL_PADDINGS), (logits,), 2)


def test_vmap_matches_a_loop():
    logits = rng(37).normal(size=(3, 4, 5, 4))
    paddings = np.stack([ctc_batch(0)[1]] * 3)
    check_batching(
        lambda a, p: L.ctc_loss(a, p, CTC_LABELS, CTC_LABEL_PADDINGS), [logits, paddings], [0, 0]
    )
    scores = rng(38).normal(size=(3, 4, 5))
    labels = rng(39).integers(0, 5, (3, 4))
    check_batching(L.multiclass_sparsemax_loss, [scores, labels], [0, 0])
    mask = rng(40).random((3, 4, 5)) > 0.3
    check_batching(
        lambda a, k, m: L.softmax_cross_entropy_with_integer_labels(a, k, where=m),
        [scores, labels, mask],
        [0, 0, 0],
    )


# ---------------------------------------------------------------------------------------------
# Extreme logits


def test_extreme_logits_give_finite_values_and_gradients():
    """Logits of +-1e4 in float32: each loss is finite there, and the limits are right."""
    big = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4]], np.float32)
    one_hot = np.eye(3, dtype=np.float32)[[0, 1]]
    labels = np.array([0, 1])
    cases = {
        "softmax_ce": (lambda a: L.softmax_cross_entropy(a, one_hot), [0.0, 2e4]),
        "integer_ce": (lambda a: L.softmax_cross_entropy_with_integer_labels(a, labels), [0, 2e4]),
        "safe_ce": (lambda a: L.safe_softmax_cross_entropy(a, one_hot), [0.0, 2e4]),
        "poly": (lambda a: L.poly_loss_cross_entropy(a, one_hot), [0.0, 2e4 + 2]),
        "sigmoid_ce": (
            lambda a: L.sigmoid_binary_cross_entropy(a, one_hot),
            [[0, 0, math.log(2)], [0, 1e4, 1e4]],
        ),
        "focal": (
            lambda a: L.sigmoid_focal_loss(a, one_hot, gamma=0.5),
            [[0, 0, 0.5**0.5 * math.log(2)], [0, 1e4, 1e4]],
        ),
        "multiclass_hinge": (lambda a: L.multiclass_hinge_loss(a, labels), [0, 2e4 + 1]),
        "multiclass_sparsemax": (lambda a: L.multiclass_sparsemax_loss(a, labels), [0, 2e4]),
        "log_cosh": (L.log_cosh, np.where(big == 0, 0, 1e4 - math.log(2))),
        "huber": (L.huber_loss, np.where(big == 0, 0, 1e4 - 0.5)),
        "kl": (lambda a: L.kl_divergence(nn.log_softmax(a), one_hot), [0, 2e4]),
        "kl_log": (
            lambda a: L.kl_divergence_with_log_targets(nn.log_softmax(a), np.log(one_hot + 0)),
            [0, 2e4],
        ),
        "ranking": (lambda a: L.ranking_softmax_loss(a, one_hot, reduce_fn=None), [0, 2e4]),
    }
    with np.errstate(divide="ignore"):
        for name, (loss, wanted) in cases.items():
            value = np.asarray(loss(big))
            np.testing.assert_allclose(value, wanted, rtol=1e-6, atol=1e-6, err_msg=name)
            grad = fg.grad(lambda a, loss=loss: fnp.sum(loss(a)))(big)
            assert np.all(np.isfinite(np.asarray(grad))), name
    # Similarities of +-1e4 after a temperature of 1e-4.
    embeddings = np.concatenate([big, -big[:1], 0.5 * big[1:]])
    ntxent = lambda e: L.ntxent(e, np.array([0, 1, 1, 0]), temperature=1e-4)  # noqa: E731
    assert np.isfinite(float(ntxent(embeddings)))
    assert np.all(np.isfinite(np.asarray(fg.grad(ntxent)(embeddings))))
    logits = rng(41).normal(size=(4, 5, 4)).astype(np.float32) * 1e4
    paddings = ctc_batch(0)[1].astype(np.float32)
    ctc = lambda a: fnp.sum(L.ctc_loss(a, paddings, CTC_LABELS, CTC_LABEL_PADDINGS))  # noqa: E731
    assert np.isfinite(float(ctc(logits)))
    assert np.all(np.isfinite(np.asarray(fg.grad(ctc)(logits))))
