/*
 * cmd_text.c — `sluice tokenize` (text -> ids, or ids -> text with --decode) and the text side of
 * `sluice run` (-p, --chat, sampling flags, stop strings; cmd_run.c hands over when they are used).
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* Reads all of stdin into a malloc'ed buffer; NULL on error. */
char *cli_read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    if (!b) return NULL;
    while ((k = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
        }
    }
    b[n] = 0;
    *len = n;
    return b;
}

int cli_load_tokenizer(const char *cmd, const char *path, sl_tokenizer **tok) {
    sl_error err = {0};
    if (sl_tokenizer_load(path, tok, &err)) return cli_fail(cmd, "%s", err.msg);
    return 0;
}

static void print_ids(const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
}

/* --batch: input is a JSON array of strings; prints one line of ids per string. */
static int tokenize_batch(const sl_tokenizer *tok, const char *src, int flags) {
    cJSON *a = cJSON_Parse(src);
    if (!cJSON_IsArray(a)) { cJSON_Delete(a); return cli_fail("tokenize", "--batch needs a JSON array of strings"); }
    int rc = 0;
    for (const cJSON *e = a->child; e && !rc; e = e->next) {
        int32_t *ids = NULL;
        int n = 0;
        sl_error err = {0};
        if (!cJSON_IsString(e)) rc = cli_fail("tokenize", "--batch: every element must be a string");
        else if (sl_tokenize(tok, e->valuestring, strlen(e->valuestring), flags, &ids, &n, &err))
            rc = cli_fail("tokenize", "%s", err.msg);
        else print_ids(ids, n);
        free(ids);
    }
    cJSON_Delete(a);
    return rc;
}

/* Parses {"messages": [{"role", "content", "reasoning_content", "tool_calls"}], "tools": [...],
 * "enable_thinking": bool, "add_generation_prompt": bool} and renders it with the chat template. */
int cli_render_chat(const sl_tokenizer *tok, const char *json, char **out, sl_error *err) {
    cJSON *j = cJSON_Parse(json);
    const cJSON *msgs = cJSON_GetObjectItem(j, "messages");
    if (!cJSON_IsArray(msgs)) { cJSON_Delete(j); snprintf(err->msg, sizeof err->msg, "--chat needs a JSON object with a messages array"); return 1; }
    int n = cJSON_GetArraySize(msgs), i = 0;
    sl_chat_msg *m = calloc((size_t)n + 1, sizeof *m);
    char **owned = calloc((size_t)n + 2, sizeof *owned);
    sl_chat_params p = sl_chat_params_default();
    for (const cJSON *e = msgs->child; e; e = e->next, i++) {
        m[i].role = cJSON_GetStringValue(cJSON_GetObjectItem(e, "role"));
        m[i].content = cJSON_GetStringValue(cJSON_GetObjectItem(e, "content"));
        m[i].reasoning = cJSON_GetStringValue(cJSON_GetObjectItem(e, "reasoning_content"));
        const cJSON *tc = cJSON_GetObjectItem(e, "tool_calls");
        if (tc && !cJSON_IsNull(tc)) m[i].tool_calls = owned[i] = cJSON_PrintUnformatted(tc);
    }
    const cJSON *tools = cJSON_GetObjectItem(j, "tools"), *th = cJSON_GetObjectItem(j, "enable_thinking"),
                *gp = cJSON_GetObjectItem(j, "add_generation_prompt");
    if (tools && !cJSON_IsNull(tools)) p.tools = owned[n] = cJSON_PrintUnformatted(tools);
    if (cJSON_IsBool(th)) p.enable_thinking = cJSON_IsTrue(th);
    if (cJSON_IsBool(gp)) p.add_generation_prompt = cJSON_IsTrue(gp);
    int rc = sl_chat_format(tok, m, n, &p, out, err) ? 1 : 0;
    for (int k = 0; k <= n; k++) free(owned[k]);
    free(owned);
    free(m);
    cJSON_Delete(j);
    return rc;
}

