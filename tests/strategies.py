"""The suites' hypothesis strategies: one shared set (`funcgrad.tools.strategies`), which the
rule recipes draw from too."""

from funcgrad.tools.strategies import (  # noqa: F401
    all_float_dtypes,
    any_dtypes,
    arrays,
    axes,
    complex_dtypes,
    edge_shapes,
    float_dtypes,
    int_dtypes,
    numeric_dtypes,
    shapes,
    signed_int_dtypes,
)
