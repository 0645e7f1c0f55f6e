/* signals.h — stopping a run on request without losing its work: SIGTERM (what a batch scheduler
 * sends before it preempts or ends a job), SIGINT (Ctrl-C) and SIGHUP (the terminal closed).
 *
 * train_signals_install: from then on, the FIRST of these signals is only recorded (and the
 * handler says on stderr that the run stops after the current optimizer step, with a checkpoint,
 * and that a second signal stops it at once); the loop (train/loop.c) asks after every optimizer
 * step, finishes that step, writes a checkpoint, and returns with the signal in
 * loop_result.stop_signal; the program prints where the checkpoint is and the command that
 * resumes it, and exits 0. A SECOND signal (any of the three) restores the default action and
 * re-raises itself: the process ends at once, killed by that signal (status 128 + its number).
 * A signal that is ignored when the loop starts stays ignored: `nohup` ignores SIGHUP so that a
 * run outlives its terminal, and a shell without job control starts background commands with
 * SIGINT ignored; the caller meant that.
 * Nothing else changes: a run that is never signalled behaves exactly as before. Installing again
 * (every train_loop_run does) forgets a signal recorded earlier. The handlers use only
 * async-signal-safe calls (write, signal, raise) and SA_RESTART, so that the writes of the step
 * in progress are not interrupted.
 *
 * train_stop_after_step: the loop's one decision "stop after this step?" — the end of the run,
 * --stop-after, or a recorded signal. It is a function of its own so that a run of several
 * processes can make the decision together: every rank must stop after the same step (they
 * checkpoint one state), so the multi-process loop will combine the ranks' answers here (the
 * largest reason over the ranks, through the communicator) before acting on it.
 */
#ifndef REFINE_TRAIN_SIGNALS_H
#define REFINE_TRAIN_SIGNALS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Why the loop stops after a step; ordered so that the largest reason over several ranks wins. */
enum stop_reason {
    STOP_NONE = 0,   /* go on */
    STOP_END = 1,    /* the last step of the run (--max-steps / --epochs) */
    STOP_LIMIT = 2,  /* --stop-after: this run's share of the steps is done */
    STOP_SIGNAL = 3, /* SIGTERM, SIGINT or SIGHUP was received */
};

void train_signals_install(void);

/* The first signal received since train_signals_install; 0 when none. */
int train_stop_signal(void);

/* After `step` (1-based, just completed) of a run of `total` steps that stops this time at
 * `stop_at` (≤ total; --stop-after). The last step of the run ends it (STOP_END) even when a
 * signal came: the run is complete, and its exports are written before the program exits. */
enum stop_reason train_stop_after_step(int step, int stop_at, int total);

/* "SIGTERM", "SIGINT", "SIGHUP", or "signal N". */
const char *train_signal_name(int sig);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_SIGNALS_H */
