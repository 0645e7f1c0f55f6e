/* metrics.c — the JSONL log, the SVG loss plot and the progress line (metrics.h). */
#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"

static void push_train(struct metrics *m, const struct train_record *r, const struct fp8_record *f8) {
    if (m->n_train == m->cap_train) {
        m->cap_train = m->cap_train ? 2 * m->cap_train : 256;
        m->train = realloc(m->train, sizeof *m->train * (size_t)m->cap_train);
        m->train_fp8 = realloc(m->train_fp8, sizeof *m->train_fp8 * (size_t)m->cap_train);
        CHECK(m->train != NULL && m->train_fp8 != NULL, "out of memory");
    }
    m->train_fp8[m->n_train] = f8 ? *f8 : (struct fp8_record){0, 0.0, 0.0, 0};
    m->train[m->n_train++] = *r;
}

static void push_eval(struct metrics *m, const struct eval_record *r) {
    if (m->n_eval == m->cap_eval) {
        m->cap_eval = m->cap_eval ? 2 * m->cap_eval : 64;
        m->eval = realloc(m->eval, sizeof *m->eval * (size_t)m->cap_eval);
        CHECK(m->eval != NULL, "out of memory");
    }
    m->eval[m->n_eval++] = *r;
}

static void push_note(struct metrics *m, int step, const char *line) {
    if (m->n_note == m->cap_note) {
        m->cap_note = m->cap_note ? 2 * m->cap_note : 8;
        m->note = realloc(m->note, sizeof *m->note * (size_t)m->cap_note);
        CHECK(m->note != NULL, "out of memory");
    }
    m->note[m->n_note].step = step;
    m->note[m->n_note].line = strdup(line);
    CHECK(m->note[m->n_note].line != NULL, "out of memory");
    m->n_note++;
}

/* A train record's line; its FP8 statistics (f8 present) at the end. */
static int format_train_line(char *buf, size_t cap, const struct train_record *r, const struct fp8_record *f8) {
    char fp8[160] = "";
    if (f8 != NULL && f8->present)
        snprintf(fp8, sizeof fp8, ",\"fp8_scale_min\":%.9g,\"fp8_scale_max\":%.9g,\"fp8_saturated\":%lld",
                 f8->scale_min, f8->scale_max, f8->saturated);
    return snprintf(buf, cap,
                    "{\"kind\":\"train\",\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
                    "\"tokens_per_s\":%.6g,\"mfu\":%.6g,\"mem_GiB\":%.6g,\"elapsed_s\":%.6g%s}\n",
                    r->step, r->loss, r->lr, r->grad_norm, r->tokens, r->tokens_per_s, r->mfu, r->mem_gib, r->elapsed_s,
                    fp8);
}

static int format_eval_line(char *buf, size_t cap, const struct eval_record *r) {
    return snprintf(buf, cap,
                    "{\"kind\":\"eval\",\"step\":%d,\"val_loss\":%.9g,\"val_ppl\":%.9g,\"val_tokens\":%lld,\"elapsed_s\":%.6g}\n",
                    r->step, r->val_loss, r->val_ppl, r->val_tokens, r->elapsed_s);
}

static int write_train_line(FILE *f, const struct train_record *r, const struct fp8_record *f8) {
    char line[768];
    format_train_line(line, sizeof line, r, f8);
    return fputs(line, f);
}

