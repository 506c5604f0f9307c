"""The NumPy reference backend: jaxprs run by calling each primitive's NumPy implementation."""
