"""explain_cache_misses and no_tracing: why a jitted function traced again, and a guard
against it. The expected reasons are built from the arguments' shapes and dtypes."""

import logging

import pytest

import funcgrad as fg
import funcgrad.numpy as fnp


def scale(x, n):
    return x * n


def _reasons(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "funcgrad"]


def test_each_new_trace_says_what_differs(caplog):
    f = fg.jit(scale, static_argnums=1)
    with caplog.at_level(logging.WARNING, "funcgrad"), fg.explain_cache_misses():
        f(fnp.ones(3), 2)
        f(fnp.ones(3), 2)  # cached: nothing to say
        f(fnp.ones(4), 2)
        f(fnp.ones(4, "int32"), 2)
        f(fnp.ones(4), 3)
        f(fnp.asarray(1.0) * 1, 3)  # a weak scalar
        with fg.enable_x64():
            f(fnp.ones(4, "float32"), 3)
    reasons = _reasons(caplog)
    assert len(reasons) == 6, reasons
    assert reasons[0] == "jit(scale) traces a new program as it never traced before"
    assert "argument leaf 0 is float32[4], was float32[3]" in reasons[1]
    assert "argument leaf 0 is int32[4], was float32[4]" in reasons[2]
    assert "the static arguments are 1=3, were 1=2" in reasons[3]
    assert "argument leaf 0 is weak float32[], was float32[4]" in reasons[4]
    assert "enable_x64 is True, was False" in reasons[5] and "argument" not in reasons[5]
    assert "(it has traced 5 signature(s))" in reasons[5]


def test_nothing_is_logged_without_the_option(caplog):
    with caplog.at_level(logging.WARNING, "funcgrad"):
        fg.jit(scale, static_argnums=1)(fnp.ones(2), 2)
    assert _reasons(caplog) == []


def test_no_tracing_refuses_new_traces_only():
    f = fg.jit(scale, static_argnums=1)
    f(fnp.ones(3), 2)
    with fg.no_tracing():
        assert f(fnp.ones(3), 2).tolist() == [2.0, 2.0, 2.0]
        with pytest.raises(RuntimeError, match=r"jit\(scale\) would trace .*float32\[5\]"):
            f(fnp.ones(5), 2)
        with pytest.raises(RuntimeError, match="never traced before"):
            fg.jit(scale, static_argnums=1)(fnp.ones(3), 2)
    assert f(fnp.ones(5), 2).shape == (5,)


def test_the_options_have_their_config_names():
    for name in ("jax_explain_cache_misses", "jax_no_tracing"):
        with pytest.raises(TypeError, match="True or False"):
            fg.config.update(name, "yes")
    fg.config.update("jax_no_tracing", True)
    try:
        with pytest.raises(RuntimeError, match="no_tracing is set"):
            fg.jit(lambda x: x)(fnp.ones(1))
    finally:
        fg.config.update("no_tracing", False)
