/* signals.c — the graceful stop on SIGTERM, SIGINT and SIGHUP (signals.h). */
#include "train/signals.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;

static void say(const char *s) {
    ssize_t unused = write(2, s, strlen(s)); /* best effort: stderr may be gone (SIGHUP) */
    (void)unused;
}

static void on_signal(int sig) {
    if (g_signal != 0) {
        /* the second signal: end now, as that signal ends a process */
        say("refine: second signal: stopping at once\n");
        signal(sig, SIG_DFL);
        raise(sig); /* delivered when this handler returns */
        return;
    }
    g_signal = sig;
    say(sig == SIGTERM  ? "refine: SIGTERM: stopping after this optimizer step with a checkpoint (a second signal stops at once)\n"
        : sig == SIGINT ? "refine: SIGINT: stopping after this optimizer step with a checkpoint (a second signal stops at once)\n"
                        : "refine: SIGHUP: stopping after this optimizer step with a checkpoint (a second signal stops at once)\n");
}

void train_signals_install(void) {
    g_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* one handler at a time: the second signal sees the first one recorded */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGHUP);
    const int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction old;
        /* ignored on entry (nohup's SIGHUP, SIGINT of a background job): the caller meant it */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

int train_stop_signal(void) { return (int)g_signal; }

enum stop_reason train_stop_after_step(int step, int stop_at, int total) {
    if (step >= total) return STOP_END; /* the run is complete: its exports follow, signalled or not */
    if (g_signal != 0) return STOP_SIGNAL;
    if (step >= stop_at) return STOP_LIMIT;
    return STOP_NONE;
}

const char *train_signal_name(int sig) {
    static char buf[32];
    switch (sig) {
        case SIGTERM: return "SIGTERM";
        case SIGINT: return "SIGINT";
        case SIGHUP: return "SIGHUP";
        default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
    }
}