/* --chat: input is a JSON conversation; prints the rendered prompt's ids (or, with --text, the text). */
static int tokenize_chat(const sl_tokenizer *tok, const char *src, int flags, int as_text) {
    char *txt = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 0;
    sl_error err = {0};
    if (cli_render_chat(tok, src, &txt, &err)) rc = cli_fail("tokenize", "%s", err.msg);
    else if (as_text) fputs(txt, stdout);
    else if (sl_tokenize(tok, txt, strlen(txt), flags, &ids, &n, &err)) rc = cli_fail("tokenize", "%s", err.msg);
    else print_ids(ids, n);
    free(txt);
    free(ids);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL;
    int decode = 0, no_special = 0, strict = 0, batch = 0, chat = 0, as_text = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc;
        if ((!strcmp(s, "-m") || !strcmp(s, "--model") || !strcmp(s, "--tokenizer")) && more) model = argv[++i];
        else if (!strcmp(s, "--decode")) decode = 1;
        else if (!strcmp(s, "--no-special")) no_special = 1;
        else if (!strcmp(s, "--strict-utf8")) strict = 1;
        else if (!strcmp(s, "--batch")) batch = 1;
        else if (!strcmp(s, "--chat")) chat = 1;
        else if (!strcmp(s, "--text")) as_text = 1;
        else if (s[0] == '-' && s[1]) return cli_bad_option("tokenize", argc, argv, i);
        else if (!text) text = s;
        else return cli_fail("tokenize", "one TEXT argument at most (quote it, or pipe it on stdin)");
    }
    if (cli_model_path("tokenize", &model)) return 1; /* as run does */
    sl_tokenizer *tok = NULL;
    if (cli_load_tokenizer("tokenize", model, &tok)) return 1;
    char *in = NULL, *out = NULL;
    int32_t *ids = NULL;
    size_t len = 0;
    int rc = 1, n = 0;
    if (text) len = strlen(text);
    else if (!(in = cli_read_stdin(&len))) { cli_fail("tokenize", "reading stdin failed"); goto done; }
    const char *src = text ? text : in;
    sl_error err = {0};
    int flags = (no_special ? SL_TOKENIZE_NO_SPECIAL : 0) | (strict ? SL_TOKENIZE_STRICT_UTF8 : 0);
    if (batch) rc = tokenize_batch(tok, src, flags);
    else if (chat) rc = tokenize_chat(tok, src, flags, as_text);
    if (batch || chat) goto done;
    if (decode) {
        if ((n = cli_parse_tokens(src, &ids)) < 0) {
            /* also accept the space-separated form this command prints */
            char *c = strdup(src);
            for (char *p = c; p && *p; p++)
                if (*p == ' ' || *p == '\n' || *p == '\t') *p = ',';
            size_t cl = c ? strlen(c) : 0;
            while (cl && c[cl - 1] == ',') c[--cl] = 0;
            n = c ? cli_parse_tokens(c, &ids) : -1;
            free(c);
            if (n < 0) { cli_fail("tokenize", "--decode needs token ids (space or comma separated)"); goto done; }
        }
        size_t ol;
        if (sl_detokenize(tok, ids, n, 0, &out, &ol, &err)) { cli_fail("tokenize", "%s", err.msg); goto done; }
        fwrite(out, 1, ol, stdout);
        putchar('\n');
    } else {
        if (sl_tokenize(tok, src, len, flags, &ids, &n, &err)) { cli_fail("tokenize", "%s", err.msg); goto done; }
        print_ids(ids, n);
    }
    rc = 0;
done:
    free(in);
    free(out);
    free(ids);
    sl_tokenizer_free(tok);
    return rc;
}

/* ---- run -p ------------------------------------------------------------------------------------- */

void cli_text_opts_init(cli_text_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 256;
    o->think = -1;
    o->sp = sl_sampler_params_default();
    o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    o->mp = cli_model_params();
}

int cli_text_opt(const char *cmd, cli_text_opts *o, int argc, char **argv, int *i) {
    const char *s = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    char *end = NULL;
#define NEED() do { if (!v) return -cli_bad_option(cmd, argc, argv, *i); (*i)++; } while (0)
#define NUM(dst) do { double x_; NEED(); if (cli_num(cmd, s, v, &x_)) return -1; dst = x_; } while (0)
    if (!strcmp(s, "-m") || !strcmp(s, "--model")) { NEED(); o->model = v; }
    else if (!strcmp(s, "-p") || !strcmp(s, "--prompt")) { NEED(); o->prompt = v; }
    else if (!strcmp(s, "--system")) { NEED(); o->system = v; }
    else if (!strcmp(s, "-n") || !strcmp(s, "--max-tokens")) NUM(o->n_gen);
    else if (!strcmp(s, "--temp")) NUM(o->sp.temp);
    else if (!strcmp(s, "--top-k")) NUM(o->sp.top_k);
    else if (!strcmp(s, "--top-p")) NUM(o->sp.top_p);
    else if (!strcmp(s, "--min-p")) NUM(o->sp.min_p);
    else if (!strcmp(s, "--repeat-penalty")) NUM(o->sp.repeat_penalty);
    else if (!strcmp(s, "--presence-penalty")) NUM(o->sp.presence_penalty);
    else if (!strcmp(s, "--repeat-last-n")) NUM(o->sp.repeat_last_n);
    else if (!strcmp(s, "--seed")) { NEED(); o->sp.seed = strtoull(v, &end, 10); o->seed_set = 1; if (end == v || *end) { cli_fail(cmd, "--seed: '%s' is not a number", v); return -1; } }
    else if (!strcmp(s, "--stop")) {
        NEED();
        if (o->n_stop == 16) { cli_fail(cmd, "at most 16 --stop strings"); return -1; }
        if (!*v) { cli_fail(cmd, "--stop needs a non-empty string"); return -1; }
        o->stop[o->n_stop++] = v;
    } else if (!strcmp(s, "--think")) {
        NEED();
        if (strcmp(v, "on") && strcmp(v, "off")) { cli_fail(cmd, "--think takes on or off"); return -1; }
        o->think = !strcmp(v, "on");
    } else if (!strcmp(s, "--chat")) o->chat = 1;
    else if (!strcmp(s, "--context-shift")) o->ctx_shift = 1;
    else if (!strcmp(s, "--keep")) NUM(o->n_keep);
    else if (!strcmp(s, "--stats")) o->stats = 1;
    else if (!strcmp(s, "--ids")) o->ids = 1;
    else if (s[0] != '-' && !o->model) o->model = s; /* sluice run ORG/NAME, sluice chat MODEL.sluice */
    else {
        int bad = 0;
        if (!cli_model_opt(argc, argv, i, &o->mp, cmd, &bad)) return 0;
        if (bad) return -1;
    }
#undef NUM
#undef NEED
    return 1;
}

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) { (void)sig; g_interrupted = 1; }

