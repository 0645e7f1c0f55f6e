/* train_compare_main.c — //tests/parity:train_compare: compares training runs by their --out
 * folders (the rules are in train_compare.c's header).
 *
 *   train_compare tolerance --oracle F32DIR --same BF16DIR --candidate GPUDIR [--name LABEL]
 *       the candidate's distance to the fp32 oracle against the same-precision run's: losses
 *       ≤ 5×, parameters together ≤ 2×, each tensor ≤ 6× (with its kind's typical error)
 *   train_compare identical DIR_A DIR_B
 *       the same printed losses (metrics.jsonl, timing fields aside), the same last checkpoint
 *       step, and byte-identical checkpoint tensors
 *
 * Prints one summary line (and on failure the first difference); exit status 0 on PASS, 1 on
 * FAIL, and 1 with one "refine: " message on bad usage or an unreadable run folder.
 */
#include <stdio.h>
#include <string.h>

#include "io/error.h"
#include "tests/parity/train_compare.h"

static const char k_usage[] =
    "usage: train_compare tolerance --oracle F32DIR --same BF16DIR --candidate GPUDIR [--name LABEL]\n"
    "       train_compare identical DIR_A DIR_B";

static void usage_exit(const char *what) {
    struct io_err e;
    io_fail(&e, "%s\n%s", what, k_usage);
    io_exit(&e);
}

static void open_or_exit(struct run *r, const char *dir) {
    struct io_err e;
    if (run_open(r, dir, &e) != 0) io_exit(&e);
}

static int tolerance_main(int argc, char **argv) {
    const char *oracle = NULL, *same = NULL, *cand = NULL, *name = NULL;
    for (int i = 2; i < argc; i++) {
        const char **slot = strcmp(argv[i], "--oracle") == 0      ? &oracle
                            : strcmp(argv[i], "--same") == 0      ? &same
                            : strcmp(argv[i], "--candidate") == 0 ? &cand
                            : strcmp(argv[i], "--name") == 0      ? &name
                                                                  : NULL;
        if (slot == NULL) {
            char msg[1200];
            snprintf(msg, sizeof msg, "tolerance: unknown argument '%s'", argv[i]);
            usage_exit(msg);
        }
        if (i + 1 == argc) usage_exit("tolerance: a flag without its value");
        *slot = argv[++i];
    }
    if (oracle == NULL || same == NULL || cand == NULL) usage_exit("tolerance needs --oracle, --same and --candidate");
    if (name == NULL) name = cand;
    struct run o, s, c;
    open_or_exit(&o, oracle);
    open_or_exit(&s, same);
    open_or_exit(&c, cand);
    struct tolerance_result res;
    const int rc = compare_tolerance(&o, &s, &c, &res);
    char line[4096];
    tolerance_summary(line, sizeof line, name, &res);
    printf("train_compare tolerance %s\n", line);
    if (rc != 0) printf("  first failure: %s\n", res.failure);
    run_close(&o);
    run_close(&s);
    run_close(&c);
    return rc;
}

static int identical_main(int argc, char **argv) {
    if (argc != 4) usage_exit("identical takes two run folders");
    struct run a, b;
    open_or_exit(&a, argv[2]);
    open_or_exit(&b, argv[3]);
    char diff[4096];
    const int rc = compare_identical(&a, &b, diff, sizeof diff);
    printf("train_compare identical %s %s: %d records, checkpoint step-%d, %d tensors %s\n", argv[2], argv[3],
           a.n_records, a.latest_step, a.state.n_tensors, rc == 0 ? "IDENTICAL" : "DIFFERENT");
    if (rc != 0) printf("  first difference: %s\n", diff);
    run_close(&a);
    run_close(&b);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "tolerance") == 0) return tolerance_main(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "identical") == 0) return identical_main(argc, argv);
    usage_exit(argc >= 2 ? "unknown mode (tolerance | identical)" : "no mode given");
    return 1;
}
