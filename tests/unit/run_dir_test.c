/* run_dir_test.c — the --out folder (train/run_dir.h): a folder that holds another run is refused
 * (resume, keep or --overwrite, said in the message), a second claimant is refused naming the
 * holder's pid, --overwrite deletes only refine's names, the leftovers of killed runs are cleaned,
 * deleting never follows a symbolic link (links at and inside checkpoint step folders keep their
 * targets), and the resume command quotes what it must. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/file.h"
#include "tests/common/harness.h"
#include "train/run_dir.h"

static char g_tmp[900];

static const char *at(const char *rel) {
    static char buf[8][1200];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, rel);
    return buf[k];
}

static void put(const char *rel, const char *text) {
    struct io_err e;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", at(rel));
    *strrchr(dir, '/') = '\0';
    if (make_dirs(dir, &e) != 0 || write_file_atomic(at(rel), text, strlen(text), &e) != 0) test_fail("%s", e.msg);
}

static int exists(const char *rel) {
    struct stat st;
    return lstat(at(rel), &st) == 0;
}

static int holds(const char *rel, const char *text) {
    char *got = NULL;
    struct io_err e;
    if (read_file_text(&got, NULL, at(rel), 1 << 20, &e) != 0) return 0;
    const int same = strcmp(got, text) == 0;
    free(got);
    return same;
}

static void test_claim(void) {
    struct run_dir d;
    struct io_err e = {{0}};
    /* A fresh folder: created and locked; the lock names this process. */
    EXPECT(run_dir_claim(&d, at("fresh"), "", 0, &e) == 0, "a new folder is claimed: %s", e.msg);
    char pid[32];
    snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    EXPECT(holds("fresh/.refine.lock", pid), "the lock file holds this pid");
    /* A second claimant (another process) is refused, naming the holder. */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        struct run_dir d2;
        struct io_err e2 = {{0}};
        char want[64];
        snprintf(want, sizeof want, "pid %ld", (long)getppid());
        const int rc = run_dir_claim(&d2, at("fresh"), "", 0, &e2);
        _exit(rc == -1 && strstr(e2.msg, want) != NULL && strstr(e2.msg, "another refine run") != NULL ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a second run on a locked folder is refused naming the holder's pid");
    run_dir_release(&d);
    child = fork();
    if (child == 0) {
        struct run_dir d2;
        struct io_err e2;
        _exit(run_dir_claim(&d2, at("fresh"), "", 0, &e2) == 0 ? 0 : 1);
    }
    waitpid(child, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "released, the folder can be claimed again");

    /* A folder that holds a run: refused with the ways on; its files untouched. */
    put("old/metrics.jsonl", "{\"kind\":\"run\"}\n");
    put("old/checkpoint/LATEST", "step-3\n");
    put("old/checkpoint/step-3/trainer.json", "{}");
    put("old/adapter/adapter_model.safetensors", "A");
    put("old/notes.txt", "mine");
    EXPECT(run_dir_claim(&d, at("old"), "", 0, &e) == -1 && strstr(e.msg, "holds an earlier run") != NULL &&
               strstr(e.msg, "--resume") != NULL && strstr(e.msg, "old/checkpoint") != NULL &&
               strstr(e.msg, "--overwrite") != NULL && strstr(e.msg, "another --out") != NULL,
           "an --out holding a run is refused, saying how to resume, keep or replace it: %s", e.msg);
    EXPECT(holds("old/metrics.jsonl", "{\"kind\":\"run\"}\n") && holds("old/adapter/adapter_model.safetensors", "A"),
           "the refused folder is untouched");
    /* Resuming the run the folder holds is continuing it. */
    EXPECT(run_dir_claim(&d, at("old"), at("old/checkpoint"), 0, &e) == 0, "--resume OUT/checkpoint continues: %s", e.msg);
    run_dir_release(&d);
    EXPECT(run_dir_claim(&d, at("old"), at("old"), 1, &e) == 0 && exists("old/checkpoint/step-3/trainer.json"),
           "--overwrite is moot when --resume names this folder (nothing deleted): %s", e.msg);
    run_dir_release(&d);
    /* A resume from elsewhere into a folder holding a run is still refused. */
    put("other/checkpoint/LATEST", "step-1\n");
    EXPECT(run_dir_claim(&d, at("old"), at("other"), 0, &e) == -1 && strstr(e.msg, "holds an earlier run") != NULL,
           "resuming another run into a folder holding one is refused: %s", e.msg);
    EXPECT(run_dir_claim(&d, at("old"), at("nowhere"), 0, &e) == -1 && strstr(e.msg, "nowhere") != NULL,
           "a --resume that does not exist is named: %s", e.msg);
    /* --overwrite: refine's names go, the user's file stays. */
    EXPECT(run_dir_claim(&d, at("old"), "", 1, &e) == 0, "--overwrite claims: %s", e.msg);
    run_dir_release(&d);
    EXPECT(!exists("old/metrics.jsonl") && !exists("old/checkpoint") && !exists("old/adapter") && holds("old/notes.txt", "mine"),
           "--overwrite deleted refine's outputs and kept notes.txt");
    /* Not a folder. */
    put("afile", "x");
    EXPECT(run_dir_claim(&d, at("afile"), "", 0, &e) == -1 && strstr(e.msg, "not a folder") != NULL, "a file as --out: %s",
           e.msg);
}

