"""The two small libraries tutorials import beside the core API, with the names, signatures
and numerics notebooks expect (`from funcgrad.example_libraries import optimizers, stax`):
`stax`, networks as `(init_fun, apply_fun)` pairs, and `optimizers`, optimizers as
`(init_fun, update_fun, get_params)` triples."""

from funcgrad.example_libraries import optimizers, stax

__all__ = ["optimizers", "stax"]
