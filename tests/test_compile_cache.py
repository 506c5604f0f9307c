"""The on-disk compilation cache of the LLVM backend: a program compiled once is loaded by later
compilations and processes and runs as the freshly compiled one does; a damaged or foreign
entry is compiled again, never loaded; the cache never fails a compilation."""

import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.backends.llvm import engine
from funcgrad.compiler import cache, fingerprint, stages
from funcgrad.config import Config, config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path):
    """A fresh, enabled cache folder for one test, on the LLVM backend."""
    saved = (config.jit_backend, config.enable_compilation_cache, config.compilation_cache_dir)
    folder = tmp_path / "cache"
    config.update("jit_backend", "llvm")
    config.update("enable_compilation_cache", True)
    config.update("compilation_cache_dir", folder)
    yield folder
    config.jit_backend, config.enable_compilation_cache, config.compilation_cache_dir = saved


def _program(x):
    y = fnp.tanh(x @ x.T) * 2.0 + 1.0
    return y.sum(axis=1), fnp.exp(-x).max()


def _compile(fun, *args):
    """A new compilation (fresh trace, no in-memory cache) of `fun` at `args`."""
    return fg.jit(lambda *a: fun(*a)).lower(*args).compile()


def _entries(folder) -> list[str]:
    where = folder / "llvm"
    return sorted(os.listdir(where)) if where.exists() else []


def _x():
    return np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)


def _expected(x):
    y = np.tanh(x.astype(np.float64) @ x.T) * 2 + 1
    return y.sum(axis=1), np.exp(-x.astype(np.float64)).max()


def test_second_compilation_loads_from_disk_and_agrees(cache_dir):
    x = _x()
    cold = _compile(_program, x)
    assert not cold.executable.machine_code.from_cache
    assert len(_entries(cache_dir)) == 1
    _compile(lambda a: fnp.sin(a) + 1.0, x)  # compiled in between: names must not shift
    warm = _compile(_program, x)
    assert warm.executable.machine_code.from_cache
    assert warm.as_text() == cold.as_text()
    for c, w, e in zip(cold(x), warm(x), _expected(x)):
        np.testing.assert_array_equal(np.asarray(w), np.asarray(c))
        np.testing.assert_allclose(np.asarray(w), e, rtol=1e-5)
    assert "define void @entry" in warm.executable.machine_code.optimized_ir  # shown on a hit


def _damaged_entries():
    def truncated(data, other):
        return data[: len(data) // 2]

    def short_header(data, other):
        return data[:10]

    def flipped_payload_byte(data, other):
        return data[:-7] + bytes([data[-7] ^ 0x40]) + data[-6:]

    def wrong_length(data, other):
        return data + b"\0"

    def wrong_magic(data, other):
        return b"X" + data[1:]

    def other_format(data, other):
        return data[:16] + (cache.FORMAT + 1).to_bytes(4, "little") + data[20:]

    def foreign_key(data, other):
        return other

    return [
        truncated,
        short_header,
        flipped_payload_byte,
        wrong_length,
        wrong_magic,
        other_format,
        foreign_key,
    ]


@pytest.mark.parametrize("damage", _damaged_entries(), ids=lambda d: d.__name__)
def test_damaged_entry_is_compiled_again_never_loaded(cache_dir, caplog, damage):
    x = _x()
    _compile(lambda a: fnp.cos(a).sum(), x)
    (other,) = _entries(cache_dir)
    _compile(_program, x)
    (path,) = [cache_dir / "llvm" / n for n in _entries(cache_dir) if n != other]
    path.write_bytes(damage(path.read_bytes(), (cache_dir / "llvm" / other).read_bytes()))
    with caplog.at_level(logging.DEBUG, logger="funcgrad.compilation_cache"):
        again = _compile(_program, x)
    assert not again.executable.machine_code.from_cache
    assert any(r.message.startswith(f"rejected {path}") for r in caplog.records)
    for got, expected in zip(again(x), _expected(x)):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5)
    assert _compile(_program, x).executable.machine_code.from_cache  # the entry was rewritten


