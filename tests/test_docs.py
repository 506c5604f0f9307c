"""The documentation stays true of the tree: files it names exist, every module of funcgrad is
findable from docs/architecture.md, the README's test command is the one CI runs, and the
code examples in module docstrings run. (The README's own code blocks run in
tests/test_examples.py.)"""

import ast
import pathlib
import re
import textwrap

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
REPOSITORY_FILES = [
    p.relative_to(ROOT).as_posix()
    for folder in ("funcgrad", "tests", "benchmarks", "examples", "notebooks", ".ci")
    for p in (ROOT / folder).rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
]
MODULES = sorted((ROOT / "funcgrad").rglob("*.py"))


def named_files(text: str) -> set[str]:
    """Paths of Python files written in backquotes (`backends/llvm/pool.py`, `ops.py`)."""
    return {
        path
        for quoted in re.findall(r"`([^`\n]+)`", text)
        for path in re.findall(r"[\w/]+\.py", quoted)
    }


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_files_the_docs_name_exist(doc):
    missing = [
        path
        for path in sorted(named_files(doc.read_text()))
        if not any(f == path or f.endswith("/" + path) for f in REPOSITORY_FILES)
    ]
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


QUOTED = re.findall(r"`([^`\n]+)`", ARCHITECTURE) + re.findall(r"^ {4}(.*)$", ARCHITECTURE, re.M)


def findable(module: pathlib.Path) -> bool:
    """Named in backquotes (or in the layer diagram) by its file (`ops.py`), its dotted name
    (`fg.dlpack`, `errors.CompileError`), or, for a module of a package the page describes
    as a whole (a distribution of `stats/`), by its folder."""
    name = module.parent.name if module.name == "__init__.py" else module.stem
    if any(re.search(rf"(^|[\s./]){name}($|[\s./(\[])", quoted) for quoted in QUOTED):
        return True
    return module.parent.name != "funcgrad" and f"{module.parent.name}/" in ARCHITECTURE


def test_every_module_is_findable_in_architecture_md():
    hidden = [str(m.relative_to(ROOT)) for m in MODULES if not findable(m)]
    assert not hidden, f"docs/architecture.md should say what these modules hold: {hidden}"


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = 'pip install -e ".[test]" && python -m pytest tests'
    assert command in readme
    assert 'python -m pip install --quiet -e ".[test]"' in ci
    assert re.search(r"^python -m pytest tests$", ci, re.M)


def indented_blocks(doc: str) -> list[str]:
    """The blocks of a docstring indented past its text, each starting after a blank line."""
    lines, blocks, i = doc.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            blocks.append(textwrap.dedent("\n".join(lines[i:j])).strip())
            i = j
        else:
            i += 1
    return blocks


def parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False  # a formula, a table, a shell command
    return True


def docstring_examples() -> dict[str, list[str]]:
    """The indented blocks of Python in the docstrings of funcgrad's modules, classes and
    functions, by module."""
    found: dict[str, list[str]] = {}
    for path in MODULES:
        tree = ast.parse(path.read_text())
        nodes = [
            tree,
            *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)),
        ]
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in nodes:
            for block in indented_blocks(ast.get_docstring(node) or ""):
                if parses(block):
                    found.setdefault(module, []).append(block)
    return found


def names_for_optim() -> dict:
    import funcgrad.numpy as fnp

    return {"params": {"w": fnp.ones(3)}, "grads": {"w": fnp.array([3.0, -4.0, 0.0])}}


def names_for_testing() -> dict:
    import funcgrad.numpy as fnp

    return {"my_layer": lambda x: fnp.tanh(x) * 2.0, "my_loss": lambda x: (fnp.sin(x) ** 2).sum()}


def names_for_stax() -> dict:
    from funcgrad import random
    from funcgrad.example_libraries import stax

    return {"stax": stax, "random": random, "images": np.ones((2, 784), np.float32)}


def names_for_optimizers() -> dict:
    from funcgrad.example_libraries import optimizers

    return {"optimizers": optimizers, "step": 0, **names_for_optim()}


def names_for_export() -> dict:
    import funcgrad
    import funcgrad.numpy as fnp
    from funcgrad import export

    return {
        "export": export,
        "funcgrad": funcgrad,
        "ShapeDtypeStruct": funcgrad.ShapeDtypeStruct,
        "np": np,
        "f": fnp.sin,
        "x": np.float32([0.5, 1.0, 2.0]),
    }


# The names each example takes as defined.
EXAMPLE_NAMES = {
    "funcgrad.optim": names_for_optim,
    "funcgrad.testing": names_for_testing,
    "funcgrad.example_libraries.stax": names_for_stax,
    "funcgrad.example_libraries.optimizers": names_for_optimizers,
    "funcgrad.export": names_for_export,
}


def test_the_docstring_examples_are_known():
    assert set(docstring_examples()) == set(EXAMPLE_NAMES), (
        "a docstring has a new code example: give it a namespace in EXAMPLE_NAMES"
    )


def test_the_optim_docstring_example_runs():
    from funcgrad import optim

    (code,) = docstring_examples()["funcgrad.optim"]
    namespace = {"optim": optim, **names_for_optim()}
    exec(compile(code, "funcgrad/optim/__init__.py", "exec"), namespace)
    # clipped to norm 1, AdamW's first step is -lr * sign(g) (plus the weight decay)
    expected = 1.0 - 1e-3 * (np.sign([3.0, -4.0, 0.0]) + 1e-4 * 1.0)
    np.testing.assert_allclose(np.asarray(namespace["params"]["w"]), expected, rtol=1e-6)


def test_the_testing_docstring_example_runs():
    from hypothesis import settings

    (code,) = docstring_examples()["funcgrad.testing"]
    namespace = names_for_testing()
    exec(compile(code, "funcgrad/testing.py", "exec"), namespace)
    settings(max_examples=3)(namespace["test_my_layer"])()


def test_the_example_libraries_docstring_examples_run():
    (code,) = docstring_examples()["funcgrad.example_libraries.stax"]
    namespace = names_for_stax()
    exec(compile(code, "funcgrad/example_libraries/stax.py", "exec"), namespace)
    assert namespace["out_shape"] == (-1, 10)
    np.testing.assert_allclose(np.exp(np.asarray(namespace["log_probs"])).sum(1), 1, rtol=1e-5)

    (code,) = docstring_examples()["funcgrad.example_libraries.optimizers"]
    namespace = names_for_optimizers()
    exec(compile(code, "funcgrad/example_libraries/optimizers.py", "exec"), namespace)
    # Adam's first step is -lr * sign(g) (0 where g is 0)
    expected = 1.0 - 1e-3 * np.sign([3.0, -4.0, 0.0])
    np.testing.assert_allclose(np.asarray(namespace["params"]["w"]), expected, rtol=1e-6)


def test_the_export_docstring_example_runs():
    (code,) = docstring_examples()["funcgrad.export"]
    namespace = names_for_export()
    exec(compile(code, "funcgrad/export/__init__.py", "exec"), namespace)
    np.testing.assert_allclose(namespace["y"], np.sin(namespace["x"]), rtol=1e-6)
