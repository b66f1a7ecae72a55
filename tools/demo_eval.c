/*
 * demo_eval.c — `make demo-eval`: what each weight type costs in quality on the trained demo model
 * (models/demo/README.md). The BF16 master checkpoint is packed in every mode (f32, bf16, q8, q4 at
 * groups 32/64/128, q3, and q4/q3 experts with a q8 backbone); the shipped models/demo.sluice (MLX
 * import, q4 experts / q8 rest) is evaluated beside them. Every model scores the held-out text the way
 * `sluice perplexity` does:
 *
 *   the text is tokenized once (the tokenizer stored in the f32 pack) as plain text; window w is
 *   tokens [512w, 512w+512), the trailing partial window dropped; each window is evaluated from a reset
 *   session with every row's logits, and tokens j = 256..511 are scored: -log softmax(row j-1)[t_j],
 *   the log-softmax in double.
 *
 * Per mode: bits per weight (over the quantized matrices, and over every matrix), file size, perplexity,
 * bits per byte (total NLL / ln 2 / the UTF-8 bytes of the scored tokens, each decoded on its own),
 * mean KL(p_f32 || p_mode) and top-1 agreement with the f32 pack over the scored positions, and prefill
 * tokens/s (512-token windows, experts resident: streaming gives bitwise the same logits).
 *
 * Windows run outer and models inner, so only one window's f32 log-probs are kept ([256][vocab]
 * doubles); every model is open at once (resident, ~16-95 MB each). The packs are written to a temporary
 * directory and unlinked as soon as they are open.
 *
 * Modes marked "int8 activations" use the default kernels (q8/q4 matrices dot int8-quantized activations,
 * docs/QUANT.md); the others the exact ones (sl_model_params.exact), so they measure the weights alone.
 * --shipped-only needs no master: it compares the shipped model's int8 kernels against its exact ones.
 *
 * Usage: build/demo_eval [--src DIR] [--text FILE] [--shipped FILE] [--tmp DIR] [--windows N]
 *                        [--threads N] [--json] [--shipped-only] [--model NAME=FILE ... [--int8]] [--kv T,...]
 * --model (repeatable) evaluates the f32 pack of --src and the given models instead of the modes: a .sluice as it
 * is, a .gguf packed keeping its types (llama-quantize's files: docs/QUANT.md "Against llama.cpp"); exact kernels,
 * or the default int8 ones with --int8.
 * --kv TYPE,... evaluates the --shipped model (exact kernels; --int8: the default ones) with an f32 KV cache (the
 * reference) and with each KV cache type listed (sluice.h sl_kv_type: f16, bf16, q8, q4, q4r; K/V for keys and values
 * apart, e.g. q4r/q8): the KV type's own KL, as llama-perplexity --kl-divergence measures -ctk / -ctv
 * (docs/PERFORMANCE.md).
 * Defaults: build/demo/out/hf, models/demo/heldout.txt, models/demo.sluice, $TMPDIR or /tmp, every
 * window, threads 0 (= online cores). Markdown on stdout (JSON with --json); progress on stderr.
 *
 * Sections: modes; scoring; the program.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "sluice.h"
#include "util/fileio.h"
#include "weight_bits.h"

#define WIN 512
#define HALF (WIN / 2)

/* ---- modes ------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    sl_quant experts, backbone; /* router: pack's default (q8 under a q4/q3 backbone) */
    int group;
    int shipped;                /* 1: not packed here: the --shipped file */
    int int8;                   /* 1: the default int8-activation kernels for q8/q4; 0: exact (sl_model_params.exact) */
    const char *path;           /* --model: this .sluice, or this GGUF packed as it is (its types kept) */
    sl_kv_type kv;              /* the sessions' KV cache type (f32 but under --kv) */
    sl_kv_type kv_v;            /* the values' when they differ (K/V under --kv), else SL_KV_F32: the same */
} mode;

