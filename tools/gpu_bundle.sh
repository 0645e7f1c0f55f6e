#!/usr/bin/env bash
# tools/gpu_bundle.sh — packs the GPU binaries for a CUDA host that has no Bazel.
#
#   tools/gpu_bundle.sh DIR [TARGET...]
#
# Builds the parity tests (and any extra Bazel targets given, e.g. //gpu:bench //gpu:train),
# copies the binaries into DIR/bin and the shared libraries a stock CUDA image may lack (cJSON,
# PCRE2) into DIR/lib. On the GPU host: tools/run_parity.sh DIR [--bench], or run DIR/bin/<name>
# with LD_LIBRARY_PATH=DIR/lib. The CUDA runtime is linked statically; cuBLASLt and NCCL come
# from the host's toolkit.
set -euo pipefail
dir=${1:?usage: tools/gpu_bundle.sh DIR [TARGET...]}
shift
cd "$(dirname "$0")/.."
bazel build //tests/parity/... "$@"
mkdir -p "$dir/bin" "$dir/lib"
for t in bazel-bin/tests/parity/*_parity; do
    [ -f "$t" ] && [ -x "$t" ] && cp -fL "$t" "$dir/bin/"
done
for target in "$@"; do
    path=bazel-bin/${target#//}
    path=${path/://}
    cp -fL "$path" "$dir/bin/"
done
for lib in libcjson.so.1 libpcre2-8.so.0; do
    src=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [ -n "$src" ] && cp -fL "$src" "$dir/lib/"
done
du -sh "$dir"
