/*
 * cmd_chat.c — `sluice chat`: an interactive multi-turn conversation.
 *
 * The session keeps the KV cache and the DeltaNet state between turns, so each turn evaluates only
 * what is new: "<|im_end|>" if the previous answer did not end with it, then "\n" and the new user turn
 * rendered by the chat template with the generation prompt. (As in llama.cpp, the model sees earlier
 * answers as it wrote them, thinking included, where the template would drop old reasoning on a
 * re-render.) Line editing and history come from libedit when stdin is a terminal; otherwise lines are
 * read plainly, which is how the tests drive it. Ctrl-C stops the current answer, not the program (at
 * the prompt it starts a fresh line); Ctrl-D or /quit leaves.
 *
 * --save FILE writes the conversation after every turn (the session state with the REPL's own
 * bookkeeping beside it: sl_session_save_file, a temp name then rename, so FILE is always a whole
 * state); --load FILE starts from one, so a conversation goes on after a restart without evaluating
 * its history again. /save FILE does the same from the prompt.
 */
#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) { (void)sig; g_stop = 1; }

/* How an answer is shown: a <think> block as thinking (dimmed on a terminal), an empty one (a template's
 * or the model's "<think>\n\n</think>") not at all, nor the blank lines after it. */
typedef struct view {
    int tty;      /* stdout is a terminal */
    int thinking; /* inside <think> */
    int shown;    /* ... and something of it was printed */
    int skip_ws;  /* drop whitespace until the answer's first text */
} view;

static int blank(const char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] != ' ' && t[i] != '\n' && t[i] != '\r' && t[i] != '\t') return 0;
    return 1;
}

static int print_piece(void *user, int32_t id, const char *text, size_t len) {
    (void)id;
    view *v = user;
    if (len == 7 && !memcmp(text, "<think>", 7)) {
        v->thinking = 1, v->shown = 0;
    } else if (len == 8 && !memcmp(text, "</think>", 8)) {
        if (v->shown) fputs(v->tty ? "\033[0m\n" : "</think>\n", stdout);
        v->thinking = 0, v->skip_ws = 1;
    } else if (!((v->thinking && !v->shown) || v->skip_ws) || !blank(text, len)) {
        if (v->thinking && !v->shown) fputs(v->tty ? "\033[2m" : "<think>", stdout), v->shown = 1;
        v->skip_ws = 0;
        cli_write_text(text, len, v->tty);
    }
    fflush(stdout);
    return g_stop;
}

/* What /help prints: the commands at the prompt. */
static const char chat_help[] =
    "/reset          start the conversation over\n"
    "/stats          speed, cache and memory of the last answer\n"
    "/think on|off   the chat template's thinking switch\n"
    "/system TEXT    set the system message (empty: clear it) and start over\n"
    "/save FILE      write the conversation to FILE (sluice chat --load FILE goes on from it)\n"
    "/help           this list\n"
    "/quit, /exit    leave (as Ctrl-D does); Ctrl-C stops an answer\n";

/* One line of input (malloc'ed, no newline) or NULL at end of input. */
static char *read_line(int tty) {
    if (tty) {
        for (;;) {
            g_stop = 0;
            char *l = readline("> ");
            if (!l && g_stop) { /* Ctrl-C at the prompt: a fresh line, not the end */
                printf("\n");
                continue;
            }
            if (l && *l) add_history(l);
            return l;
        }
    }
    size_t cap = 256, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    for (;;) {
        int c = getchar();
        if (c == EOF) {
            if (ferror(stdin) && errno == EINTR) { clearerr(stdin); continue; }
            if (n == 0) { free(b); return NULL; }
            break;
        }
        if (c == '\n') break;
        if (n + 2 > cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
        }
        b[n++] = (char)c;
    }
    b[n] = 0;
    return b;
}

typedef struct {
    cli_text_opts o;
    sl_model *m;
    sl_session *s;
    sl_tokenizer *tok;
    sl_sampler *smp;
    int32_t pending;  /* a sampled token not yet evaluated (stopped answer), or -1 */
    int need_end;     /* the last answer did not end with an evaluated end-of-turn token */
    int turns;
    sl_gen_result last;
    int last_prompt;  /* tokens evaluated for the last turn's prompt */
    char *sys;        /* system prompt set with /system (owned) */
    const char *save; /* --save FILE: written after every turn */
    int tty_out;      /* stdout is a terminal: control characters are not printed */
} chat;

static void reset(chat *c) {
    sl_session_reset(c->s);
    sl_sampler_reset(c->smp);
    c->pending = -1;
    c->need_end = 0;
    c->turns = 0;
}

