/*
 * cli.h — the `sluice` command: shared helpers of the subcommands (the only code that prints).
 */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

int cmd_pack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv); /* cmd_text.c */
int cmd_chat(int argc, char **argv);     /* cmd_chat.c */
/* Text helpers (cmd_text.c): whole stdin (malloc'ed, NUL-terminated; NULL on error); tokenizer load
 * with the message printed (returns 1 on failure). */
char *cli_read_stdin(size_t *len);
int cli_load_tokenizer(const char *cmd, const char *path, sl_tokenizer **tok);

/* Prints "sluice <cmd>: <msg>" to stderr; returns the exit code 1. */
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
double cli_now(void);
/* Parses "1,2,3" into a malloc'ed array; returns count or -1. */
int cli_parse_tokens(const char *s, int32_t **out);
/* Parses a size with K/M/G suffix (powers of 1024); returns -1 on error. */
long long cli_parse_size(const char *s);

#endif
