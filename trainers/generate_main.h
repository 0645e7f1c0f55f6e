/* generate_main.h — the program flow of //ref:generate and //gpu:generate, shared; each program
 * supplies only its device (gen_backend.h).
 *
 *   bazel run //ref:generate -- --prompt "The King said"          continue a text (streamed)
 *   bazel run //gpu:generate -- --model M --adapter runs/X/adapter --chat
 *   bazel run //gpu:generate -- --prompts prompts.jsonl --batch 32  one JSON line per prompt
 *
 * generate_main: under `bazel run`, enter the user's directory; parse the flags (--help lists
 * them); open the model (io/model_source.h: HF folder or GGUF), its tokenizer (or --tokenizer),
 * the adapter (--adapter: a PEFT folder, merged into the base weights: ref_gen_load_weights);
 * build the backend; then one of three modes:
 *   --prompt TEXT     the text's tokens (with BOS when the tokenizer adds one, as HF's
 *                     tokenizer(text) does), the completion streamed to stdout;
 *   --prompts FILE    JSONL, one request a line: {"prompt": "..."} (raw text, as --prompt) or
 *                     {"messages": [{"role": ..., "content": ...}, ...]} (the chat template with the
 *                     generation prompt); up to --batch in flight at once; one JSON line per request
 *                     on stdout (or --out FILE): {"index", "completion", "tokens", "finish", "ids"};
 *                     a summary line (requests, tokens, seconds, tokens/s) on stderr;
 *   --chat            an interactive conversation on stdin: each line is a user turn, the reply
 *                     is streamed; "/reset" forgets the conversation, "/exit" or end of input
 *                     ends; --system TEXT starts it with a system turn.
 * Ends of a completion: the model's end-of-sequence ids (config and tokenizer), the chat
 * template's end-of-turn token, --stop strings, --max-new-tokens. Sampling: greedy by default;
 * --temperature T > 0 samples (with --top-k, --top-p; --repetition-penalty applies to both), from
 * --seed (ref/sample.h: the same seed gives the same text on any run and batch size).
 * Bad input (a missing file, a malformed JSONL line, a prompt longer than the model's context, a
 * bad flag) ends with one message and exit status 1.
 */
#ifndef REFINE_TRAINERS_GENERATE_MAIN_H
#define REFINE_TRAINERS_GENERATE_MAIN_H

#include "trainers/gen_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

int generate_main(int argc, char **argv, const struct gen_device *dev);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GENERATE_MAIN_H */