/* Appends the ids of text to v. Returns 0 or 1 (printed). */
static int add_text(chat *c, const char *text, int32_t **v, int *n) {
    int32_t *ids = NULL;
    int k = 0;
    sl_error err = {0};
    if (sl_tokenize(c->tok, text, strlen(text), 0, &ids, &k, &err)) return cli_fail("chat", "%s", err.msg);
    int32_t *nv = realloc(*v, ((size_t)*n + (size_t)k + 1) * sizeof **v);
    if (!nv) { free(ids); return cli_fail("chat", "out of memory"); }
    memcpy(nv + *n, ids, (size_t)k * sizeof *ids);
    *v = nv;
    *n += k;
    free(ids);
    return 0;
}

static int save_state(chat *c, const char *path);

static void turn(chat *c, const char *line) {
    sl_chat_msg msgs[2] = {{"system", c->o.system, NULL, NULL}, {"user", line, NULL, NULL}};
    int first = sl_session_n_past(c->s) == 0, with_sys = first && c->o.system;
    sl_chat_params cp = sl_chat_params_default();
    cp.enable_thinking = c->o.think;
    char *text = NULL;
    int32_t *ids = NULL;
    int n = 0;
    sl_error err = {0};
    if (sl_chat_format(c->tok, with_sys ? msgs : msgs + 1, with_sys ? 2 : 1, &cp, &text, &err)) {
        cli_fail("chat", "%s", err.msg);
        return;
    }
    if (!first && !strstr(text, "<|im_start|>")) { /* the turns below are joined as ChatML's */
        cli_fail("chat", "this model's chat template (not ChatML: DeepSeek-V4's) takes one turn here; /reset starts over, "
                         "`sluice serve` takes whole conversations");
        goto out;
    }
    if (c->pending >= 0) { ids = malloc(sizeof *ids); if (ids) ids[n++] = c->pending; }
    if ((!first && add_text(c, c->need_end ? "<|im_end|>\n" : "\n", &ids, &n)) || add_text(c, text, &ids, &n)) goto out;
    sl_gen_params gp = sl_gen_params_default();
    gp.max_tokens = c->o.n_gen;
    gp.context_shift = c->o.ctx_shift;
    gp.n_keep = c->o.n_keep;
    gp.stop = c->o.stop;
    gp.n_stop = c->o.n_stop;
    g_stop = 0;
    sl_gen_result r;
    view v = {c->tty_out, 0, 0, 0};
    if (sl_generate(c->m, c->s, c->tok, c->smp, ids, n, &gp, print_piece, &v, &r, &err)) {
        printf(v.tty && v.thinking && v.shown ? "\033[0m\n" : "\n");
        cli_fail("chat", "%s%s", err.msg, err.status == SL_ERANGE ? " (use /reset to start over)" : "");
        goto out;
    }
    if (v.tty && v.thinking && v.shown) fputs("\033[0m", stdout); /* cut while thinking */
    if (r.stop == SL_STOP_CALLBACK) printf("\n[stopped]\n");
    else if (r.stop == SL_STOP_LENGTH && r.n_generated >= c->o.n_gen) printf("\n[cut at %d tokens: -n sets the limit]\n", r.n_generated);
    else if (r.stop == SL_STOP_LENGTH) printf("\n[cut: the context is full; /reset starts over]\n");
    else printf("\n");
    c->last = r;
    c->last_prompt = n;
    c->turns++;
    c->pending = r.stop == SL_STOP_EOG ? -1 : r.last_token;
    c->need_end = r.stop != SL_STOP_EOG;
    if (c->save) save_state(c, c->save);
out:
    free(text);
    free(ids);
}

/* The REPL's bookkeeping stored beside the session state. */
static int save_state(chat *c, const char *path) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "turns", c->turns);
    cJSON_AddNumberToObject(j, "pending", c->pending);
    cJSON_AddBoolToObject(j, "need_end", c->need_end);
    cJSON_AddNumberToObject(j, "think", c->o.think);
    if (c->o.system) cJSON_AddStringToObject(j, "system", c->o.system);
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    sl_error err = {0};
    cli_remove_stale("chat", path);
    int rc = !txt ? cli_fail("chat", "out of memory")
                  : sl_session_save_file(c->s, path, txt, strlen(txt), &err) ? cli_fail("chat", "%s", err.msg) : 0;
    free(txt);
    return rc;
}

