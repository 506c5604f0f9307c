"""`python -m funcgrad.demo`, the README's first command: it trains the digits CNN to the
promised accuracy and prints what it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("sklearn")

from funcgrad import demo  # noqa: E402


def test_the_demo_reaches_the_promised_accuracy(capsys):
    accuracy = demo.main(["--no-progress"])
    out = capsys.readouterr().out
    assert accuracy >= 0.97
    assert re.search(r"^compile time: \d+ ms$", out, re.M)
    assert re.search(r"^time per step: [\d.]+ ms \(batch 64, 440 steps\)$", out, re.M)
    assert re.search(r"^test accuracy: 0\.9[7-9]\d$", out.splitlines()[-1])


def test_the_demo_runs_as_a_module_with_a_progress_bar():
    run = subprocess.run(
        [sys.executable, "-m", "funcgrad.demo", "--epochs", "1", "--batch-size", "128"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "training" in run.stdout + run.stderr  # tqdm's bar
    assert re.search(r"test accuracy: 0\.\d{3}", run.stdout)
