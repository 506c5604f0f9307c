"""Checkpoints: round trips, the safetensors format as other readers see it, atomic writes, and
the errors for damaged files and files that do not match `like`."""

import collections
import dataclasses
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
from funcgrad import checkpoints, dtypes, tree_util
from funcgrad.checkpoints import CheckpointError
from tests.strategies import any_dtypes, arrays, edge_shapes, shapes

Pair = collections.namedtuple("Pair", "w b")


@dataclasses.dataclass
class Dense:
    kernel: object
    bias: object


tree_util.register_dataclass(Dense)


def _assert_same_tree(loaded, expected):
    """Same structure and node types, every leaf an fg.Array with the expected dtype and bits."""
    loaded_leaves, loaded_def = tree_util.tree_flatten(loaded)
    expected_leaves, expected_def = tree_util.tree_flatten(expected)
    assert loaded_def == expected_def
    for got, want in zip(loaded_leaves, expected_leaves):
        want = np.asarray(want)
        assert isinstance(got, fg.Array)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), want)


def _round_trip(tree, **load_kwargs):
    with tempfile.TemporaryDirectory(prefix="funcgrad_ckpt_") as folder:
        path = Path(folder) / "tree.safetensors"
        checkpoints.save(path, tree)
        return checkpoints.load(path, **load_kwargs)


# --- round trips --------------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(any_dtypes, shapes(min_dims=0, max_side=4) | edge_shapes()),
        min_size=1,
        max_size=4,
    ).flatmap(lambda specs: st.tuples(*[arrays(d, s) for d, s in specs]))
)
def test_round_trip_keeps_every_dtype_shape_and_bit(leaves):
    tree = {"params": list(leaves), "last": leaves[-1]}
    _assert_same_tree(_round_trip(tree), tree)
    _assert_same_tree(_round_trip(tree, like=tree), tree)


def test_round_trip_keeps_structure_of_containers_none_and_namedtuples():
    tree = {
        "dense": [np.ones((2, 3), np.float32), (np.arange(3), None)],
        "pair": Pair(w=fg.numpy.zeros(4, dtype=dtypes.bfloat16), b=np.float16(0.5)),
        "flags": np.array([True, False]),
        "small": np.uint8(7),
    }
    loaded = _round_trip(tree)
    _assert_same_tree(loaded, tree)
    assert type(loaded["pair"]) is Pair
    assert loaded["dense"][1][1] is None


def test_python_scalars_are_stored_as_funcgrad_would_make_them():
    loaded = _round_trip({"lr": 0.1, "step": 3, "done": True})
    assert loaded["lr"].dtype == np.float32 and float(loaded["lr"]) == np.float32(0.1)
    assert loaded["step"].dtype == np.int32 and int(loaded["step"]) == 3
    assert loaded["done"].dtype == np.bool_ and bool(loaded["done"])


def test_namedtuple_of_an_unimported_module_comes_back_as_a_stand_in(tmp_path):
    path = tmp_path / "t.safetensors"
    checkpoints.save(path, Pair(np.ones(2), np.zeros(1)))
    saved_name = f"{Pair.__module__}.Pair".encode()
    # A module name of the same length, so the header keeps its size.
    unimported = b"z" * len(Pair.__module__) + b".Pair"
    path.write_bytes(path.read_bytes().replace(saved_name, unimported))
    loaded = checkpoints.load(path)
    assert type(loaded).__name__ == "Pair" and type(loaded) is not Pair
    assert loaded._fields == ("w", "b")


def test_custom_nodes_need_like(tmp_path):
    path = tmp_path / "model.safetensors"
    model = {"layer": Dense(np.ones((2, 3), np.float32), np.zeros(3, np.float32))}
    checkpoints.save(path, model)
    with pytest.raises(CheckpointError, match=r"\['layer'\].*Dense.*like="):
        checkpoints.load(path)
    like = {"layer": Dense(fg.ShapeDtypeStruct((2, 3), np.float32), np.zeros(3, np.float32))}
    loaded = checkpoints.load(path, like=like)
    assert isinstance(loaded["layer"], Dense)
    _assert_same_tree(loaded, model)


