"""The CPU backend: programs compiled to native code through LLVM (llvmlite)."""
