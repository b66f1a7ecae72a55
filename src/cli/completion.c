/*
 * completion.c — `sluice completion bash|zsh`: a shell completion script written from the same tables as
 * --help (help.c cli_commands, opts.c cli_model_opts), so a new command or option completes without an edit
 * here. It completes command names; a command's options (its own and, where it takes them, the model options);
 * the values of the options that take a word from a list (--kv, --io, --quant, ...: value_words below, or an
 * arg written "a|b"); models of the store (`sluice ls`: ORG/NAME and NAME alone; a :QUANT is typed, since
 * bash breaks words at ':') and .sluice / .gguf files for -m and for the MODEL argument of run, chat, serve,
 * show and rm; files for options whose value is a file or a folder and for the other commands' arguments.
 *
 * bash: `source <(sluice completion bash)`, or the file make install puts in
 * PREFIX/share/bash-completion/completions/sluice. zsh: `source <(sluice completion zsh)` (bashcompinit).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* The options whose values are words of a list (what cli_model_opt and the commands' parsers accept). */
static const struct {
    const char *flag, *words;
} value_words[] = {
    {"--kv", "f32 f16 bf16 q8 q4 q4r"},    {"--io", "auto direct buffered"},
    {"--engine", "auto uring pread"},      {"--policy", "lru lfu"},
    {"--prefetch", "auto on off"},         {"--hybrid", "auto on off"},
    {"--quant", "keep f32 bf16 q8 q4 q3 q2 q2v"}, {"--quant-experts", "keep f32 bf16 q8 q4 q3 q2 q2v"},
    {"--quant-backbone", "keep f32 bf16 q8 q4 q3 q2 q2v"}, {"--quant-router", "keep f32 bf16 q8 q4 q3 q2 q2v"},
    {"--group", "32 64 128"},              {"--routing", "model uniform"},
    {"--decode", "greedy random"},         {"--vram", "auto"},
};

/* An option's value is a file or a folder (its arg's name says so). */
static int file_arg(const char *arg) {
    return strstr(arg, "FILE") || strstr(arg, "DIR") || strstr(arg, ".sluice") || strstr(arg, "PROFILE") ||
           strstr(arg, "CACHE");
}

/* Each flag of o ("-m, --model") with sep between them, after prefix. */
static void flags_of(FILE *f, const cli_opt *o, const char *sep) {
    for (const char *p = o->flags; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t w = strcspn(p, ", ");
        fprintf(f, "%.*s", (int)w, p);
        p += w;
        while (*p == ' ' || *p == ',') p++;
        if (*p) fputs(sep, f);
    }
}

/* The case arms on the previous word: an option that takes a value of a list, a model, or a file. */
static void value_arms(FILE *f, const cli_opt *opts) {
    for (const cli_opt *o = opts; o && o->flags; o++) {
        if (!o->arg) continue;
        const char *words = strchr(o->arg, '|') ? o->arg : NULL;
        for (size_t i = 0; i < sizeof value_words / sizeof value_words[0]; i++)
            if (strstr(o->flags, value_words[i].flag) && strlen(strstr(o->flags, value_words[i].flag)) ==
                                                              strlen(value_words[i].flag))
                words = value_words[i].words;
        char shapes[1024];
        if (strstr(o->flags, "--shape")) { /* synth's shapes, "a, b, c" */
            snprintf(shapes, sizeof shapes, "%s", sl_synth_shapes());
            for (char *q = shapes; *q; q++) *q = *q == ',' ? ' ' : *q;
            words = shapes;
        }
        if (!words && !strstr(o->arg, "MODEL") && !file_arg(o->arg)) continue; /* a number, a text: nothing to offer */
        fputs("        ", f);
        flags_of(f, o, "|");
        if (words) {
            fputs(") COMPREPLY=($(compgen -W \"", f);
            for (const char *w = words; *w; w++) fputc(*w == '|' ? ' ' : *w, f);
            fputs("\" -- \"$cur\")); return ;;\n", f);
        } else if (strstr(o->arg, "MODEL") && !strstr(o->arg, ".sluice")) {
            fputs(") _sluice_models; return ;;\n", f);
        } else {
            fputs(") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", f);
        }
    }
}

/* One command's arm: its value options, then its options after '-', then its arguments. */
static void command_arm(FILE *f, const cli_command *c) {
    fprintf(f, "    %s)\n        case $prev in\n", c->name);
    value_arms(f, c->opts);
    if (c->flags & CLI_MODEL_OPTS) value_arms(f, cli_model_opts);
    fputs("        esac\n        opts=\"--help", f);
    for (const cli_opt *o = c->opts; o && o->flags; o++) fputc(' ', f), flags_of(f, o, " ");
    if (c->flags & CLI_MODEL_OPTS)
        for (const cli_opt *o = cli_model_opts; o->flags; o++) fputc(' ', f), flags_of(f, o, " ");
    fputs("\"\n", f);
    static const char *const model_args[] = {"run", "chat", "serve", "show", "rm", NULL};
    int models = 0;
    for (int i = 0; model_args[i]; i++) models |= !strcmp(c->name, model_args[i]);
    const char *args = models ? "models" : !strcmp(c->name, "completion") ? "shells" : "files";
    if (!strcmp(c->name, "ls") || !strcmp(c->name, "pull")) args = "none"; /* nothing, or a name of the hub */
    fprintf(f, "        args=%s ;;\n", args);
}

static void write_bash(FILE *f) {
    fputs("# bash completion for sluice, written by 'sluice completion bash' from its --help tables\n"
          "_sluice_models() {\n"
          "    local names\n"
          "    names=$(sluice ls 2>/dev/null | awk 'NR > 1 { print $1; n = $1; sub(/.*\\//, \"\", n); print n }')\n"
          "    COMPREPLY=($(compgen -W \"$names\" -- \"$cur\") $(compgen -f -X '!*.sluice' -- \"$cur\")\n"
          "               $(compgen -f -X '!*.gguf' -- \"$cur\") $(compgen -d -- \"$cur\"))\n"
          "}\n"
          "_sluice() {\n"
          "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=${COMP_WORDS[1]} opts args\n"
          "    if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
          "        COMPREPLY=($(compgen -W \"",
          f);
    for (const cli_command *c = cli_commands; c->name; c++) fprintf(f, "%s ", c->name);
    fputs("help --help --version\" -- \"$cur\")); return\n"
          "    fi\n"
          "    case $cmd in\n",
          f);
    for (const cli_command *c = cli_commands; c->name; c++) command_arm(f, c);
    fputs("    help) COMPREPLY=($(compgen -W \"", f);
    for (const cli_command *c = cli_commands; c->name; c++) fprintf(f, "%s ", c->name);
    fputs("\" -- \"$cur\")); return ;;\n"
          "    *) return ;;\n"
          "    esac\n"
          "    if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")); return; fi\n"
          "    case $args in\n"
          "    models) _sluice_models ;;\n"
          "    shells) COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")) ;;\n"
          "    none) ;;\n"
          "    *) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
          "    esac\n"
          "}\n"
          "complete -o filenames -F _sluice sluice\n",
          f);
}

int cmd_completion(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' || i > 1) return cli_bad_option("completion", argc, argv, i);
    if (argc != 2 || (strcmp(argv[1], "bash") && strcmp(argv[1], "zsh")))
        return cli_fail("completion", "usage: sluice completion bash|zsh (then: source <(sluice completion bash))");
    if (!strcmp(argv[1], "zsh")) fputs("autoload -U +X bashcompinit && bashcompinit\n", stdout);
    write_bash(stdout);
    return 0;
}