def test_like_of_shape_dtype_structs_returns_arrays_in_likes_structure(tmp_path):
    path = tmp_path / "p.safetensors"
    params = [np.ones((3, 4), np.float32), np.arange(5, dtype=np.int64)]
    checkpoints.save(path, params)
    like = [fg.ShapeDtypeStruct((3, 4), np.float32), fg.ShapeDtypeStruct((5,), np.int64)]
    _assert_same_tree(checkpoints.load(path, like=like), params)


# --- the format as other readers and writers see it ---------------------------------------------


def test_safetensors_reads_our_files(tmp_path):
    path = tmp_path / "ours.safetensors"
    tree = {"dense": [np.arange(12, dtype=np.float32).reshape(3, 4), np.int8(-2)], "b": True}
    checkpoints.save(path, tree)
    theirs = safetensors.numpy.load_file(str(path))
    assert sorted(theirs) == ["b", "dense.0", "dense.1"]
    np.testing.assert_array_equal(theirs["dense.0"], tree["dense"][0])
    assert theirs["dense.1"].dtype == np.int8 and theirs["dense.1"].shape == ()
    assert theirs["b"].dtype == np.bool_ and bool(theirs["b"])


def test_safetensors_reads_our_bfloat16_bytes(tmp_path):
    path = tmp_path / "bf16.safetensors"
    exact = np.array([1.5, -2.0, 2.0**100], "<f4")  # bfloat16 holds these exactly
    value = exact.astype(dtypes.bfloat16)
    checkpoints.save(path, {"w": value})
    ((name, info),) = safetensors.deserialize(path.read_bytes())
    assert name == "w" and info["dtype"] == "BF16" and info["shape"] == [3]
    # A bfloat16 is the high half of the float32 with the same value, stored little-endian.
    assert bytes(info["data"]) == (exact.view("<u4") >> 16).astype("<u2").tobytes()


def test_we_read_files_safetensors_writes(tmp_path):
    path = tmp_path / "theirs.safetensors"
    tensors = {
        "dense.kernel": np.arange(6, dtype=np.float64).reshape(2, 3),
        "dense.bias": np.zeros(3, np.float16),
        "step": np.array(9, np.uint32),
    }
    safetensors.numpy.save_file(tensors, str(path), metadata={"note": "from safetensors"})
    _assert_same_tree(checkpoints.load(path), tensors)
    like = {
        "dense": {"kernel": np.empty((2, 3)), "bias": fg.ShapeDtypeStruct((3,), np.float16)},
        "step": fg.ShapeDtypeStruct((), np.uint32),
    }
    expected = {"dense": {"kernel": tensors["dense.kernel"], "bias": tensors["dense.bias"]}}
    expected["step"] = tensors["step"]
    _assert_same_tree(checkpoints.load(path, like=like), expected)


def test_foreign_file_missing_or_extra_tensors_are_named(tmp_path):
    path = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file({"a": np.ones(2), "b": np.ones(2)}, str(path))
    with pytest.raises(CheckpointError, match=r"\['c'\]: file has no tensor 'c'"):
        checkpoints.load(path, like={"a": np.ones(2), "c": np.ones(2)})
    with pytest.raises(CheckpointError, match=r"no leaf for tensors \['b'\]"):
        checkpoints.load(path, like={"a": np.ones(2)})


def test_header_layout_follows_the_format(tmp_path):
    path = tmp_path / "t.safetensors"
    checkpoints.save(path, [np.ones(3, np.float32), np.arange(2, dtype=np.int64)])
    raw = path.read_bytes()
    (header_size,) = struct.unpack("<Q", raw[:8])
    assert raw[8:9] == b"{" and (8 + header_size) % 8 == 0
    assert len(raw) == 8 + header_size + 3 * 4 + 2 * 8


# --- atomic writes ------------------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    checkpoints.save(path, {"w": np.ones(3)})
    before = path.read_bytes()

    def failing_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        checkpoints.save(path, {"w": np.zeros(1000)})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.safetensors"]