static const mode ALL_MODES[] = {
    {"f32", SL_QUANT_F32, SL_QUANT_F32, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"bf16", SL_QUANT_BF16, SL_QUANT_BF16, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q8 g64", SL_QUANT_Q8, SL_QUANT_Q8, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q4 g32", SL_QUANT_Q4, SL_QUANT_Q4, 32, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q4 g64", SL_QUANT_Q4, SL_QUANT_Q4, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q4 g128", SL_QUANT_Q4, SL_QUANT_Q4, 128, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q3 g64", SL_QUANT_Q3, SL_QUANT_Q3, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q4 experts, q8 rest, g64", SL_QUANT_Q4, SL_QUANT_Q8, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q3 experts, q8 rest, g64", SL_QUANT_Q3, SL_QUANT_Q8, 64, 0, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"q8 g64, int8 activations", SL_QUANT_Q8, SL_QUANT_Q8, 64, 0, 1, NULL, SL_KV_F32, SL_KV_F32},
    {"q4 experts, q8 rest, g64, int8 activations", SL_QUANT_Q4, SL_QUANT_Q8, 64, 0, 1, NULL, SL_KV_F32, SL_KV_F32},
    {"shipped demo.sluice (MLX import: q4 experts, q8 rest, g64)", 0, 0, 0, 1, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"shipped demo.sluice, int8 activations", 0, 0, 0, 1, 1, NULL, SL_KV_F32, SL_KV_F32},
};
/* --shipped-only (no BF16 master here): the shipped model with exact kernels is the reference */
static const mode SHIPPED_MODES[] = {
    {"shipped demo.sluice, exact kernels (the reference)", 0, 0, 0, 1, 0, NULL, SL_KV_F32, SL_KV_F32},
    {"shipped demo.sluice, int8 activations (the default)", 0, 0, 0, 1, 1, NULL, SL_KV_F32, SL_KV_F32},
};
static const mode *MODES = ALL_MODES;
static int N_MODES = (int)(sizeof ALL_MODES / sizeof *ALL_MODES);
/* --model NAME=PATH (repeatable): f32 of --src, then each model (exact kernels; --int8: the default ones) */
#define MAX_MODES 32
static mode GIVEN[MAX_MODES];

typedef struct {
    sl_model *m;
    sl_session *s;
    weight_bits wb;
    long long file_bytes;
    double nll, kl, seconds;
    long agree;
} model_run;

/* ---- scoring ----------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* log(sum_v exp(row[v])) in double, and the argmax. row: [V] logits. Cannot fail. */
static double log_sum_exp(const float *row, int V, int *argmax) {
    double mx = row[0];
    int am = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > mx) { mx = row[v]; am = v; }
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
    *argmax = am;
    return log(sum) + mx;
}

/* Scores one window's rows for model r. logits: [WIN][V] of tokens t; ref_lp / ref_p: [HALF][V] f32
 * log-probs and probs, ref_arg: [HALF], written when is_ref, read otherwise. */
static void score_window(model_run *r, int is_ref, const float *logits, const int32_t *t, int V, double *ref_lp,
                         double *ref_p, int *ref_arg) {
    for (int j = HALF; j < WIN; j++) {
        const float *row = logits + (size_t)(j - 1) * V;
        int am;
        double lse = log_sum_exp(row, V, &am);
        r->nll += lse - (double)row[t[j]];
        double *lp = ref_lp + (size_t)(j - HALF) * V, *p = ref_p + (size_t)(j - HALF) * V;
        if (is_ref) {
            for (int v = 0; v < V; v++) {
                lp[v] = (double)row[v] - lse;
                p[v] = exp(lp[v]);
            }
            ref_arg[j - HALF] = am;
            continue;
        }
        double kl = 0;
        for (int v = 0; v < V; v++) kl += p[v] * (lp[v] - ((double)row[v] - lse));
        r->kl += kl;
        r->agree += am == ref_arg[j - HALF];
    }
}

