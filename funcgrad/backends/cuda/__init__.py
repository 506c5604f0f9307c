"""The CUDA backend: the shared kernel IR rendered to CUDA C, run on a GPU or on the host
emulator."""