def test_bad_leaves_are_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    with pytest.raises(TypeError, match=r"\['name'\] is a str"):
        checkpoints.save(path, {"w": np.ones(2), "name": "mlp"})
    with pytest.raises(TypeError, match=r"\[0\] has dtype complex64"):
        checkpoints.save(path, [np.ones(2, np.complex64)])
    with pytest.raises(TypeError, match="dict keys must be str or int"):
        checkpoints.save(path, {(1, 2): np.ones(2)})
    with pytest.raises(ValueError, match=r"\['a'\]\['b'\] and \['a.b'\].*'a.b'"):
        checkpoints.save(path, {"a.b": np.ones(1), "a": {"b": np.ones(1)}})
    assert list(tmp_path.iterdir()) == []


def test_saving_into_a_missing_folder_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"the folder {tmp_path / 'missing'} does not"):
        checkpoints.save(tmp_path / "missing" / "ckpt.safetensors", {"w": np.ones(2)})


def test_saving_a_traced_value_is_refused(tmp_path):
    def save_inside(x):
        checkpoints.save(tmp_path / "x.safetensors", {"x": x})
        return x

    with pytest.raises(TypeError, match=r"\['x'\] is a traced value"):
        fg.jit(save_inside)(np.ones(2, np.float32))


# --- damaged files ------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    checkpoints.save(path, {"dense": [np.arange(12, dtype=np.float32).reshape(3, 4)]})
    return path


@pytest.mark.parametrize("keep", [0, 5, 8, 20, -1])
def test_truncated_files_are_refused(saved, keep):
    raw = saved.read_bytes()
    saved.write_bytes(raw[:keep] if keep >= 0 else raw[:-1])
    with pytest.raises(CheckpointError, match=f"{saved}: truncated"):
        checkpoints.load(saved)


def test_corrupted_data_fails_the_checksum(saved):
    raw = bytearray(saved.read_bytes())
    raw[-3] ^= 0x10
    saved.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=f"{saved}: corrupted.*sha256"):
        checkpoints.load(saved)


@pytest.mark.parametrize(
    "header",
    [
        b"not json",
        b"[1, 2]",
        b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}',
        b'{"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}',
        b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}',
        b'{"__metadata__": {"funcgrad.tree": "{\\"kind\\": \\"list\\"}"}, '
        b'"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    ],
)
def test_bad_headers_are_refused(tmp_path, header):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    with pytest.raises(CheckpointError, match=f"{path}: bad header"):
        checkpoints.load(path)


def test_trailing_bytes_are_refused(saved):
    saved.write_bytes(saved.read_bytes() + b"\0")
    with pytest.raises(CheckpointError, match="1 bytes after the last tensor"):
        checkpoints.load(saved)


# --- files that do not match like ---------------------------------------------------------------


@pytest.mark.parametrize(
    "like, message",
    [
        (
            {"dense": [np.ones((4, 3), np.float32)]},
            r"\['dense'\]\[0\]: file has float32\[3,4\], expected float32\[4,3\]",
        ),
        (
            {"dense": [fg.ShapeDtypeStruct((3, 4), np.float64)]},
            r"\['dense'\]\[0\]: file has float32\[3,4\], expected float64\[3,4\]",
        ),
        (
            {"dense": (np.ones((3, 4), np.float32),)},
            r"\['dense'\]: file has a list of 1, expected a tuple of 1",
        ),
        (
            {"dense": [np.ones((3, 4), np.float32)], "head": np.ones(1)},
            r"<root>: file has a dict with keys \['dense'\], expected a dict with keys "
            r"\['dense', 'head'\]",
        ),
        ({"dense": [None]}, r"\['dense'\]\[0\]: file has an array, expected None"),
    ],
)
def test_mismatch_with_like_names_the_file_and_first_differing_leaf(saved, like, message):
    with pytest.raises(CheckpointError, match=f"{saved}: does not match like: {message}"):
        checkpoints.load(saved, like=like)
