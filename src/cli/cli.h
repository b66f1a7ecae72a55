/*
 * cli.h — the `sluice` command: shared helpers of the subcommands (the only code that prints).
 */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice.h"
#include "util/clock.h"
#include "util/fmt.h"

int cmd_pack(int argc, char **argv);
int cmd_pull(int argc, char **argv); /* cmd_pull.c */
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv); /* cmd_text.c */
int cmd_chat(int argc, char **argv);     /* cmd_chat.c */
int cmd_bench(int argc, char **argv);    /* cmd_bench.c */
int cmd_synth(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_perplexity(int argc, char **argv); /* cmd_perplexity.c */
int cmd_serve(int argc, char **argv);      /* cmd_serve.c */
int cmd_completion(int argc, char **argv); /* completion.c */
int cmd_ls(int argc, char **argv);         /* cmd_store.c */
int cmd_rm(int argc, char **argv);
int cmd_show(int argc, char **argv);

/* ---- help (help.c) and the options commands share (opts.c) ---- */

/* One option in a --help text: flags "-m, --model", its value's name (NULL for a switch), what it does
 * with its default. Tables end with flags == NULL. */
typedef struct cli_opt {
    const char *flags, *arg, *text;
} cli_opt;

#define CLI_MODEL_OPTS 1    /* the command takes the model options (cli_model_opts) */
#define CLI_DEFAULT_MODEL 2 /* -m may be left out (cli_default_model) */

/* A subcommand: what `sluice --help` lists and `sluice NAME --help` prints. */
typedef struct cli_command {
    const char *name, *summary;    /* summary: one line for `sluice --help` */
    int (*run)(int argc, char **argv);
    const char *usage;             /* usage lines after "sluice NAME ", '\n'-separated */
    const char *about;             /* what it does (wrapped when printed; '\n' starts a paragraph) */
    const cli_opt *opts;           /* its own options; the model options are added by CLI_MODEL_OPTS */
    const char *example;           /* one command line per line */
    int flags;
} cli_command;

extern const cli_command cli_commands[]; /* ends with name == NULL */
const cli_command *cli_command_find(const char *name); /* NULL if there is none */
/* `sluice --help` to f. */
void cli_help_main(FILE *f);
/* `sluice NAME --help` to stdout; returns the exit code 0. */
int cli_help(const cli_command *c);
/* 1 if argv[1..] (before a "--") holds -h or --help. */
int cli_help_requested(int argc, char **argv);
/* For argv[i], an argument CMD's parser did not take: prints "sluice CMD: unknown option 'OPT' (see
 * 'sluice CMD --help')", or, for one of CMD's options, that it needs a value (the last argument) or does
 * not apply here; "unexpected argument" for a non-option. Returns the exit code 2, that of every
 * usage error. */
int cli_bad_option(const char *cmd, int argc, char **argv, int i);

extern const cli_opt cli_model_opts[];  /* opts.c */
extern const char *cli_default_model_doc; /* the lookup of cli_default_model, in words, for --help */
/* The model to open when no -m is given: $SLUICE_MODEL if set (an error if it names no file), else
 * <dir of the executable>/../models/demo.sluice, else <dir>/../share/sluice/demo.sluice (found through
 * /proc/self/exe). Returns 0 with *path set (static storage, or the environment's), or 1 after printing
 * one line naming the places searched. */
int cli_default_model(const char *cmd, const char **path);
/* The model a command opens: *model NULL -> cli_default_model; a model of the store, ORG/NAME[:TAG] that is
 * not a file (store.c) -> its container there, downloaded and packed first when absent; else *model as it
 * is. Returns 0 with *model set, or 1 after printing why. */
int cli_model_path(const char *cmd, const char **model);
/* Once a model is open with SL_BACKEND_AUTO: on a terminal, one line when it computes on the GPU; one line
 * (terminal or not) when a usable GPU refused it, saying why (sl_model_backend_note). */
void cli_say_backend(const char *cmd, const sl_model *m, const sl_model_params *p);
/* --record-routing FILE: the routing m recorded written to path (nothing when path is NULL), a line on stderr
 * saying so; 0, or 1 after printing why it failed. */
int cli_write_routing(const char *cmd, sl_model *m, const char *path);
/* --record-routing's FILE as cli_model_opt parsed it, or NULL. */
const char *cli_routing_file(void);
/* sl_model_close(m) (m may be NULL); when ok (the command succeeded) and --record-routing asked for it, the
 * routing written first (cli_write_routing). 0, or 1 after printing why the trace could not be written. */
int cli_close_model(const char *cmd, sl_model *m, int ok);
/* Parses one model option (--cache, --resident, --io, --engine, --policy, --pin, --no-verify,
 * --threads, --io-depth) at argv[*i]; returns 1 and advances *i past its value if it was one. On a
 * bad value prints the error and sets *bad = 1. A valued option without its value is not one (0). */
int cli_model_opt(int argc, char **argv, int *i, sl_model_params *p, const char *cmd, int *bad);
/* run / serve / chat with --gpu and none of --vram, --cache, --resident: the split chosen at open (SL_VRAM_AUTO: the
 * card's free memory for the device tier; the RAM cache's default: half of the available RAM) */
void cli_gpu_split(sl_model_params *p);
/* The command line's model parameters before its options: the library's defaults (sl_model_params_default)
 * but the backend, SL_BACKEND_AUTO (the GPU where there is one; --gpu, --cpu), and the KV cache: f16, or f32
 * on a backend without f16 caches (kv_fallback; --kv gives the type and insists on it). */
sl_model_params cli_model_params(void);
/* Under mpirun (main.c): rank 0's endpoint, which cli_model_params puts in every model's parameters (the experts
 * on ranks 1..N-1; docs/SCALE.md). */
void cli_set_remote(sl_remote *t);
/* Parses v, the value of the numeric option opt, into *out: 0, or 1 after printing "option 'OPT' must be
 * between LO and HI" (opts.c holds each option's range) or that it is not a number. */
int cli_num(const char *cmd, const char *opt, const char *v, double *out);
/* The --stats line (stderr). n_gen tokens were generated, the first from the prefill's logits, so decode
 * tok/s is (n_gen - 1) / decode_s; stop (may be NULL) is why generation ended, said after the counts. */
void cli_print_stats(sl_model *m, int n_prompt, int n_gen, double prefill_s, double decode_s, const char *stop);
/* Text helpers (cmd_text.c): whole stdin (malloc'ed, NUL-terminated; NULL on error); tokenizer load
 * with the message printed (returns 1 on failure). */
char *cli_read_stdin(size_t *len);
int cli_load_tokenizer(const char *cmd, const char *path, sl_tokenizer **tok);
/* Renders a JSON conversation ({"messages": [...], "tools", "enable_thinking", "add_generation_prompt"})
 * with the tokenizer's chat template; *out malloc'ed. Returns 0, or 1 with err->msg set. */
int cli_render_chat(const sl_tokenizer *tok, const char *json, char **out, sl_error *err);

/* Options shared by `run -p` and `chat` (cmd_text.c). */
typedef struct cli_text_opts {
    const char *model, *prompt, *system;
    const char *stop[16];
    int n_stop, n_gen, stats, ids, chat, think; /* think: -1 template default, 0 off, 1 on */
    int seed_set;
    int ctx_shift, n_keep; /* --context-shift, --keep (sl_gen_params context_shift, n_keep) */
    sl_sampler_params sp;
    sl_model_params mp; /* --cache, --resident, --io, ... (cli_model_opt) */
} cli_text_opts;
void cli_text_opts_init(cli_text_opts *o);
/* Consumes argv[*i] (and its value) if it is a text option: 1 consumed, 0 not one; -1 a bad value,
 * -2 a missing one (both printed; -r is the exit code). */
int cli_text_opt(const char *cmd, cli_text_opts *o, int argc, char **argv, int *i);
int cmd_run_text(int argc, char **argv);
/* Writes generated text to stdout; with terminal set, control characters other than \t \n \r are dropped. */
void cli_write_text(const char *text, size_t len, int terminal);

/* Prints "sluice <cmd>: <msg>" to stderr; returns the exit code 1. */
/* Removes the temporaries an interrupted run left for path (sl_remove_stale_temps), naming each on stderr. */
void cli_remove_stale(const char *cmd, const char *path);
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Progress bar on a terminal, plain lines otherwise; user points to a cli_progress. */
typedef struct cli_progress {
    const char *label;
    double t0, last;
    int tty, last_pct;
} cli_progress;
void cli_progress_init(cli_progress *p, const char *label);
int cli_progress_cb(void *user, uint64_t done, uint64_t total);
void cli_progress_end(cli_progress *p);
/* Parses "1,2,3" into a malloc'ed array; returns count or -1. */
int cli_parse_tokens(const char *s, int32_t **out);
/* Parses a size with K/M/G suffix (powers of 1024); returns -1 on error. */
long long cli_parse_size(const char *s);

#endif