/* ---- the program ------------------------------------------------------------------------------- */

typedef struct {
    const char *src, *text, *shipped, *tmp;
    int windows, threads, json;
} args;

static int usage(void) {
    fprintf(stderr, "usage: demo_eval [--src DIR] [--text FILE] [--shipped FILE] [--tmp DIR] [--windows N] "
                    "[--threads N] [--json] [--shipped-only] [--model NAME=FILE.gguf|FILE.sluice ... [--int8]] "
                    "[--kv TYPE,...]\n");
    return 2;
}

/* --kv T1,T2,...: the shipped model at an f32 KV cache, then at each type. 0, or -1 for an unknown type. */
static int parse_kv(char *list) {
    static char names[MAX_MODES][40];
    GIVEN[0] = (mode){"shipped, kv f32 (the reference)", 0, 0, 0, 1, 0, NULL, SL_KV_F32, SL_KV_F32};
    MODES = GIVEN;
    N_MODES = 1;
    for (char *t = strtok(list, ","); t && N_MODES < MAX_MODES; t = strtok(NULL, ",")) {
        char *slash = strchr(t, '/'); /* K/V: keys and values apart */
        if (slash) *slash = 0;
        const int k = sl_kv_type_from_name(t), v = slash ? sl_kv_type_from_name(slash + 1) : SL_KV_F32;
        if (k < 0 || v < 0) { fprintf(stderr, "demo_eval: --kv: '%s' is not a KV cache type (T or K/V)\n", t); return -1; }
        snprintf(names[N_MODES], sizeof names[N_MODES], "shipped, kv %s%s%s", t, slash ? "/" : "", slash ? slash + 1 : "");
        GIVEN[N_MODES] = (mode){names[N_MODES], 0, 0, 0, 1, 0, NULL, (sl_kv_type)k, (sl_kv_type)v};
        N_MODES++;
    }
    return 0;
}

static int parse(int argc, char **argv, args *a) {
    const char *t = getenv("TMPDIR");
    *a = (args){"build/demo/out/hf", "models/demo/heldout.txt", "models/demo.sluice", t && *t ? t : "/tmp", 0, 0, 0};
    int int8 = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(s, "--src") && more) a->src = argv[++i];
        else if (!strcmp(s, "--text") && more) a->text = argv[++i];
        else if (!strcmp(s, "--shipped") && more) a->shipped = argv[++i];
        else if (!strcmp(s, "--tmp") && more) a->tmp = argv[++i];
        else if (!strcmp(s, "--windows") && more) a->windows = atoi(argv[++i]);
        else if (!strcmp(s, "--threads") && more) a->threads = atoi(argv[++i]);
        else if (!strcmp(s, "--shipped-only")) {
            MODES = SHIPPED_MODES;
            N_MODES = (int)(sizeof SHIPPED_MODES / sizeof *SHIPPED_MODES);
        }
        else if (!strcmp(s, "--json")) a->json = 1;
        else if (!strcmp(s, "--kv") && more) {
            if (parse_kv(argv[++i])) return usage();
        }
        else if (!strcmp(s, "--int8")) int8 = 1;
        else if (!strcmp(s, "--model") && more && strchr(argv[i + 1], '=') && N_MODES < MAX_MODES) {
            if (MODES != GIVEN) { /* the first: f32 of --src is the reference */
                GIVEN[0] = ALL_MODES[0];
                MODES = GIVEN;
                N_MODES = 1;
            }
            char *nv = argv[++i], *eq = strchr(nv, '=');
            *eq = 0;
            GIVEN[N_MODES].name = nv;
            GIVEN[N_MODES++].path = eq + 1;
        }
        else return usage();
    }
    for (int k = GIVEN[0].kv == SL_KV_F32 && GIVEN[0].shipped ? 0 : 1; int8 && k < MAX_MODES; k++) GIVEN[k].int8 = 1;
    return 0;
}

