"""Compiler flags shared by the C targets of refine (STYLE.md, "Numerics and flags")."""

# ref/, io/, train/ and tests/: strict C11, no contraction of a*b+c into FMA, no fast-math.
C_COPTS = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-O2",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-Wall",
    "-Wextra",
    "-Wshadow",
    "-Wmissing-prototypes",
    "-Werror",
]

# C++ host code that talks to the CUDA runtime (gpu/ .cc files, parity harness).
CXX_COPTS = [
    "-std=c++17",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
]

# Binaries and tests that link the CUDA libraries (cuBLASLt, NCCL) from the toolkit.
CUDA_LINKOPTS = [
    "-L/usr/local/cuda/lib64",
    "-Wl,-rpath,/usr/local/cuda/lib64",
]
