"""The notebooks run headlessly from top to bottom, and are stored without outputs."""

from __future__ import annotations

import pathlib
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"

# What each notebook must print once it has run: its own checks passed (they assert inside).
EXPECTED = {
    "01_quickstart.ipynb": [r"max error: \S+", r"running with 2\.0", "TracerBoolConversionError"],
    "02_under_the_hood.ipynb": [r"fuses: ", r"define void @entry", "compiled and reference agree"],
    "03_per_example_gradients.ipynb": [r"DP-SGD test accuracy: 0\.[789]\d\d"],
    "04_training_a_cnn.ipynb": [r"final test accuracy: 0\.9[6-9]\d", r"restored test accuracy"],
    "05_transformer_language_model.ipynb": [r"loss \d\.\d+ nats/char, unigram entropy 3\.07"],
}


def all_notebooks() -> list[str]:
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_every_notebook_has_expectations():
    assert all_notebooks() == sorted(EXPECTED)


@pytest.mark.parametrize("name", all_notebooks())
def test_notebook_is_stored_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, name


@pytest.mark.parametrize("name", all_notebooks())
def test_notebook_runs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    printed = "\n".join(
        output.get("text", "") + output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    for pattern in EXPECTED[name]:
        assert re.search(pattern, printed), f"{name}: no output matching {pattern!r}"
