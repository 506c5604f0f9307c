"""The README's example and examples/first_look.py run as written (documentation stays true)."""

import pathlib
import runpy

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_example_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    grads, per_example = namespace["grads"], namespace["per_example"]
    assert np.asarray(grads).shape == (3,)
    assert np.asarray(per_example).shape == (8, 3)
    np.testing.assert_allclose(np.asarray(per_example).mean(axis=0), np.asarray(grads), rtol=1e-5)
    assert "dot_general" in capsys.readouterr().out


def test_readme_compiler_example_runs(capsys):
    import funcgrad as fg

    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python", 3)[3].split("```", 1)[0]
    previous = fg.config.jit_backend
    fg.config.update("jit_backend", "llvm")  # the default, which the example describes
    namespace: dict = {"fg": fg, "fnp": fg.numpy}
    try:
        exec(compile(code, "README.md", "exec"), namespace)
    finally:
        fg.config.update("jit_backend", previous)
    out = capsys.readouterr().out
    assert "reduce_sum" in out and "arena" in out and "define void @entry" in out


def test_readme_gpu_example_runs_on_the_emulated_gpu():
    import funcgrad as fg

    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python", 2)[2].split("```", 1)[0]
    code = code.replace('fg.devices("gpu")', 'fg.devices("cuda_emulator")')
    namespace: dict = {"fg": fg, "np": np}
    exec(compile(code, "README.md", "exec"), namespace)
    gpu, y, z = namespace["gpu"], namespace["y"], namespace["z"]
    assert y.device is gpu and z.device is gpu
    np.testing.assert_allclose(np.asarray(z), 2 * 256, rtol=1e-4)


def test_first_look_runs(capsys):
    runpy.run_path(str(ROOT / "examples" / "first_look.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "grad(loss)(w) =" in out and "lambda" in out
