"""The digits data and the batch iterators: shapes, ranges, determinism under a key, and every
example exactly once per epoch."""

import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn import datasets

import funcgrad as fg
from funcgrad import data


@pytest.fixture(scope="module")
def digits():
    return datasets.load_digits()


def _rows(x) -> list[bytes]:
    """Each example as bytes, sorted: equal lists mean the same examples, in any order."""
    x = np.asarray(x)
    return sorted(row.tobytes() for row in x.reshape(len(x), -1))


# --- load_digits --------------------------------------------------------------------------------


def test_digits_shapes_dtypes_and_ranges(digits):
    (x_train, y_train), (x_test, y_test) = data.load_digits(key=3)
    assert x_train.shape[1:] == (8, 8, 1) and x_test.shape[1:] == (8, 8, 1)
    assert len(x_train) == len(y_train) and len(x_test) == len(y_test)
    assert len(x_train) + len(x_test) == len(digits.target) == 1797
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    for x, y in ((x_train, y_train), (x_test, y_test)):
        assert isinstance(x, fg.Array) and isinstance(y, fg.Array)
        assert 0.0 <= float(np.min(x)) and float(np.max(x)) <= 1.0
        assert set(np.unique(np.asarray(y))) <= set(range(10))


def test_digits_splits_partition_the_dataset(digits):
    (x_train, y_train), (x_test, y_test) = data.load_digits(key=0, layout="flat")
    assert x_train.shape[1] == 64
    examples = np.concatenate(
        [
            np.concatenate([x, np.asarray(y, np.float32)[:, None]], axis=1)
            for x, y in ((x_train, y_train), (x_test, y_test))
        ]
    )
    expected = np.concatenate(
        [(digits.data / 16.0).astype(np.float32), digits.target[:, None].astype(np.float32)],
        axis=1,
    )
    assert _rows(examples) == _rows(expected)


def test_digits_layouts_hold_the_same_images():
    (x_nhwc, y_nhwc), _ = data.load_digits(key=5)
    (x_flat, y_flat), _ = data.load_digits(key=5, layout="flat")
    np.testing.assert_array_equal(np.asarray(x_nhwc).reshape(-1, 64), x_flat)
    np.testing.assert_array_equal(y_nhwc, y_flat)


def test_digits_split_is_deterministic_in_the_key():
    first = data.load_digits(key=7)
    np.testing.assert_array_equal(first[0][1], data.load_digits(key=7)[0][1])
    np.testing.assert_array_equal(first[0][1], data.load_digits(key=fg.random.key(7))[0][1])
    np.testing.assert_array_equal(data.load_digits()[1][1], data.load_digits(key=0)[1][1])
    assert not np.array_equal(first[0][1], data.load_digits(key=8)[0][1])


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.5])
def test_stratified_split_takes_the_fraction_of_every_class(digits, fraction):
    _, (_, y_test) = data.load_digits(key=2, test_fraction=fraction)
    per_class = np.bincount(digits.target, minlength=10)
    expected = [round(n * fraction) for n in per_class]
    assert np.bincount(np.asarray(y_test), minlength=10).tolist() == expected


def test_unstratified_split_takes_the_fraction_of_the_whole():
    _, (_, y_test) = data.load_digits(key=2, test_fraction=0.3, stratify=False)
    assert len(y_test) == round(1797 * 0.3)


def test_bad_digits_arguments_are_named():
    with pytest.raises(ValueError, match="layout must be"):
        data.load_digits(layout="NCHW")
    with pytest.raises(ValueError, match=r"test_fraction must be in \[0, 1\), got 1.0"):
        data.load_digits(test_fraction=1.0)


def test_digits_without_scikit_learn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[examples\]"'):
        data.load_digits()


# --- batches and epochs -------------------------------------------------------------------------


def _dataset(n: int):
    features = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return features, np.arange(n, dtype=np.int32)


