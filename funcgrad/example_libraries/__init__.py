"""The small libraries tutorials import beside the core API, with the names, signatures and
numerics notebooks expect (`from funcgrad.example_libraries import stax`): `stax`, networks
as `(init_fun, apply_fun)` pairs."""

from funcgrad.example_libraries import stax

__all__ = ["stax"]
