"""Backends: where compiled programs run. The NumPy backend is the reference."""