static int load_state(chat *c, const char *path) {
    void *extra = NULL;
    size_t n = 0;
    sl_error err = {0};
    if (sl_session_load_file(c->s, path, &extra, &n, &err)) return cli_fail("chat", "%s", err.msg);
    cJSON *j = extra ? cJSON_Parse(extra) : NULL;
    free(extra);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "turns"), *p = cJSON_GetObjectItemCaseSensitive(j, "pending");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "need_end"), *k = cJSON_GetObjectItemCaseSensitive(j, "think");
    const cJSON *sy = cJSON_GetObjectItemCaseSensitive(j, "system");
    if (!cJSON_IsNumber(t) || !cJSON_IsNumber(p) || !cJSON_IsBool(e) || p->valueint < -1 ||
        p->valueint >= sl_model_n_vocab(c->m)) {
        cJSON_Delete(j);
        sl_session_reset(c->s);
        return cli_fail("chat", "%s: not a conversation saved by sluice chat", path);
    }
    c->turns = t->valueint;
    c->pending = p->valueint;
    c->need_end = cJSON_IsTrue(e);
    if (cJSON_IsNumber(k)) c->o.think = k->valueint;
    free(c->sys);
    c->sys = cJSON_IsString(sy) ? strdup(sy->valuestring) : NULL;
    c->o.system = c->sys;
    cJSON_Delete(j);
    return 0;
}

static void stats(const chat *c) {
    const sl_gen_result *r = &c->last;
    printf("context: %d of %d positions; turns: %d\n", sl_session_n_past(c->s), sl_model_n_ctx(c->m), c->turns);
    if (c->turns)
        printf("last turn: %d prompt tokens evaluated (%.1f tok/s), %d generated (%.1f tok/s)\n", c->last_prompt,
               r->prefill_s > 0 ? c->last_prompt / r->prefill_s : 0.0, r->n_generated,
               r->decode_s > 0 && r->n_generated > 1 ? (r->n_generated - 1) / r->decode_s : 0.0);
}

int cmd_chat(int argc, char **argv) {
    chat c;
    memset(&c, 0, sizeof c);
    cli_text_opts_init(&c.o);
    const char *load = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--save") || !strcmp(argv[i], "--load")) && i + 1 < argc) {
            *(argv[i][2] == 's' ? &c.save : &load) = argv[i + 1];
            i++;
            continue;
        }
        int r = cli_text_opt(argv[0], &c.o, argc, argv, &i);
        if (r < 0) return -r;
        if (r == 0 || c.o.prompt) return cli_bad_option(argv[0], argc, argv, r ? i - 1 : i); /* -p: run's */
    }
    if (cli_model_path(argv[0], &c.o.model)) return 1;
    if (c.o.n_gen < 1) return cli_fail(argv[0], "-n must be at least 1");
    int rc = 1;
    sl_error err = {0};
    /* before the model opens, so Ctrl-C never ends the program (while it opens, it counts as one at the
     * prompt) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a blocked read returns and the loop goes on */
    sigaction(SIGINT, &sa, NULL);
    if (cli_load_tokenizer(argv[0], c.o.model, &c.tok)) goto out;
    cli_gpu_split(&c.o.mp);
    if (sl_model_open(c.o.model, &c.o.mp, &c.m, &err)) { cli_fail(argv[0], "%s", err.msg); goto out; }
    cli_say_backend(argv[0], c.m, &c.o.mp);
    if (sl_session_new(c.m, 0, &c.s) || sl_sampler_new(&c.o.sp, sl_model_n_vocab(c.m), &c.smp)) { cli_fail(argv[0], "out of memory"); goto out; }
    c.pending = -1;
    if (load && load_state(&c, load)) goto out;
    int tty = isatty(0);
    c.tty_out = isatty(1);
    if (tty) printf("sluice chat — /help lists the commands; Ctrl-C stops an answer, Ctrl-D leaves\n");
    char *line;
    while ((line = read_line(tty))) {
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) { free(line); break; }
        if (!strcmp(line, "/reset")) { reset(&c); printf("[conversation reset]\n"); }
        else if (!strcmp(line, "/stats")) stats(&c);
        else if (!strcmp(line, "/help") || !strcmp(line, "/?")) fputs(chat_help, stdout);
        else if (!strncmp(line, "/save ", 6) && line[6]) {
            if (!save_state(&c, line + 6)) printf("[conversation saved to %s]\n", line + 6);
        }
        else if (!strcmp(line, "/think on") || !strcmp(line, "/think off")) {
            c.o.think = !strcmp(line, "/think on");
            printf("[thinking %s]\n", c.o.think ? "on" : "off");
        } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || !line[7])) {
            free(c.sys);
            c.sys = line[7] && line[8] ? strdup(line + 8) : NULL;
            c.o.system = c.sys;
            reset(&c);
            printf("[system prompt %s; conversation reset]\n", c.sys ? "set" : "cleared");
        } else if (line[0] == '/') printf("unknown command %s (/help lists them)\n", line);
        else if (*line) turn(&c, line);
        fflush(stdout);
        free(line);
    }
    if (tty) printf("\n"); /* Ctrl-D at the prompt: leave the shell's prompt on a line of its own */
    rc = 0;
out:
    free(c.sys);
    sl_sampler_free(c.smp);
    sl_session_free(c.s);
    if (cli_close_model("chat", c.m, !rc)) rc = 1;
    sl_tokenizer_free(c.tok);
    return rc;
}