@given(
    st.integers(1, 40), st.integers(1, 45), st.booleans(), st.one_of(st.none(), st.integers(0, 9))
)
def test_batches_cover_the_examples_once_in_the_expected_sizes(n, batch_size, drop, seed):
    x, y = _dataset(n)
    if drop and batch_size > n:
        with pytest.raises(ValueError, match=f"batch_size {batch_size} exceeds the {n} examples"):
            data.batches((x, y), batch_size, drop_remainder=drop)
        return
    key = None if seed is None else fg.random.key(seed)
    got = list(data.batches((x, y), batch_size, key=key, drop_remainder=drop))
    full, rest = divmod(n, batch_size)
    sizes = [batch_size] * full + ([rest] if rest and not drop else [])
    assert [len(b[1]) for b in got] == sizes
    seen = np.concatenate([np.asarray(b[1]) for b in got])
    assert len(set(seen.tolist())) == len(seen) == sum(sizes)
    for bx, by in got:
        assert isinstance(bx, fg.Array) and isinstance(by, fg.Array)
        np.testing.assert_array_equal(bx, x[np.asarray(by)])  # rows stay paired
    if key is None:
        np.testing.assert_array_equal(seen, np.arange(sum(sizes)))


def test_batches_shuffle_is_deterministic_in_the_key():
    x, y = _dataset(50)

    def order(key):
        return np.concatenate([np.asarray(b[1]) for b in data.batches((x, y), 10, key=key)])

    np.testing.assert_array_equal(order(fg.random.key(1)), order(fg.random.key(1)))
    assert not np.array_equal(order(fg.random.key(1)), order(fg.random.key(2)))
    assert not np.array_equal(order(fg.random.key(1)), np.arange(50))


def test_batches_keep_the_structure_of_arrays():
    x, y = _dataset(6)
    (batch,) = data.batches({"x": x, "y": y}, 6)
    assert sorted(batch) == ["x", "y"]
    np.testing.assert_array_equal(batch["x"], x)


@pytest.mark.parametrize(
    "batch_size, error, message",
    [
        (0, ValueError, "batch_size must be at least 1, got 0"),
        (-4, ValueError, "batch_size must be at least 1, got -4"),
        (2.5, TypeError, "batch_size must be an int, got 2.5"),
        (True, TypeError, "batch_size must be an int, got True"),
        (11, ValueError, "batch_size 11 exceeds the 10 examples"),
    ],
)
def test_bad_batch_sizes_are_named(batch_size, error, message):
    with pytest.raises(error, match=message):
        data.batches(_dataset(10), batch_size)
    with pytest.raises(error, match=message):
        data.epochs(_dataset(10), batch_size, key=fg.random.key(0), num_epochs=1)


def test_arrays_with_different_lengths_are_refused():
    with pytest.raises(ValueError, match=r"same leading .* shapes \[\(4, 3\), \(5,\)\]"):
        data.batches((np.ones((4, 3)), np.ones(5)), 2)


def test_epochs_visit_every_example_once_each_in_a_new_order():
    x, y = _dataset(23)
    orders = []
    for epoch in data.epochs((x, y), 5, key=fg.random.key(4), num_epochs=3, drop_remainder=False):
        seen = np.concatenate([np.asarray(b[1]) for b in epoch])
        assert sorted(seen.tolist()) == list(range(23))
        orders.append(seen)
    assert len(orders) == 3
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    # Epoch e's order does not depend on how many epochs were asked for (resuming works).
    (again,) = [
        np.concatenate([np.asarray(b[1]) for b in epoch])
        for epoch in data.epochs(
            (x, y), 5, key=fg.random.key(4), num_epochs=1, drop_remainder=False
        )
    ]
    np.testing.assert_array_equal(again, orders[0])


def test_bad_num_epochs_is_named():
    with pytest.raises(ValueError, match="num_epochs must be an int >= 0, got -1"):
        data.epochs(_dataset(4), 2, key=fg.random.key(0), num_epochs=-1)
