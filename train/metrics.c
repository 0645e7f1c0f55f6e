/* metrics.c — the JSONL log, the SVG loss plot and the progress line (metrics.h). */
#include "train/metrics.h"

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

static int write_train_line(FILE *f, const struct train_record *r, const struct fp8_record *f8) {
    char fp8[160] = "";
    if (f8 != NULL && f8->present)
        snprintf(fp8, sizeof fp8, ",\"fp8_scale_min\":%.9g,\"fp8_scale_max\":%.9g,\"fp8_saturated\":%lld",
                 f8->scale_min, f8->scale_max, f8->saturated);
    return fprintf(f,
                   "{\"kind\":\"train\",\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
                   "\"tokens_per_s\":%.6g,\"mfu\":%.6g,\"mem_GiB\":%.6g,\"elapsed_s\":%.6g%s}\n",
                   r->step, r->loss, r->lr, r->grad_norm, r->tokens, r->tokens_per_s, r->mfu, r->mem_gib, r->elapsed_s,
                   fp8);
}

static int write_eval_line(FILE *f, const struct eval_record *r) {
    return fprintf(f, "{\"kind\":\"eval\",\"step\":%d,\"val_loss\":%.9g,\"val_ppl\":%.9g,\"val_tokens\":%lld,\"elapsed_s\":%.6g}\n",
                   r->step, r->val_loss, r->val_ppl, r->val_tokens, r->elapsed_s);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Reads an existing log back: keeps the header line and the records up to resume_step. */
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
            if (o == NULL) {
                free(text);
                return io_fail(e, "%s:%d: not a JSON object (a truncated line from a killed run can be deleted by hand)",
                               m->log_path, lineno);
            }
            const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
            const char *k = cJSON_IsString(kind) ? kind->valuestring : "";
            int step = (int)num(o, "step");
            if (strcmp(k, "run") == 0 && *header == NULL) {
                *header = strdup(line);
            } else if (strcmp(k, "train") == 0 && step <= resume_step) {
                struct train_record r = {step, num(o, "loss"), num(o, "lr"), num(o, "grad_norm"), (long long)num(o, "tokens"),
                                         num(o, "tokens_per_s"), num(o, "mfu"), num(o, "mem_GiB"), num(o, "elapsed_s")};
                const struct fp8_record f8 = {cJSON_GetObjectItemCaseSensitive(o, "fp8_saturated") != NULL,
                                              num(o, "fp8_scale_min"), num(o, "fp8_scale_max"),
                                              (long long)num(o, "fp8_saturated")};
                push_train(m, &r, &f8);
            } else if (strcmp(k, "sample") == 0 && step <= resume_step) {
                m->extra = realloc(m->extra, (size_t)(m->n_extra + 1) * sizeof *m->extra);
                m->extra_step = realloc(m->extra_step, (size_t)(m->n_extra + 1) * sizeof *m->extra_step);
                CHECK(m->extra != NULL && m->extra_step != NULL, "out of memory");
                m->extra[m->n_extra] = strdup(line);
                CHECK(m->extra[m->n_extra] != NULL, "out of memory");
                m->extra_step[m->n_extra++] = step;
            } else if (strcmp(k, "eval") == 0 && step <= resume_step) {
                struct eval_record r = {step, num(o, "val_loss"), num(o, "val_ppl"), (long long)num(o, "val_tokens"),
                                        num(o, "elapsed_s")};
                push_eval(m, &r);
            }
            cJSON_Delete(o);
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(text);
    return 0;
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
    m->log = fopen(m->log_path, "w");
    if (m->log == NULL) {
        free(header);
        metrics_close(m);
        return io_fail(e, "%s: cannot write the metrics log", m->log_path);
    }
    fprintf(m->log, "%s\n", header != NULL ? header : run_header_json);
    free(header);
    /* Rewrite the kept records in the order the loop wrote them: an evaluation after the train
     * record of its step, the one before the first step (step 0) ahead of every train record. */
    int j = 0, x = 0;
    for (int i = 0; i < m->n_train; i++) {
        while (j < m->n_eval && m->eval[j].step < m->train[i].step) write_eval_line(m->log, &m->eval[j++]);
        while (x < m->n_extra && m->extra_step[x] < m->train[i].step) fprintf(m->log, "%s\n", m->extra[x++]);
        write_train_line(m->log, &m->train[i], &m->train_fp8[i]);
        while (j < m->n_eval && m->eval[j].step == m->train[i].step) write_eval_line(m->log, &m->eval[j++]);
        while (x < m->n_extra && m->extra_step[x] == m->train[i].step) fprintf(m->log, "%s\n", m->extra[x++]);
    }
    while (j < m->n_eval) write_eval_line(m->log, &m->eval[j++]);
    while (x < m->n_extra) fprintf(m->log, "%s\n", m->extra[x++]);
    if (fflush(m->log) != 0) return io_fail(e, "%s: write failed", m->log_path);
    return 0;
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

int metrics_sample(struct metrics *m, int step, int index, const char *prompt, const char *completion, int tokens,
                   struct io_err *e) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "sample");
    cJSON_AddNumberToObject(j, "step", step);
    cJSON_AddNumberToObject(j, "index", index);
    cJSON_AddStringToObject(j, "prompt", prompt);
    cJSON_AddStringToObject(j, "completion", completion);
    cJSON_AddNumberToObject(j, "tokens", tokens);
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    CHECK(line != NULL, "out of memory");
    const int bad = fprintf(m->log, "%s\n", line) < 0 || fflush(m->log) != 0;
    free(line);
    if (bad) return io_fail(e, "%s: write failed", m->log_path);
    return 0;
}

void metrics_close(struct metrics *m) {
    for (int i = 0; i < m->n_extra; i++) free(m->extra[i]);
    free(m->extra);
    free(m->extra_step);
    if (m->log != NULL) fclose(m->log);
    free(m->train);
    free(m->train_fp8);
    free(m->eval);
    memset(m, 0, sizeof *m);
}

/* A growable string for the SVG. */
struct sbuf {
    char *s;
    size_t n, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