def test_entry_of_another_funcgrad_version_is_not_used(cache_dir, monkeypatch):
    x = _x()
    _compile(_program, x)
    monkeypatch.setattr(fg, "__version__", fg.__version__ + ".post1")
    assert not _compile(_program, x).executable.machine_code.from_cache
    assert len(_entries(cache_dir)) == 2


def test_cache_off_writes_nothing(cache_dir):
    config.update("enable_compilation_cache", False)
    x = _x()
    first, second = _compile(_program, x), _compile(_program, x)
    assert not first.executable.machine_code.from_cache
    assert not second.executable.machine_code.from_cache
    assert not cache_dir.exists()


def test_unwritable_folder_warns_once_and_compiles(tmp_path, cache_dir):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    config.update("compilation_cache_dir", blocker / "cache")  # a folder inside a file
    x = _x()
    with pytest.warns(RuntimeWarning, match="cannot write its compilation cache in .*a_file"):
        compiled = _compile(_program, x)
    for got, expected in zip(compiled(x), _expected(x)):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once is enough
        _compile(lambda a: fnp.sin(a) * 3.0, x)


def test_compilation_error_leaves_no_entry(cache_dir):
    with pytest.raises(RuntimeError):
        engine.Compiled(["define void @entry(ptr %args) {\n  ret i32 0\n}"])
    assert _entries(cache_dir) == []