void cli_write_text(const char *text, size_t len, int terminal) {
    if (!terminal) { fwrite(text, 1, len, stdout); return; }
    /* model output may hold escape sequences: on a terminal, C0 controls other than \t \n \r and DEL
     * are not printed (random test models emit them; they can reprogram the terminal) */
    size_t a = 0;
    for (size_t i = 0; i <= len; i++) {
        unsigned char ch = i < len ? (unsigned char)text[i] : 0;
        if (i == len || (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || ch == 0x7f) {
            fwrite(text + a, 1, i - a, stdout);
            a = i + 1;
        }
    }
}

typedef struct { int ids, n, tty; } run_out;

static int print_token(void *user, int32_t id, const char *text, size_t len) {
    run_out *o = user;
    if (o->ids) {
        if (id >= 0) printf(o->n++ ? " %d" : "%d", id);
    } else cli_write_text(text, len, o->tty);
    fflush(stdout);
    return g_interrupted;
}

int cmd_run_text(int argc, char **argv) {
    cli_text_opts o;
    cli_text_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_text_opt("run", &o, argc, argv, &i);
        if (r < 0) return -r;
        if (r == 0) return cli_bad_option("run", argc, argv, i);
    }
    if (cli_model_path("run", &o.model)) return 1;
    if (o.n_gen < 1) return cli_fail("run", "-n must be at least 1");
    sl_model *m = NULL;
    sl_session *s = NULL;
    sl_tokenizer *tok = NULL;
    sl_sampler *smp = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    sl_error err = {0};
    if (cli_load_tokenizer("run", o.model, &tok)) goto out;
    if (o.chat) {
        sl_chat_msg msgs[2] = {{"system", o.system, NULL, NULL}, {"user", o.prompt, NULL, NULL}};
        sl_chat_params cp = sl_chat_params_default();
        cp.enable_thinking = o.think;
        if (sl_chat_format(tok, o.system ? msgs : msgs + 1, o.system ? 2 : 1, &cp, &text, &err)) { cli_fail("run", "%s", err.msg); goto out; }
    } else if (o.system) { cli_fail("run", "--system needs --chat"); goto out; }
    const char *src = text ? text : o.prompt;
    if (sl_tokenize(tok, src, strlen(src), 0, &ids, &n, &err)) { cli_fail("run", "%s", err.msg); goto out; }
    if (n == 0) { cli_fail("run", "the prompt is empty: nothing to generate from"); goto out; }
    cli_gpu_split(&o.mp);
    if (sl_model_open(o.model, &o.mp, &m, &err)) { cli_fail("run", "%s", err.msg); goto out; }
    cli_say_backend("run", m, &o.mp);
    if (sl_session_new(m, 0, &s) || sl_sampler_new(&o.sp, sl_model_n_vocab(m), &smp)) { cli_fail("run", "out of memory"); goto out; }
    if (sl_tokenizer_n_vocab(tok) > sl_model_n_vocab(m)) {
        cli_fail("run", "the tokenizer has %d ids but the model only %d", sl_tokenizer_n_vocab(tok), sl_model_n_vocab(m));
        goto out;
    }
    sl_gen_params gp = sl_gen_params_default();
    gp.max_tokens = o.n_gen;
    gp.context_shift = o.ctx_shift;
    gp.n_keep = o.n_keep;
    gp.stop = o.stop;
    gp.n_stop = o.n_stop;
    sl_gen_result res;
    run_out ro = {o.ids, 0, isatty(1)};
    signal(SIGINT, on_sigint);
    if (sl_generate(m, s, tok, smp, ids, n, &gp, print_token, &ro, &res, &err)) { printf("\n"); cli_fail("run", "%s", err.msg); goto out; }
    printf("\n");
    fflush(stdout); /* the text before the stats lines on stderr, also through a pipe */
    if (o.stats) {
        static const char *why[] = {"end of text", "stop string", "length", "interrupted"};
        cli_print_stats(m, res.n_prompt, res.n_generated, res.prefill_s, res.decode_s, why[res.stop]); /* one line */
    }
    rc = 0;
out:
    free(text);
    free(ids);
    sl_sampler_free(smp);
    sl_session_free(s);
    if (cli_close_model("run", m, !rc)) rc = 1;
    sl_tokenizer_free(tok);
    return rc;
}
