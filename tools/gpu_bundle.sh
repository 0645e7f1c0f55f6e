#!/usr/bin/env bash
# tools/gpu_bundle.sh — packs the GPU binaries for a CUDA host that has no Bazel.
#
#   tools/gpu_bundle.sh DIR [TARGET...]
#
# Builds the parity tests (and any extra Bazel targets given), copies the binaries into DIR/bin
# and the shared libraries a stock CUDA image may lack (cJSON, PCRE2) into DIR/lib. An extra
# target //pkg/dir:name is copied as DIR/bin/dir_name (//gpu:train → gpu_train, //ref:train →
# ref_train; an alias is copied from the target it names). On the GPU host, from the repository root: tools/run_parity.sh DIR [--bench], the
# trainer's parity
#   tests/parity/train_parity.sh DIR/bin/ref_train DIR/bin/gpu_train DIR/bin/parity_train_compare
# (after tools/gpu_bundle.sh DIR //gpu:train //gpu:bench //ref:train //tests/parity:train_compare),
# or any DIR/bin/<name> with LD_LIBRARY_PATH=DIR/lib. The CUDA runtime is linked statically;
# cuBLASLt and NCCL come from the host's toolkit.
set -euo pipefail
dir=${1:?usage: tools/gpu_bundle.sh DIR [TARGET...]}
shift
cd "$(dirname "$0")/.."
bazel build //tests/parity/... "$@"
mkdir -p "$dir/bin" "$dir/lib"
for t in bazel-bin/tests/parity/*_parity; do
    # the parity binaries (train_parity is a script that takes the trainers: see below)
    [ -f "$t" ] && [ -x "$t" ] && [ "$(head -c 4 "$t" | od -An -c | tr -d ' ')" = '177ELF' ] && cp -fL "$t" "$dir/bin/"
done
for target in "$@"; do
    pkg=${target#//}
    pkg=${pkg%%:*}
    name=${target##*:}
    # an alias (//gpu:train → //trainers:gpu_train) is copied from its actual target's output
    actual=$(bazel query "labels(actual, $target)" 2>/dev/null | head -1)
    file=${actual:-$target}
    file=${file#//}
    cp -fL "bazel-bin/${file%%:*}/${file##*:}" "$dir/bin/${pkg##*/}_$name"
done
for lib in libcjson.so.1 libpcre2-8.so.0; do
    src=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [ -n "$src" ] && cp -fL "$src" "$dir/lib/"
done
du -sh "$dir"
