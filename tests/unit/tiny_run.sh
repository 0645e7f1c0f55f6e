# tiny_run.sh — sourced by the trainer's end-to-end shell tests (ref_train_test.sh, its fp8, robust,
# kill and mpi siblings), from the repository root:
#   tiny_run_setup NAME
# sets tmp (${TEST_TMPDIR:-/tmp}/NAME.PID) and REFINE_CACHE (tmp/cache, so that no run reads the
# user's cache), and writes the inputs every such test trains on: tmp/model, the tiny Llama-3-like
# golden model with the byte-level tokenizer, and tmp/data.txt, 60 numbered lines of text.
tiny_run_setup() {
    tmp=${TEST_TMPDIR:-/tmp}/$1.$$
    export REFINE_CACHE=$tmp/cache
    mkdir -p "$tmp/model"
    cp tests/golden/data/e2e/llama/config.json tests/golden/data/e2e/llama/model.safetensors "$tmp/model/"
    cp tests/unit/testdata/bytes_tokenizer.json "$tmp/model/tokenizer.json"
    local i
    for i in $(seq 1 60); do
        echo "In the beginning $i the model learned that line $i follows line $((i - 1)), and so on."
    done >"$tmp/data.txt"
}