static void test_leftovers(void) {
    /* What kills leave behind is deleted at the claim; foreign names of the same shape stay. */
    put("left/metrics.jsonl", "{}\n");
    put("left/metrics.jsonl.tmp.4242", "half");
    put("left/checkpoint/LATEST", "step-2\n");
    put("left/checkpoint/LATEST.tmp.99999", "step-");
    put("left/checkpoint/step-2/state.safetensors", "S");
    put("left/checkpoint/step-2/state.safetensors.tmp.7", "S");
    put("left/checkpoint/step-3.tmp/state.safetensors", "S");
    put("left/adapter/adapter_config.json.tmp.12345", "{");
    put("left/adapter/adapter_config.json.tmp.x", "not refine's");
    put("left/mine.tmp.1", "not refine's");
    struct run_dir d;
    struct io_err e;
    EXPECT(run_dir_claim(&d, at("left"), at("left/checkpoint"), 0, &e) == 0, "claim: %s", e.msg);
    run_dir_release(&d);
    EXPECT(!exists("left/metrics.jsonl.tmp.4242") && !exists("left/checkpoint/LATEST.tmp.99999") &&
               !exists("left/checkpoint/step-2/state.safetensors.tmp.7") && !exists("left/checkpoint/step-3.tmp") &&
               !exists("left/adapter/adapter_config.json.tmp.12345"),
           "the .tmp.<pid> files and the step-<N>.tmp folder of killed runs are gone");
    EXPECT(exists("left/metrics.jsonl") && exists("left/checkpoint/LATEST") && exists("left/checkpoint/step-2/state.safetensors") &&
               exists("left/adapter/adapter_config.json.tmp.x") && exists("left/mine.tmp.1"),
           "the checkpoint, the log and names refine did not write are kept");
}

static void test_no_links_followed(void) {
    /* Victims outside the run, reached through links where refine deletes. */
    put("victim1/precious.txt", "1");
    put("victim2/precious.txt", "2");
    put("victim3.txt", "3");
    put("links/checkpoint/LATEST", "step-9\n");
    EXPECT(symlink(at("victim1"), at("links/checkpoint/step-1")) == 0, "link step-1: %s", strerror(errno));
    put("links/checkpoint/step-2/trainer.json", "{}");
    EXPECT(symlink(at("victim2"), at("links/checkpoint/step-2/sub")) == 0, "link inside step-2");
    EXPECT(symlink(at("victim3.txt"), at("links/checkpoint/step-2/state.safetensors")) == 0, "state as a link");
    put("links/checkpoint/step-4/state.safetensors", "S");
    put("links/checkpoint/step-4/foreign.bin", "F");
    const char *ck = at("links/checkpoint");
    EXPECT(run_dir_remove_step(ck, "step-1") == 0 && !exists("links/checkpoint/step-1"), "the link step-1 is unlinked");
    run_dir_remove_step(ck, "step-2");
    run_dir_remove_step(ck, "step-4");
    EXPECT(holds("victim1/precious.txt", "1") && holds("victim2/precious.txt", "2") && holds("victim3.txt", "3"),
           "no target of a link was touched");
    EXPECT(exists("links/checkpoint/step-2/sub") && !exists("links/checkpoint/step-2/trainer.json") &&
               !exists("links/checkpoint/step-2/state.safetensors"),
           "in step-2 refine's names (the link named state.safetensors itself) went, the foreign link stayed");
    EXPECT(exists("links/checkpoint/step-4/foreign.bin") && !exists("links/checkpoint/step-4/state.safetensors"),
           "a folder with foreign content keeps it");
    /* --overwrite through links: the link named adapter goes, its target stays. */
    put("victim4/adapter_model.safetensors", "4");
    put("ow/metrics.jsonl", "{}\n");
    EXPECT(symlink(at("victim4"), at("ow/adapter")) == 0, "link adapter");
    struct run_dir d;
    struct io_err e;
    EXPECT(run_dir_claim(&d, at("ow"), "", 1, &e) == 0, "overwrite: %s", e.msg);
    run_dir_release(&d);
    EXPECT(holds("victim4/adapter_model.safetensors", "4") && !exists("ow/adapter"),
           "--overwrite unlinked the link, not the adapter it points to");
}

static void test_resume_command(void) {
    char *argv[] = {"/bin/train", "--data", "my data.txt", "--overwrite", "--resume", "x", "--lr=1e-3", "--out", "o'k"};
    char buf[512];
    run_dir_resume_command(buf, sizeof buf, 9, argv, "o'k");
    EXPECT(strcmp(buf, "/bin/train --data 'my data.txt' --lr=1e-3 --out 'o'\\''k' --resume 'o'\\''k/checkpoint'") == 0,
           "resume command: %s", buf);
}

int main(void) {
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/run_dir_test_%d", t ? t : "/tmp", (int)getpid());
    mkdir(g_tmp, 0755);
    test_claim();
    test_leftovers();
    test_no_links_followed();
    test_resume_command();
    return test_finish("run_dir_test");
}
