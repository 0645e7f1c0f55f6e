/* options_test.c — the trainers' flags: defaults, parsing, every kind of bad input, JSON. */
#include <string.h>

#include "tests/common/harness.h"
#include "train/options.h"

static int parse(struct train_options *o, struct io_err *e, int argc, const char **argv) {
    train_options_defaults(o, "/cache");
    return train_options_parse(o, argc, (char **)argv, PROGRAM_TRAIN, e);
}

static void expect_error(const char *phrase, int argc, const char **argv) {
    struct train_options o;
    struct io_err e = {{0}};
    int rc = parse(&o, &e, argc, argv);
    EXPECT(rc == -1, "'%s %s' must be rejected", argv[1], argc > 2 ? argv[2] : "");
    EXPECT(strstr(e.msg, phrase) != NULL, "message '%s' should mention '%s'", e.msg, phrase);
}

int main(void) {
    struct train_options o;
    struct io_err e;
    const char *none[] = {"train"};
    EXPECT(parse(&o, &e, 1, none) == 0, "defaults parse: %s", e.msg);
    EXPECT(strcmp(o.model, "/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf") == 0, "default model %s", o.model);
    EXPECT(o.n_data == 1 && strcmp(o.data[0], "/cache/corpus/kjv.txt") == 0, "default data %s", o.data[0]);
    EXPECT(o.method == METHOD_LORA && o.rank == 16 && o.alpha == 32.0f && o.targets == 0x7F, "default adapter");

    const char *a[] = {"train", "--method", "qdora", "--rank=8", "--alpha", "16", "--targets", "q_proj,v,down",
                       "--data", "a.txt,b.jsonl", "--data=c", "--lr", "2e-4", "--seed", "0x10", "--auto-batch",
                       "--recompute", "layer", "--scaling", "rslora"};
    EXPECT(parse(&o, &e, (int)(sizeof a / sizeof a[0]), a) == 0, "parse: %s", e.msg);
    EXPECT(o.method == METHOD_QDORA && o.rank == 8 && o.alpha == 16.0f, "method/rank/alpha");
    EXPECT(o.targets == ((1u << 0) | (1u << 2) | (1u << 6)), "targets mask 0x%x", o.targets);
    EXPECT(o.n_data == 3 && strcmp(o.data[1], "b.jsonl") == 0 && strcmp(o.data[2], "c") == 0,
           "--data replaces the default and accumulates (%d)", o.n_data);
    EXPECT(o.lr == 2e-4f && o.seed == 16 && o.auto_batch == 1 && o.recompute == RECOMPUTE_LAYER &&
               o.scaling == LORA_SCALE_RSLORA,
           "values");

    expect_error("unknown option '--rnak'", 3, (const char *[]){"train", "--rnak", "4"});
    expect_error("is not an integer", 3, (const char *[]){"train", "--rank", "4x"});
    expect_error("out of range", 3, (const char *[]){"train", "--rank", "0"});
    expect_error("not one of lora | dora | qlora | qdora | full", 3, (const char *[]){"train", "--method", "lorra"});
    expect_error("unknown target 'qq'", 3, (const char *[]){"train", "--targets", "q,qq"});
    expect_error("needs a value", 2, (const char *[]){"train", "--lr"});
    expect_error("not a finite number", 3, (const char *[]){"train", "--lr", "nan"});
    expect_error("takes no value", 2, (const char *[]){"train", "--auto-batch=1"});
    expect_error("unexpected argument", 2, (const char *[]){"train", "model.gguf"});
    expect_error("set --epochs or --max-steps", 3, (const char *[]){"train", "--max-steps", "0"});
    expect_error("--warmup 30 must be smaller", 3, (const char *[]){"train", "--warmup", "30"});
    expect_error("--method full", 5, (const char *[]){"train", "--method", "full", "--dropout", "0.1"});
    expect_error("non-negative", 3, (const char *[]){"train", "--seed", "-1"});
    const char *autoseq[] = {"train", "--seq", "auto", "--memory-limit", "24"};
    EXPECT(parse(&o, &e, 5, autoseq) == 0 && o.seq == OPT_SEQ_AUTO && o.memory_limit == 24.0f, "--seq auto: %s", e.msg);
    expect_error("is not an integer", 3, (const char *[]){"train", "--seq", "automatic"});

    char json[8192];
    EXPECT(parse(&o, &e, 1, none) == 0, "defaults");
    EXPECT(train_options_to_json(&o, json, sizeof json) == 0, "json fits");
    EXPECT(strstr(json, "\"method\":\"lora\"") && strstr(json, "\"rank\":16") &&
               strstr(json, "\"targets\":[\"q\",\"k\",\"v\",\"o\",\"gate\",\"up\",\"down\"]") &&
               strstr(json, "\"data\":[\"/cache/corpus/kjv.txt\"]"),
           "json: %s", json);
    EXPECT(strcmp(train_method_names[METHOD_QLORA], "qlora") == 0, "method name");
    return test_finish("options_test");
}