/* Packs mode mi into dir (or takes the shipped file), opens it resident, notes size and bits, and
 * unlinks the pack. Returns 0, or 1 after printing why. */
static int open_mode(const args *a, int mi, const char *dir, model_run *r, sl_tokenizer **tok) {
    const mode *md = &MODES[mi];
    char path[1200];
    sl_error err = {0};
    size_t pl = md->path ? strlen(md->path) : 0;
    if (md->shipped) snprintf(path, sizeof path, "%s", a->shipped);
    else if (md->path && (pl < 5 || strcmp(md->path + pl - 5, ".gguf"))) snprintf(path, sizeof path, "%s", md->path);
    else if (md->path) { /* a GGUF: packed with its types kept */
        snprintf(path, sizeof path, "%s/mode%d.sluice", dir, mi);
        sl_pack_params p = sl_pack_params_default();
        p.hash_sources = 0;
        if (sl_pack(md->path, path, &p, &err)) { fprintf(stderr, "demo_eval: %s: %s\n", md->name, err.msg); return 1; }
    } else {
        snprintf(path, sizeof path, "%s/mode%d.sluice", dir, mi);
        sl_pack_params p = sl_pack_params_default();
        p.quant = md->backbone;
        p.quant_experts = md->experts;
        p.group = md->group;
        p.hash_sources = 0;
        if (sl_pack(a->src, path, &p, &err)) { fprintf(stderr, "demo_eval: %s: %s\n", md->name, err.msg); return 1; }
    }
    struct stat sb;
    r->file_bytes = stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
    weight_bits_of(path, &r->wb);
    if (tok && sl_tokenizer_load(path, tok, &err)) { fprintf(stderr, "demo_eval: %s\n", err.msg); return 1; }
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1;
    mp.n_threads = a->threads;
    mp.exact = !md->int8;
    mp.kv_type = md->kv;
    mp.kv_type_v = md->kv_v;
    int rc = sl_model_open(path, &mp, &r->m, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "demo_eval: %s\n", err.msg);
    if (!rc && sl_session_new(r->m, WIN, &r->s)) { fprintf(stderr, "demo_eval: %s\n", sl_model_errmsg(r->m)); rc = 1; }
    if (!md->shipped && (!md->path || strcmp(path, md->path))) unlink(path); /* a pack made here */
    return rc;
}

/* ids of the text file; NULL after printing why. */
static int32_t *tokenize_file(const sl_tokenizer *tok, const char *file, int *n, long *n_bytes) {
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    sl_error err = {0};
    if (fio_read_file(file, &text, &len, &err) ||
        sl_tokenize(tok, text, len, SL_TOKENIZE_NO_SPECIAL, &ids, n, &err)) {
        fprintf(stderr, "demo_eval: %s: %s\n", file, err.msg);
        free(ids);
        ids = NULL;
    }
    *n_bytes = (long)len;
    free(text);
    return ids;
}

