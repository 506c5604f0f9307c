"""Each script of examples/ runs with fewer steps and reaches what it promises (in-process:
`main(argv)` returns the numbers it prints)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (the models' modules) look their module up
    spec.loader.exec_module(module)
    return module


def test_mlp_on_digits(capsys):
    accuracy = load("mlp_digits").main(["--steps", "200"])
    assert accuracy > 0.9
    assert capsys.readouterr().out.splitlines()[-1] == f"test accuracy: {accuracy:.3f}"


def test_cnn_on_digits(capsys):
    accuracy = load("cnn_digits").main(["--epochs", "3"])
    assert accuracy > 0.9
    assert "test accuracy:" in capsys.readouterr().out


def test_dp_sgd_trains_privately_and_reports_both(capsys):
    private, plain = load("dp_sgd").main(["--steps", "150"])
    assert private > 0.7 and plain > 0.85
    out = capsys.readouterr().out
    assert "examples/s" in out and "DP-SGD" in out


def test_physics_parameters_are_recovered_through_the_scan(capsys):
    result = load("physics_scan").main(["--steps", "150"])
    for name, true in result["truth"].items():
        assert abs(result["fitted"][name] - true) < 0.05 * true, name
    assert "stiffness: fitted" in capsys.readouterr().out


def test_hmc_posterior_mean_is_near_the_true_weights(capsys):
    result = load("hmc_logistic_regression").main(["--samples", "300", "--chains", "2"])
    assert 0.5 < result["acceptance"] <= 1.0
    np.testing.assert_allclose(result["mean"], result["true"], atol=0.5)
    assert "acceptance rate" in capsys.readouterr().out


def test_char_transformer_beats_the_unigram_entropy(capsys):
    result = load("char_transformer").main(["--steps", "150", "--sample-length", "20"])
    assert result["loss"] < result["unigram_entropy"] - 0.5
    out = capsys.readouterr().out
    assert "unigram entropy" in out and "sample:" in out


def test_taylor_ode_agrees_with_a_fine_runge_kutta(capsys):
    result = load("taylor_ode").main(["--time", "5"])
    assert result["difference"] < 1e-8 and result["energy_drift"] < 1e-9
    assert "energy drift" in capsys.readouterr().out
