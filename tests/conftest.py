"""Hypothesis profiles: `ci` is fast (CI's 2-core machine), `dev` explores more.

Pick one with HYPOTHESIS_PROFILE=dev; CI sets CI=true and gets `ci`.

The `ci` profile draws few examples, so it must not draw the same ones forever: its seed is
the day's date (printed in the header), so each day's runs explore new inputs while any one
failure stays reproducible with `--hypothesis-seed=<seed>` (or FUNCGRAD_TEST_SEED=<seed>).

The tests place their arrays where they mean them to be, so the default platform is the CPU
even where a GPU is found (tests/test_default_platform.py checks the GPU as the default).
"""

import datetime
import os

os.environ.setdefault("FUNCGRAD_PLATFORM", "cpu")  # before funcgrad is imported

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def _rotating_seed() -> int:
    return int(os.environ.get("FUNCGRAD_TEST_SEED") or datetime.date.today().strftime("%Y%m%d"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if PROFILE == "ci" and config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(_rotating_seed())


def pytest_report_header(config):
    return (
        f"hypothesis profile {PROFILE}, seed {config.getoption('hypothesis_seed', None)}, "
        f"platform {os.environ['FUNCGRAD_PLATFORM']}"
    )


@pytest.fixture
def library_products():
    """Matrix products run as the library's GEMMs in the test (on the LLVM backend), for
    tests of that path, whichever this CPU and library would take."""
    from checks import products_as

    with products_as("library"):
        yield