static void print_markdown(const args *a, const model_run *r, int n_ids, long text_bytes, int windows, int total_windows,
                           long long bytes, int V, double seconds) {
    long scored = (long)windows * HALF;
    printf("Held-out text `%s`: %ld bytes, %d tokens; %d of %d windows of %d tokens, second half scored: %ld tokens, "
           "%lld bytes. Vocabulary %d; kernels %s; %d threads; %.0f s in all.\n\n",
           a->text, text_bytes, n_ids, windows, total_windows, WIN, scored, bytes, V, kern_default_ops()->name,
           a->threads > 0 ? a->threads : (int)sysconf(_SC_NPROCESSORS_ONLN), seconds);
    printf("| mode | bits/weight, quantized matrices | bits/weight, all matrices | file | held-out ppl | bits/byte "
           "| ppl vs f32 | mean KL(f32 ‖ mode) | top-1 = f32 | prefill tok/s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    double ppl0 = exp(r[0].nll / scored);
    for (int i = 0; i < N_MODES; i++) {
        double ppl = exp(r[i].nll / scored), bpb = r[i].nll / log(2.0) / (double)bytes;
        char qb[32] = "–";
        if (r[i].wb.quant_share > 0)
            snprintf(qb, sizeof qb, "%.2f (%.0f%%)", r[i].wb.quant_bits, 100 * r[i].wb.quant_share);
        printf("| %s | %s | %.2f | %.1f MB | %.4f | %.4f | %+.2f%% | ", MODES[i].name, qb, r[i].wb.all_bits,
               (double)r[i].file_bytes / 1e6, ppl, bpb, 100 * (ppl / ppl0 - 1));
        if (i == 0) printf("– | – | ");
        else printf("%.2e | %.2f%% | ", r[i].kl / scored, 100.0 * (double)r[i].agree / (double)scored);
        printf("%.0f |\n", (double)windows * WIN / r[i].seconds);
    }
}

static void print_json(const args *a, const model_run *r, int n_ids, int windows, long long bytes, double seconds) {
    long scored = (long)windows * HALF;
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "modes");
    cJSON_AddStringToObject(o, "text", a->text);
    cJSON_AddNumberToObject(o, "tokens", n_ids);
    cJSON_AddNumberToObject(o, "windows", windows);
    cJSON_AddNumberToObject(o, "scored", (double)scored);
    cJSON_AddNumberToObject(o, "bytes", (double)bytes);
    cJSON_AddStringToObject(o, "kernels", kern_default_ops()->name);
    cJSON_AddNumberToObject(o, "seconds", seconds);
    for (int i = 0; i < N_MODES; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "mode", MODES[i].name);
        cJSON_AddNumberToObject(m, "bits_quantized", r[i].wb.quant_bits);
        cJSON_AddNumberToObject(m, "share_quantized", r[i].wb.quant_share);
        cJSON_AddNumberToObject(m, "bits_all", r[i].wb.all_bits);
        cJSON_AddNumberToObject(m, "file_bytes", (double)r[i].file_bytes);
        cJSON_AddNumberToObject(m, "nll", r[i].nll);
        cJSON_AddNumberToObject(m, "ppl", exp(r[i].nll / scored));
        cJSON_AddNumberToObject(m, "bpb", r[i].nll / log(2.0) / (double)bytes);
        cJSON_AddNumberToObject(m, "kl", i ? r[i].kl / scored : 0);
        cJSON_AddNumberToObject(m, "top1", i ? (double)r[i].agree / (double)scored : 1);
        cJSON_AddNumberToObject(m, "prefill_tok_s", (double)windows * WIN / r[i].seconds);
        cJSON_AddItemToArray(arr, m);
    }
    char *txt = cJSON_Print(o);
    if (txt) printf("%s\n", txt);
    free(txt);
    cJSON_Delete(o);
}