static int write_eval_line(FILE *f, const struct eval_record *r) {
    char line[512];
    format_eval_line(line, sizeof line, r);
    return fputs(line, f);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Reads an existing log back: keeps the header line and the records up to resume_step. A last
 * line without its newline that is not JSON is the half line of a killed run: dropped. */
static int read_back(struct metrics *m, char **header, int resume_step, struct io_err *e) {
    char *text = NULL;
    size_t len = 0;
    if (read_file_text(&text, &len, m->log_path, (size_t)1 << 30, e) != 0) return -1;
    char *line = text;
    int lineno = 0;
    while (line != NULL && *line != '\0') {
        char *nl = strchr(line, '\n');
        if (nl != NULL) *nl = '\0';
        lineno++;
        if (*line != '\0') {
            cJSON *o = cJSON_Parse(line);
            if (o == NULL && nl == NULL) break;
            if (o == NULL) {
                free(text);
                return io_fail(e, "%s:%d: not a JSON object (the log is damaged; delete or repair that line to resume)",
                               m->log_path, lineno);
            }
            const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
            const char *k = cJSON_IsString(kind) ? kind->valuestring : "";
            const double step_d = num(o, "step");
            const int step = step_d >= 0 && step_d <= 1e9 ? (int)step_d : -1;
            if (strcmp(k, "run") == 0 && *header == NULL) {
                *header = strdup(line);
            } else if (strcmp(k, "train") == 0 && step >= 0 && step <= resume_step) {
                struct train_record r = {step, num(o, "loss"), num(o, "lr"), num(o, "grad_norm"), (long long)num(o, "tokens"),
                                         num(o, "tokens_per_s"), num(o, "mfu"), num(o, "mem_GiB"), num(o, "elapsed_s")};
                const struct fp8_record f8 = {cJSON_GetObjectItemCaseSensitive(o, "fp8_saturated") != NULL,
                                              num(o, "fp8_scale_min"), num(o, "fp8_scale_max"),
                                              (long long)num(o, "fp8_saturated")};
                push_train(m, &r, &f8);
            } else if (strcmp(k, "eval") == 0 && step >= 0 && step <= resume_step) {
                struct eval_record r = {step, num(o, "val_loss"), num(o, "val_ppl"), (long long)num(o, "val_tokens"),
                                        num(o, "elapsed_s")};
                push_eval(m, &r);
            } else if ((strcmp(k, "resume") == 0 || strcmp(k, "sample") == 0) && step >= 0 && step <= resume_step) {
                push_note(m, step, line); /* kept verbatim: resume records and samples */
            }
            cJSON_Delete(o);
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(text);
    return 0;
}

/* A growable string for the SVG and the rewritten log. */
struct sbuf {
    char *s;
    size_t n, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The kept records in the order the loop wrote them: per step its train record, its evaluation
 * (the one before the first step, step 0, ahead of every train record), then its notes. */
static void render_records(struct sbuf *b, const struct metrics *m) {
    int j = 0, k = 0;
    char line[768];
    for (int i = 0; i <= m->n_train; i++) {
        const int step = i < m->n_train ? m->train[i].step : 2147483647;
        for (;;) {
            const int se = j < m->n_eval ? m->eval[j].step : 2147483647, sn = k < m->n_note ? m->note[k].step : 2147483647;
            if (se < step && se <= sn) {
                format_eval_line(line, sizeof line, &m->eval[j++]);
                sb_printf(b, "%s", line);
            } else if (sn < step) {
                sb_printf(b, "%s\n", m->note[k++].line);
            } else {
                break;
            }
        }
        if (i == m->n_train) break;
        format_train_line(line, sizeof line, &m->train[i], &m->train_fp8[i]);
        sb_printf(b, "%s", line);
        while (j < m->n_eval && m->eval[j].step == step) {
            format_eval_line(line, sizeof line, &m->eval[j++]);
            sb_printf(b, "%s", line);
        }
        while (k < m->n_note && m->note[k].step == step) sb_printf(b, "%s\n", m->note[k++].line);
    }
}

int metrics_open(struct metrics *m, const char *dir, const char *run_header_json, int resume_step, struct io_err *e) {
    memset(m, 0, sizeof *m);
    snprintf(m->log_path, sizeof m->log_path, "%s/metrics.jsonl", dir);
    snprintf(m->svg_path, sizeof m->svg_path, "%s/loss.svg", dir);
    char *header = NULL;
    if (resume_step >= 0 && file_exists(m->log_path) && read_back(m, &header, resume_step, e) != 0) {
        free(header);
        metrics_close(m);
        return -1;
    }
    int rc = 0;
    if (resume_step < 0) {
        m->log = fopen(m->log_path, "w");
        if (m->log == NULL) rc = io_fail(e, "%s: cannot write the metrics log: %s", m->log_path, strerror(errno));
        else fprintf(m->log, "%s\n", run_header_json);
    } else {
        /* The kept records replace the file in one rename: a kill leaves the old log or the new. */
        struct sbuf b = {NULL, 0, 0};
        sb_printf(&b, "%s\n", header != NULL ? header : run_header_json);
        render_records(&b, m);
        rc = write_file_atomic(m->log_path, b.s, b.n, e);
        free(b.s);
        if (rc == 0 && (m->log = fopen(m->log_path, "a")) == NULL)
            rc = io_fail(e, "%s: cannot append to the metrics log: %s", m->log_path, strerror(errno));
    }
    free(header);
    if (rc == 0 && fflush(m->log) != 0) rc = io_fail(e, "%s: write failed: %s", m->log_path, strerror(errno));
    if (rc != 0) metrics_close(m);
    return rc;
}

int metrics_train_fp8(struct metrics *m, const struct train_record *r, const struct fp8_record *f8, struct io_err *e) {
    push_train(m, r, f8);
    if (write_train_line(m->log, r, f8) < 0 || fflush(m->log) != 0) return io_fail(e, "%s: write failed", m->log_path);
    return 0;
}

int metrics_train(struct metrics *m, const struct train_record *r, struct io_err *e) {
    return metrics_train_fp8(m, r, NULL, e);
}

int metrics_eval(struct metrics *m, const struct eval_record *r, struct io_err *e) {
    push_eval(m, r);
    if (write_eval_line(m->log, r) < 0 || fflush(m->log) != 0) return io_fail(e, "%s: write failed", m->log_path);
    return 0;
}

int metrics_note(struct metrics *m, int step, const char *json, struct io_err *e) {
    push_note(m, step, json);
    if (fprintf(m->log, "%s\n", json) < 0 || fflush(m->log) != 0) return io_fail(e, "%s: write failed", m->log_path);
    return 0;
}

int metrics_sample(struct metrics *m, int step, int index, const char *prompt, const char *completion, int tokens,
                   struct io_err *e) {
    cJSON *j = cJSON_CreateObject();
    CHECK(j != NULL, "out of memory");
    cJSON_AddStringToObject(j, "kind", "sample");
    cJSON_AddNumberToObject(j, "step", step);
    cJSON_AddNumberToObject(j, "index", index);
    cJSON_AddStringToObject(j, "prompt", prompt);
    cJSON_AddStringToObject(j, "completion", completion);
    cJSON_AddNumberToObject(j, "tokens", tokens);
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    CHECK(line != NULL, "out of memory");
    const int rc = metrics_note(m, step, line, e);
    free(line);
    return rc;
}

void metrics_close(struct metrics *m) {
    if (m->log != NULL) fclose(m->log);
    free(m->train);
    free(m->train_fp8);
    free(m->eval);
    for (int i = 0; i < m->n_note; i++) free(m->note[i].line);
    free(m->note);
    memset(m, 0, sizeof *m);
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int need = vsnprintf(b->s != NULL ? b->s + b->n : NULL, b->s != NULL ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        CHECK(need >= 0, "format error");
        if (b->s != NULL && b->n + (size_t)need < b->cap) {
            b->n += (size_t)need;
            return;
        }
        b->cap = (b->cap + (size_t)need + 1) * 2;
        b->s = realloc(b->s, b->cap);
        CHECK(b->s != NULL, "out of memory");
    }
}

/* A "nice" tick step (1, 2 or 5 × 10^k) giving about `target` ticks over span. */
static double nice_step(double span, int target) {
    double raw = span / target, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

char *metrics_svg(const struct train_record *train, int n_train, const struct eval_record *eval, int n_eval) {
    const double W = 720, Hh = 420, left = 70, right = 20, top = 40, bottom = 50;
    double xmin = 0, xmax = 1, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < n_train; i++) {
        if (!isfinite(train[i].loss)) continue;
        if (train[i].step > xmax) xmax = train[i].step;
        ymin = fmin(ymin, train[i].loss), ymax = fmax(ymax, train[i].loss);
    }
    for (int i = 0; i < n_eval; i++) {
        if (!isfinite(eval[i].val_loss)) continue;
        if (eval[i].step > xmax) xmax = eval[i].step;
        ymin = fmin(ymin, eval[i].val_loss), ymax = fmax(ymax, eval[i].val_loss);
    }
    if (!(ymin <= ymax)) ymin = 0, ymax = 1;
    if (ymax - ymin < 1e-6) ymin -= 0.5, ymax += 0.5;
    double ys = nice_step(ymax - ymin, 6), xs = nice_step(xmax - xmin, 8);
    ymin = floor(ymin / ys) * ys, ymax = ceil(ymax / ys) * ys;
    const double pw = W - left - right, ph = Hh - top - bottom;
#define PX(x) (left + ((x) - xmin) / (xmax - xmin) * pw)
#define PY(y) (top + (ymax - (y)) / (ymax - ymin) * ph)
    struct sbuf b = {NULL, 0, 0};
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                  "font-family=\"sans-serif\" font-size=\"12\">\n", W, Hh, W, Hh);
    sb_printf(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    sb_printf(&b, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">refine: loss against optimizer step</text>\n", left);
    for (double y = ymin; y <= ymax + ys * 1e-6; y += ys) {
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, PY(y), W - right, PY(y));
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", left - 6, PY(y) + 4, y);
    }
    for (double x = 0; x <= xmax + xs * 1e-6; x += xs) {
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PX(x), top, PX(x), top + ph);
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", PX(x), top + ph + 16, x);
    }
    sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", left, top, pw, ph);
    sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", left + pw / 2, Hh - 10);
    sb_printf(&b, "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\">loss (nats/token)</text>\n",
              top + ph / 2, top + ph / 2);
    if (n_train > 0) {
        sb_printf(&b, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
        for (int i = 0; i < n_train; i++)
            if (isfinite(train[i].loss)) sb_printf(&b, "%.1f,%.1f ", PX(train[i].step), PY(train[i].loss));
        sb_printf(&b, "\"/>\n");
    }
    if (n_eval > 0) {
        sb_printf(&b, "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < n_eval; i++)
            if (isfinite(eval[i].val_loss)) sb_printf(&b, "%.1f,%.1f ", PX(eval[i].step), PY(eval[i].val_loss));
        sb_printf(&b, "\"/>\n");
        for (int i = 0; i < n_eval; i++)
            if (isfinite(eval[i].val_loss))
                sb_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#d62728\"/>\n", PX(eval[i].step), PY(eval[i].val_loss));
    }
    double lx = W - right - 190, ly = top + 14;
    sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\">training loss</text>\n", lx, ly, lx + 24, ly, lx + 30, ly + 4);
    sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-width=\"2\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\">validation loss</text>\n", lx, ly + 18, lx + 24, ly + 18, lx + 30, ly + 22);
    sb_printf(&b, "</svg>\n");
#undef PX
#undef PY
    return b.s;
}

int metrics_plot(const struct metrics *m, struct io_err *e) {
    char *svg = metrics_svg(m->train, m->n_train, m->eval, m->n_eval);
    int rc = write_file_atomic(m->svg_path, svg, strlen(svg), e);
    free(svg);
    return rc;
}

static void hms(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

void metrics_progress_line(char *buf, size_t cap, const struct train_record *r, int total, double eta_s) {
    char el[32], eta[32], mfu[32] = "", mem[32] = "";
    hms(el, sizeof el, r->elapsed_s);
    hms(eta, sizeof eta, eta_s);
    if (r->mfu > 0) snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100.0 * r->mfu);
    if (r->mem_gib > 0) snprintf(mem, sizeof mem, " | mem %.2f GiB", r->mem_gib);
    snprintf(buf, cap, "step %d/%d | loss %.4f | lr %.3g | grad %.3g | %.0f tok/s%s%s | %s elapsed | ETA %s", r->step,
             total, r->loss, r->lr, r->grad_norm, r->tokens_per_s, mfu, mem, el, eta);
}

double train_flops_per_token(const struct model_config *c, int T, int full) {
    const double n_mm = (double)c->L * ((double)c->C * (c->H + 2.0 * c->KVH) * c->D + (double)c->H * c->D * c->C +
                                        3.0 * c->C * c->F) +
                        (double)c->V * c->C;
    const double attn = (double)c->L * 4.0 * c->H * c->D * T / 2.0;
    return (full ? 6.0 : 4.0) * n_mm + 3.0 * attn;
}
