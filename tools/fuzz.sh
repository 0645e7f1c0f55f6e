#!/usr/bin/env bash
# tools/fuzz.sh — builds refine's libFuzzer targets (tests/fuzz/fuzz_*.c) with clang outside
# Bazel, and runs each for a while on a corpus seeded from the test fixtures.
#
#   tools/fuzz.sh [SECONDS] [TARGET ...]      e.g. tools/fuzz.sh 60 gguf peft_config
#   tools/fuzz.sh --list-seeds TARGET         the fixtures that seed TARGET's corpus, one a line
#
# SECONDS per target (default 30); targets default to all of safetensors, config, gguf,
# tokenizer, tokenize,
# peft_config. Needs clang with the libFuzzer, ASan and UBSan runtimes (Debian 12: apt-get install
# clang libclang-rt-14-dev) and the libraries io/ links (libcjson-dev, libpcre2-dev). Work goes to $FUZZ_DIR (default
# /tmp/refine-fuzz): bin/, corpus/<target>/ (kept between runs, so coverage accumulates) and, on a
# finding, crash-*/leak-*/timeout-* inputs under artifacts/<target>/. Exit status 1 when any
# target finds a crash, a leak, a timeout or an out-of-memory; the reproducer's path is printed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

# The fixtures of each target's format (copied once into its corpus; libFuzzer adds what it finds).
seeds_of() { # TARGET
    case $1 in
    safetensors) find "$root/tests" -name '*.safetensors' -size -256k ;;
    config) find "$root/tests" -name 'config.json' -o -name '*.json' -path '*configs*' ;;
    gguf) find "$root/tests" -name '*.gguf' -size -256k ;;
    peft_config) find "$root/tests" -name 'adapter_config.json' ;;
    tokenizer) find "$root/tests" -name '*tokenizer*.json' -size -256k ;; # tokenizer.json files and their configs
    tokenize) find "$root/tests/golden/data/tokenizer" "$root/docs" -name 'tokens.json' -o -name '*.md' ;; # text
    *) echo "fuzz: no seeds for target $1" >&2; return 1 ;;
    esac
}

if [ "${1:-}" = --list-seeds ]; then
    seeds_of "${2:?usage: tools/fuzz.sh --list-seeds TARGET}"
    exit
fi

seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors config gguf peft_config tokenizer tokenize)
work=${FUZZ_DIR:-/tmp/refine-fuzz}
cc=${CC_FUZZ:-clang}

command -v "$cc" >/dev/null || { echo "fuzz: $cc not found (apt-get install clang)" >&2; exit 1; }
mkdir -p "$work/bin" "$work/obj"

# io/ compiled once with coverage + sanitizers, then linked into each target.
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=undefined -I"$root" -I/usr/include/cjson -Wall -Wextra -Wno-unused-parameter)
objs=()
for src in "$root"/io/*.c; do
    obj="$work/obj/$(basename "${src%.c}").o"
    "$cc" "${flags[@]}" -c "$src" -o "$obj"
    objs+=("$obj")
done

status=0
for t in "${targets[@]}"; do
    src="$root/tests/fuzz/fuzz_$t.c"
    [ -f "$src" ] || { echo "fuzz: no target $t ($src)" >&2; exit 1; }
    bin="$work/bin/fuzz_$t"
    "$cc" "${flags[@]/fuzzer-no-link/fuzzer}" "$src" "${objs[@]}" -lcjson -lpcre2-8 -lm -o "$bin"
    corpus="$work/corpus/$t"
    mkdir -p "$corpus" "$work/artifacts/$t"
    seeds=$(seeds_of "$t")
    for s in $seeds; do cp -n "$s" "$corpus/seed_$(echo "$s" | sha256sum | cut -c1-16)" 2>/dev/null || true; done
    echo "fuzz: $t for ${seconds}s (corpus $corpus: $(ls "$corpus" | wc -l) inputs)"
    set +e
    (cd "$work/artifacts/$t" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$bin" "$corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts/$t/" >"$work/$t.log" 2>&1)
    rc=$?
    set -e
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$work/$t.log" | sed "s/^/fuzz: $t: /" || true
    if [ $rc -ne 0 ]; then
        echo "fuzz: $t FAILED (exit $rc); log $work/$t.log; reproducer(s):" >&2
        ls "$work/artifacts/$t"/ >&2 || true
        tail -40 "$work/$t.log" >&2
        status=1
    else
        echo "fuzz: $t: no finding"
    fi
done
exit $status
