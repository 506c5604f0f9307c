"""Backend-independent compilation: jaxpr optimization passes."""