int main(int argc, char **argv) {
    args a;
    if (parse(argc, argv, &a)) return 2;
    double t_start = now_s();
    model_run runs[MAX_MODES];
    memset(runs, 0, sizeof runs);
    sl_tokenizer *tok = NULL, *tok_shipped = NULL;
    int32_t *ids = NULL, *ids_shipped = NULL;
    float *logits = NULL;
    double *ref_lp = NULL, *ref_p = NULL;
    long *tok_bytes = NULL;
    int rc = 1, n_ids = 0, n_shipped = 0, ref_arg[HALF];
    long text_bytes = 0, unused;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/demo-eval-XXXXXX", a.tmp);
    if (!mkdtemp(dir)) { perror(dir); return 1; }
    for (int i = 0; i < N_MODES; i++) {
        if (isatty(2)) fprintf(stderr, "\rpacking and opening %d of %d: %-60s", i + 1, N_MODES, MODES[i].name);
        if (open_mode(&a, i, dir, &runs[i], i == 0 ? &tok : MODES[i].shipped && !tok_shipped ? &tok_shipped : NULL))
            goto out;
    }
    if (isatty(2)) fputc('\n', stderr);
    ids = tokenize_file(tok, a.text, &n_ids, &text_bytes);
    if (!ids) goto out;
    ids_shipped = tok_shipped ? tokenize_file(tok_shipped, a.text, &n_shipped, &unused) : NULL;
    if (tok_shipped && !ids_shipped) goto out;
    if (tok_shipped && (n_shipped != n_ids || memcmp(ids, ids_shipped, (size_t)n_ids * sizeof *ids))) {
        fprintf(stderr, "demo_eval: the shipped model's tokenizer gives other ids than the master's\n");
        goto out;
    }
    int V = sl_model_n_vocab(runs[0].m), total_windows = n_ids / WIN;
    for (int i = 1; i < N_MODES; i++)
        if (sl_model_n_vocab(runs[i].m) != V) { fprintf(stderr, "demo_eval: %s: another vocabulary\n", MODES[i].name); goto out; }
    int windows = a.windows > 0 && a.windows < total_windows ? a.windows : total_windows;
    if (windows < 1) { fprintf(stderr, "demo_eval: %s: fewer than %d tokens\n", a.text, WIN); goto out; }
    logits = malloc((size_t)WIN * V * sizeof *logits);
    ref_lp = malloc((size_t)HALF * V * sizeof *ref_lp);
    ref_p = malloc((size_t)HALF * V * sizeof *ref_p);
    tok_bytes = malloc((size_t)V * sizeof *tok_bytes);
    if (!logits || !ref_lp || !ref_p || !tok_bytes) { fprintf(stderr, "demo_eval: out of memory\n"); goto out; }
    for (int v = 0; v < V; v++) tok_bytes[v] = -1;
    long long bytes = 0;
    for (int w = 0; w < windows; w++) {
        const int32_t *t = ids + (size_t)w * WIN;
        for (int j = HALF; j < WIN; j++) { /* each scored token's own bytes, as HF decode([id]) */
            if (tok_bytes[t[j]] < 0) {
                char *s = NULL;
                size_t len = 0;
                sl_error err = {0};
                if (sl_detokenize(tok, &t[j], 1, 0, &s, &len, &err)) { fprintf(stderr, "demo_eval: %s\n", err.msg); goto out; }
                free(s);
                tok_bytes[t[j]] = (long)len;
            }
            bytes += tok_bytes[t[j]];
        }
        for (int i = 0; i < N_MODES; i++) {
            model_run *r = &runs[i];
            sl_session_reset(r->s);
            double t0 = now_s();
            if (sl_session_eval(r->s, t, WIN, logits, 1)) {
                fprintf(stderr, "demo_eval: %s: %s\n", MODES[i].name, sl_session_errmsg(r->s));
                goto out;
            }
            r->seconds += now_s() - t0;
            score_window(r, i == 0, logits, t, V, ref_lp, ref_p, ref_arg);
        }
        if (isatty(2))
            fprintf(stderr, "\rwindow %d of %d: f32 perplexity so far %.4f ", w + 1, windows,
                    exp(runs[0].nll / ((w + 1) * HALF)));
    }
    if (isatty(2)) fputc('\n', stderr);
    if (a.json) print_json(&a, runs, n_ids, windows, bytes, now_s() - t_start);
    else print_markdown(&a, runs, n_ids, text_bytes, windows, total_windows, bytes, V, now_s() - t_start);
    rc = 0;
out:
    for (int i = 0; i < N_MODES; i++) {
        sl_session_free(runs[i].s);
        sl_model_close(runs[i].m);
    }
    rmdir(dir);
    sl_tokenizer_free(tok);
    sl_tokenizer_free(tok_shipped);
    free(ids);
    free(ids_shipped);
    free(logits);
    free(ref_lp);
    free(ref_p);
    free(tok_bytes);
    return rc;
}