def test_concurrent_writers_of_one_key_never_show_a_partial_entry(cache_dir):
    key = cache.digest("one key")
    payloads = [bytes([k]) * 200_000 for k in range(1, 5)]
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            seen.append(cache.load("llvm", key))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [
        threading.Thread(target=lambda p=p: [cache.store("llvm", key, p) for _ in range(20)])
        for p in payloads
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert all(s is None or s in payloads for s in seen)
    assert cache.load("llvm", key) in payloads
    assert _entries(cache_dir) == [key.hex()]  # no temporary file left behind


_NEW_PROCESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    import funcgrad as fg
    import funcgrad.numpy as fnp

    fg.config.update("compilation_cache_dir", sys.argv[1])

    def f(a):
        fg.debug.callback(lambda s: print("callback", float(s)), a.sum())
        q, r = fnp.linalg.qr(a)
        return q, r, a @ a.T

    a = np.arange(1.0, 17.0, dtype=np.float32).reshape(4, 4) + 4 * np.eye(4, dtype=np.float32)
    compiled = fg.jit(f).lower(a).compile()
    q, r, product = (np.asarray(o) for o in compiled(a))
    print("from_cache", compiled.executable.machine_code.from_cache)
    np.save(sys.argv[2], np.concatenate([q.ravel(), r.ravel(), product.ravel()]))
    """
)


def _start(folder, output):
    env = dict(os.environ, PYTHONPATH=REPO, FUNCGRAD_JIT_BACKEND="llvm")
    env.pop("FUNCGRAD_COMPILATION_CACHE", None)
    return subprocess.Popen(
        [sys.executable, "-c", _NEW_PROCESS, str(folder), str(output)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_new_processes_share_callbacks_blas_and_lapack_code(cache_dir, tmp_path):
    """Two processes compile at once (both cold), then a third loads their entry."""
    racing = [_start(cache_dir, tmp_path / f"out{k}.npy") for k in range(2)]
    results = [p.communicate(timeout=120) for p in racing]
    for process, (out, err) in zip(racing, results):
        assert process.returncode == 0, err
        assert "callback 152.0" in out
    out, err = _start(cache_dir, tmp_path / "warm.npy").communicate(timeout=120)
    assert "from_cache True" in out, err
    assert "callback 152.0" in out
    assert len(_entries(cache_dir)) == 1
    a = np.arange(1.0, 17.0).reshape(4, 4) + 4 * np.eye(4)
    cold = np.load(tmp_path / "out0.npy")
    warm = np.load(tmp_path / "warm.npy")
    np.testing.assert_array_equal(warm, cold)
    q, r, product = warm[:16].reshape(4, 4), warm[16:32].reshape(4, 4), warm[32:].reshape(4, 4)
    np.testing.assert_allclose(q @ r, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.triu(r), r)
    np.testing.assert_allclose(product, a @ a.T, rtol=1e-6)


def test_environment_switches(monkeypatch):
    monkeypatch.setenv("FUNCGRAD_COMPILATION_CACHE", "0")
    monkeypatch.setenv("FUNCGRAD_CACHE_DIR", "/some/where")
    settings = Config()
    assert settings.enable_compilation_cache is False
    assert settings.compilation_cache_dir == "/some/where"
    monkeypatch.delenv("FUNCGRAD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert Config().compilation_cache_dir == os.path.join("/xdg", "funcgrad")
    assert Config().compilation_cache_max_size == 2 << 30
    monkeypatch.setenv("FUNCGRAD_CACHE_MAX_SIZE", "-1")
    assert Config().compilation_cache_max_size == -1
    monkeypatch.setenv("FUNCGRAD_COMPILATION_CACHE", "maybe")
    with pytest.raises(ValueError, match="FUNCGRAD_COMPILATION_CACHE"):
        Config()


def _folder_bytes(folder) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_the_folder_stays_within_its_bound_removing_the_entries_used_longest_ago(cache_dir):
    x = _x()
    first = _compile(_program, x)
    entry_bytes = _folder_bytes(cache_dir)  # a program's machine code and plan
    saved = config.compilation_cache_max_size
    config.update("compilation_cache_max_size", int(entry_bytes * 3.5))
    try:
        programs = [lambda x, k=k: _program(x * (k + 2.0)) for k in range(2)]
        for program in programs:
            _compile(program, x)
        for entry in cache_dir.rglob("*"):  # all written an hour ago (clocks are coarse)
            hour_ago = entry.stat().st_mtime - 3600
            os.utime(entry, (hour_ago, hour_ago))
        assert _compile(_program, x).executable.machine_code.from_cache  # used again now
        _compile(lambda x: _program(x * 9.0), x)  # past the bound: the other two removed
        assert _folder_bytes(cache_dir) <= config.compilation_cache_max_size
        assert _compile(_program, x).executable.machine_code.from_cache
        for program in programs:
            assert not _compile(program, x).executable.machine_code.from_cache
    finally:
        config.update("compilation_cache_max_size", saved)
    np.testing.assert_allclose(np.asarray(first(x)[0]), _expected(x)[0], rtol=1e-5)


def test_a_bound_of_no_bytes_keeps_nothing(cache_dir):
    saved = config.compilation_cache_max_size
    config.update("compilation_cache_max_size", 0)
    try:
        _compile(_program, _x())
        assert not _compile(_program, _x()).executable.machine_code.from_cache
    finally:
        config.update("compilation_cache_max_size", saved)
    assert not cache_dir.exists()


def test_bad_settings_name_the_option(cache_dir):
    for bound in (-2, 1.5, True, "1G"):
        with pytest.raises(ValueError, match="compilation_cache_max_size"):
            config.update("compilation_cache_max_size", bound)
    with pytest.raises(TypeError, match="compilation_cache_dir"):
        config.update("compilation_cache_dir", 3)
    with pytest.raises(TypeError, match="enable_compilation_cache"):
        config.update("jax_enable_compilation_cache", "no")


# -- programs found by their jaxpr -------------------------------------------------------------


def _plans(folder) -> list[str]:
    where = folder / "llvm-plans"
    return sorted(os.listdir(where)) if where.exists() else []


def test_a_later_compilation_finds_the_program_by_its_jaxpr_without_planning(
    cache_dir, monkeypatch
):
    x = _x()
    cold = _compile(_program, x)
    assert len(_plans(cache_dir)) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("planned again")

    with monkeypatch.context() as patched:
        patched.setattr(stages, "plan", refuse)
        warm = _compile(_program, x)
        assert warm.executable.machine_code.from_cache
        assert warm.as_text() == cold.as_text()
        for c, w in zip(cold(x), warm(x)):
            np.testing.assert_array_equal(np.asarray(w), np.asarray(c))

    # What only the plan shows is planned when asked for.
    def shape(text):  # buffers are numbered process-wide
        return re.sub(r"\d+", "#", text)

    assert shape(warm.fusion_plan()) == shape(cold.fusion_plan())
    assert warm.memory_analysis().arena_bytes == cold.memory_analysis().arena_bytes


def test_programs_differing_in_a_literal_parameter_or_type_do_not_share_a_plan(
    cache_dir,
):
    x = _x()
    table = np.arange(6, dtype=np.float32)
    changed = table.copy()
    changed[3] = 30.0
    variants = [
        (lambda a: a * 2.0, lambda a: a * 2.0),
        (lambda a: a * 3.0, lambda a: a * 3.0),
        (lambda a: a + table, lambda a: a + table),
        (lambda a: a + changed, lambda a: a + changed),
        (lambda a: a.sum(axis=0), lambda a: a.sum(axis=0)),
        (lambda a: a.sum(axis=1), lambda a: a.sum(axis=1)),
        (lambda a: a.astype(np.float64) * 2.0, lambda a: a.astype(np.float64) * 2.0),
    ]
    for _ in range(2):  # compiled, then found
        for fun, expected in variants:
            got = np.asarray(_compile(fun, x)(x))
            np.testing.assert_allclose(got, expected(x), rtol=1e-6)
            assert got.dtype == expected(x).dtype
    # Closed-over arrays are arguments of the program (jit hoists them): the two tables share
    # one plan, and each call passes its own.
    assert len(_plans(cache_dir)) == len(variants) - 1


def test_changed_funcgrad_sources_do_not_find_plans_made_before(cache_dir, monkeypatch):
    x = _x()
    _compile(_program, x)
    monkeypatch.setattr(fingerprint, "_sources", lambda: "an edited compiler")
    planned = []
    plan = stages.plan
    monkeypatch.setattr(stages, "plan", lambda *a, **k: planned.append(1) or plan(*a, **k))
    _compile(_program, x)
    assert planned and len(_plans(cache_dir)) == 2


def test_programs_with_callbacks_are_planned_in_every_process(cache_dir):
    def f(a):
        fg.debug.callback(lambda s: None, a.sum())
        return a * 2.0

    _compile(f, _x())
    assert _entries(cache_dir) and _plans(cache_dir) == []


def test_a_parameter_that_cannot_be_written_exactly_leaves_the_program_unkeyed():
    closed = fg.make_jaxpr(lambda a: a * 2.0)(_x())
    assert fingerprint.digest(closed) is not None
    (eqn,) = closed.jaxpr.eqns
    eqn.params["rule"] = lambda: None  # a function's identity is not its behaviour
    assert fingerprint.digest(closed) is None


_FOUND_BY_JAXPR = textwrap.dedent(
    """
    import sys
    import numpy as np
    import funcgrad as fg
    import funcgrad.numpy as fnp
    from funcgrad.compiler import stages

    fg.config.update("compilation_cache_dir", sys.argv[1])
    if sys.argv[3] == "warm":
        def refuse(*args, **kwargs):
            raise AssertionError("planned again")
        stages.plan = refuse

    def f(a, b):  # LAPACK, BLAS, and a loop large enough for the thread pool
        q, r = fnp.linalg.qr(a)
        return q, r, fnp.tanh(a @ a.T), fnp.sin(b) * 2.0

    a = np.arange(1.0, 17.0, dtype=np.float32).reshape(4, 4) + 4 * np.eye(4, dtype=np.float32)
    b = np.linspace(-3, 3, 512 * 256, dtype=np.float32).reshape(512, 256)
    outputs = [np.asarray(o).ravel() for o in fg.jit(f)(a, b)]
    np.save(sys.argv[2], np.concatenate(outputs))
    """
)


def test_a_new_process_links_the_library_calls_of_a_program_it_found_by_its_jaxpr(
    cache_dir, tmp_path
):
    env = dict(os.environ, PYTHONPATH=REPO, FUNCGRAD_JIT_BACKEND="llvm")
    env.pop("FUNCGRAD_COMPILATION_CACHE", None)
    for run in ("cold", "warm"):
        process = subprocess.run(
            [sys.executable, "-c", _FOUND_BY_JAXPR, str(cache_dir), str(tmp_path / run), run],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert process.returncode == 0, process.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "warm.npy"), np.load(tmp_path / "cold.npy"))
