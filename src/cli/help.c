/*
 * help.c — what `sluice --help` and `sluice CMD --help` print: the table of subcommands (name, one-line
 * summary, entry point, usage, description, options with their defaults, an example), the printers,
 * and the message for an unknown option.
 *
 * The format is the one GNU tools use, so that help2man can turn it into a man page
 * (tools/gen_man.sh): "Usage: ..." lines ("  or:  ..." for more), a description, then headed blocks
 * ("Options:", "Model options:", "Example:") of lines indented by two spaces, an option's text
 * starting in column 27 and wrapped at 79 columns. Options that take a value show it as "--ctx N".
 *
 * Sections: option tables; the command table; printers; unknown options.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* ---- option tables ----------------------------------------------------------------------------- */

#define MODEL_OPT(what) {"-m, --model", "MODEL", "the .sluice container, or a model of the store, ORG/NAME[:QUANT] " \
                                                   "(downloaded and packed the first time) " what}
#define DEFAULT_MODEL_OPT MODEL_OPT("(default: see 'Default model' below)")
#define END_OPTS {NULL, NULL, NULL}

/* Sampling and generation options of `run -p` and `chat` (cli_text_opt, cmd_text.c). */
#define SAMPLING_OPTS                                                                                      \
    {"--temp", "T", "sampling temperature; 0 is greedy (default: 0.8)"},                                \
    {"--top-k", "K", "sample from the K most likely tokens; 0 is off (default: 40)"},                   \
    {"--top-p", "P", "sample from the smallest set of tokens whose probability reaches P; 1 is off "      \
                     "(default: 0.95)"},                                                                  \
    {"--min-p", "P", "drop tokens less likely than P times the most likely one; 0 is off (default: 0.05)"}, \
    {"--repeat-penalty", "R", "divide the positive logits of recent tokens by R, multiply the negative "  \
                              "ones (default: 1, off)"},                                                  \
    {"--presence-penalty", "P", "subtract P from the logits of recent tokens (default: 0, off)"},        \
    {"--repeat-last-n", "N", "how many recent tokens the two penalties look at (default: 64)"},          \
    {"--seed", "S", "seed of the sampler: the same seed, prompt and model give the same text (default: "  \
                    "from the clock and the process id)"},                                                \
    {"--stop", "STR", "stop before the text STR; repeatable, 16 at most (default: none)"},                 \
    {"--context-shift", NULL, "when the conversation outgrows --ctx, drop the oldest half of it after --keep "  \
                              "tokens and re-evaluate the rest (exact, a prefill's cost) (default: off: a full "  \
                              "context ends the answer, a prompt that does not fit is an error)"},              \
    {"--keep", "N", "the first tokens a context shift keeps (default: 0)"}

#define CHAT_OPTS                                                                                          \
    {"--system", "TEXT", "a system message (default: none)"},                                          \
    {"--think", "on|off", "the chat template's thinking switch, enable_thinking (default: the "          \
                          "template's own)"}

static const cli_opt pull_opts[] = {
    {"-o", "DIR", "put the files straight into DIR (default: the Hugging Face cache, "
                  "CACHE/models--ORG--NAME/snapshots/COMMIT)"},
    {"--revision", "REV", "a branch, tag or commit (default: main)"},
    {"--include", "GLOB", "download the files whose path matches GLOB ('*' also matches '/'), instead of "
                          "the default set; repeatable (default: what pack reads: config.json, "
                          "generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja, "
                          "model.safetensors.index.json and the shards it names)"},
    {"--jobs", "N", "files downloaded at once, 1 to 64 (default: 4)"},
    {"--cache-dir", "CACHE", "the cache directory (default: $HF_HUB_CACHE, else $HF_HOME/hub, else "
                             "~/.cache/huggingface/hub)"},
    {"-q, --quiet", NULL, "no progress bar and no summary on stderr"},
    END_OPTS,
};

static const cli_opt pack_opts[] = {
    {"-o", "MODEL.sluice", "the container to write (required)"},
    {"--quant", "MODE", "keep, f32, bf16, q8, q4, q3, q2 or q2v, for every matrix (default: keep: each tensor's "
                        "source dtype; FP8 becomes f32)"},
    {"--quant-experts", "MODE", "the routed experts' mode (default: that of --quant)"},
    {"--quant-backbone", "MODE", "the mode of every other matrix (default: that of --quant)"},
    {"--quant-router", "MODE", "the routers' mode, mlp.gate and shared_expert_gate (default: q8 when the "
                               "backbone is q4, q3, q2 or q2v, else the backbone's)"},
    {"--group", "N", "quantization group of q8/q4/q3: 32, 64 or 128 columns (default: 64; q2 "
                        "and q2v are blocks of 128 always)"},
    {"--scale-f16", NULL, "store quantization scales and biases in f16 (default: bf16)"},
    {"--no-source-hash", NULL, "do not record each source file's xxh3-64 in the manifest (default: "
                               "recorded)"},
    {"--imatrix", "FILE", "llama.cpp's importance matrix (llama-imatrix's .gguf or .dat): the matrices it covers are "
                          "quantized minimising the importance-weighted error (default: none)"},
    END_OPTS,
};

static const cli_opt info_opts[] = {
    {"--json", NULL, "print the whole description as JSON (default: a table)"},
    END_OPTS,
};

static const cli_opt verify_opts[] = {
    {"--source", "SRC_DIR", "the checkpoint it was packed from: compare every tensor with it byte for "
                            "byte (default: checksums only)"},
    END_OPTS,
};

static const cli_opt run_opts[] = {
    DEFAULT_MODEL_OPT,
    {"-p, --prompt", "TEXT", "the prompt, tokenized with the model's tokenizer; special-token text such "
                             "as <|im_start|> is recognised (required, or --tokens)"},
    {"--tokens", "IDS", "the prompt as comma-separated token ids: greedy decoding, ids printed (required, "
                        "or -p)"},
    {"-n, --max-tokens", "N", "generate at most N tokens (default: 256 with -p, 16 with --tokens)"},
    {"--chat", NULL, "wrap the prompt in the model's chat template as a user turn"},
    CHAT_OPTS,
    SAMPLING_OPTS,
    {"--ids", NULL, "print token ids, space-separated, instead of text"},
    {"--stats", NULL, "print speed, cache hit rate, bytes read per token, I/O wait and peak memory to "
                      "stderr"},
    END_OPTS,
};

static const cli_opt chat_opts[] = {
    DEFAULT_MODEL_OPT,
    CHAT_OPTS,
    {"-n, --max-tokens", "N", "generate at most N tokens per answer (default: 256)"},
    {"--save", "FILE", "write the conversation to FILE after every turn, so a later --load goes on from it "
                       "(default: not saved)"},
    {"--load", "FILE", "start from a conversation written by --save or /save, without evaluating it again "
                       "(default: an empty conversation)"},
    SAMPLING_OPTS,
    END_OPTS,
};

static const cli_opt logits_opts[] = {
    DEFAULT_MODEL_OPT,
    {"--tokens", "IDS", "comma-separated token ids to evaluate (required)"},
    {"-o, --out", "FILE", "where to write the logits (required)"},
    END_OPTS,
};

static const cli_opt profile_opts[] = {
    DEFAULT_MODEL_OPT,
    {"--tokens", "IDS", "comma-separated token ids to evaluate (required)"},
    {"-o", "PROFILE", "where to write the profile (required)"},
    END_OPTS,
};

static const cli_opt bench_opts[] = {
    DEFAULT_MODEL_OPT,
    {"--prompt", "N", "prompt tokens, evaluated in one prefill (default: 32)"},
    {"--gen", "N", "tokens decoded one at a time after it (default: 16)"},
    {"--cache", "SIZE", "an expert cache budget; repeat it for one row per budget, each from a fresh "
                        "open (default: one row, at the model's default budget)"},
    {"--json", NULL, "print the rows as a JSON array, with per-layer counters (default: a table)"},
    {"--routing", "MODE", "model: the model's routers choose the experts; uniform: each token draws its experts "
                          "uniformly from a seeded generator, so the hit rate is the pessimistic bound "
                          "(about the cached fraction of the experts); trace:FILE: the choices of a real model "
                          "recorded by --record-routing, replayed row by row (layers and experts taken modulo "
                          "the model's where the shapes differ; the mapping is printed) (default: model)"},
    {"--decode", "FEED", "what decode feeds: greedy (the argmax) or random token ids, as llama-bench does "
                         "(default: random on a synthetic model, greedy otherwise)"},
    {"--seed", "N", "seed of the prompt, the random decode ids and uniform routing (default: 42)"},
    {"--no-warmup", NULL, "with --resident or --warm-cache, time from the first step after the open (default: the prompt and one "
                          "decoded token first, untimed, in a session of their own, as llama-bench does)"},
    {"--warm-cache", NULL, "a streamed model: before timing, read every expert into the RAM cache while it has room "
                           "(nothing evicted; the device tier left empty) and run the untimed warm-up too, so the "
                           "rows compare with an engine whose weights sit in the page cache (llama.cpp's mmap after "
                           "a first run); the JSON gives warm_cache_experts (default: a streamed run starts from a "
                           "cold RAM cache)"},
    END_OPTS,
};

static const cli_opt synth_opts[] = {
    {"--shape", "NAME", "the released model whose dimensions to use (required; the shapes are "
                             "listed above)"},
    {"-o", "MODEL.sluice", "the container to write (required)"},
    {"--layers", "N", "keep the first N layers; 0 is all (default: 0)"},
    {"--quant", "MODE", "bf16, f32, q8, q4 or q3 (group 64) for the weights (default: bf16)"},
    {"--group", "N", "q8 / q4 group of columns: 32 (as a Q4_0 / Q8_0 GGUF packs, biases -8 / -128 times the scales), "
                     "64 or 128 (default: 64)"},
    {"--seed", "N", "seed of the random weights; 0 is the built-in one (default: 0)"},
    {"--threads", "N", "writer threads; the file is the same for any count (default: two per core)"},
    END_OPTS,
};

static const cli_opt tokenize_opts[] = {
    {"-m, --model", "MODEL", "a .sluice container that holds a tokenizer (default: see below)"},
    {"--tokenizer", "FILE", "a tokenizer.json, with the tokenizer_config.json and chat_template.jinja "
                            "beside it, or a GGUF file's tokenizer, instead of -m (default: none)"},
    {"--decode", NULL, "the input is token ids, space- or comma-separated: print their text"},
    {"--no-special", NULL, "tokenize special-token text such as <|im_end|> as plain text (default: "
                           "recognised)"},
    {"--strict-utf8", NULL, "refuse invalid UTF-8 (default: replaced by U+FFFD)"},
    {"--batch", NULL, "the input is a JSON array of strings: one line of ids for each"},
    {"--chat", NULL, "the input is a JSON conversation {\"messages\": [...], \"tools\", \"enable_thinking\", "
                     "\"add_generation_prompt\"}: print the ids of its rendered chat template"},
    {"--text", NULL, "with --chat: print the rendered text instead of its ids"},
    END_OPTS,
};

static const cli_opt perplexity_opts[] = {
    DEFAULT_MODEL_OPT,
    {"-f, --file", "FILE", "the text to score, UTF-8; - reads stdin (required)"},
    {"--ctx", "N", "window length in tokens, at most the model's context (default: 512)"},
    {"--json", NULL, "print one JSON object: ppl, bpb, nll, tokens (scored), bytes (of the scored tokens), "
                     "windows, ctx, file_tokens, seconds, tok_per_s (default: one line of text)"},
    END_OPTS,
};

static const cli_opt serve_opts[] = {
    {"-m, --model", "[NAME=]MODEL", "a .sluice container, or a model of the store (ORG/NAME[:QUANT], as for "
                                    "run), to serve under NAME (default NAME: the file name without .sluice, or "
                                    "ORG/NAME[:QUANT]); also without -m; repeatable, requests pick one by their \"model\" field, "
                                    "the first is the default (default: see 'Default model' below)"},
    {"--host", "HOST", "the address to listen on (default: 127.0.0.1, this machine only)"},
    {"--port", "PORT", "the TCP port; 0 picks a free one (default: 8080)"},
    {"--api-key", "KEY", "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on /v1/... and /metrics "
                         "(default: $SLUICE_API_KEY if set, else none); without a key, a request whose Host is not "
                         "localhost, 127.0.0.1, [::1] or --host (any IP with 0.0.0.0 or ::) gets 421 (DNS rebinding); "
                         "with one, any Host is answered"},
    {"--cors", "ORIGIN", "answer browser requests from ORIGIN (e.g. http://localhost:3000; * for any) with CORS "
                         "headers, and its OPTIONS preflights with 204; repeatable. A request with another "
                         "foreign Origin gets 403 (default: only the server's own page)"},
    {"--max-body", "SIZE", "the largest request body, K/M suffixes; larger ones get 413 (default: 1M)"},
    {"--max-connections", "N", "open connections at most, one thread each; more are refused (default: 256)"},
    {"--max-connections-per-ip", "N", "open connections from one IP address at most; more are refused (default: "
                                      "--max-connections / 4; no limit of its own with --host 127.0.0.1, localhost or ::1)"},
    {"--read-timeout", "SECONDS", "a request's headers and body must arrive within SECONDS of the connection's start "
                                  "or of its previous request's end, else the connection is closed (slow clients "
                                  "cannot hold every connection; also ends idle keep-alives) (default: 30)"},
    {"--max-tokens", "N", "no answer is longer than N tokens: a request asking more, or nothing, gets N "
                          "(finish_reason length) (default: none, the context's end)"},
    {"--timeout", "SECONDS", "a generation still running SECONDS after its request arrived ends at its next token, "
                             "as max_tokens would end it (finish_reason length) (default: none)"},
    {"--drain", "SECONDS", "on SIGTERM / SIGINT, new generations get 503 and /health 503 while the requests in "
                           "flight have up to SECONDS to finish (a second signal ends them at once); those "
                           "still running then end with an error event or a 503 (default: 5; 0: at once)"},
    {"--parallel", "N", "sequences evaluated together, per model (default: 16)"},
    {"--queue", "N", "requests waiting for a slot, per model, beyond which new ones get 503 (default: 64)"},
    {"--ctx", "N", "context positions of each sequence, a request's prompt and max_tokens within it (400 "
                   "otherwise); each sequence's KV cache grows with the positions it uses, in pages of the pool the "
                   "sequences share (--kv-pool) (default: the model's)"},
    {"--kv-pool", "SIZE", "KV cache the --parallel sequences of a model share: a sequence takes pages (256 "
                          "positions) as it fills and waits when there are none; if every sequence waits, the "
                          "newest gives its pages back and is evaluated again later (exact). The start refuses a "
                          "pool that cannot hold one sequence at the full --ctx (default: 0, automatic: --parallel "
                          "sequences at the full --ctx, at most 3/4 of the memory available)"},
    {"--context-shift", NULL, "a sequence that fills --ctx while generating drops the oldest half of its "
                              "positions after --keep and goes on (re-evaluated: exact, a prefill's cost); "
                              "max_tokens may then pass --ctx (default: off: the length ends it)"},
    {"--keep", "N", "the first positions a context shift keeps (default: 0)"},
    {"--state-cache", "SIZE", "keep sequence states of prompt prefixes within SIZE, so a conversation's next "
                              "turn does not evaluate its history again (default: 0, off)"},
    {"--state-dir", "DIR", "with --state-cache, also keep the states as files in DIR, read back at the next "
                           "start; files mode 0600, and start-up removes only its own dead temporaries (default: memory only)"},
    END_OPTS,
};

/* ---- the command table ------------------------------------------------------------------------- */

const cli_command cli_commands[] = {
    {"pull", "download a model from the Hugging Face Hub, ready for pack", cmd_pull,
     "ORG/NAME [-o DIR] [--include GLOB]... [OPTION]...",
     "Downloads the files of a model repository from the Hugging Face Hub, or from the mirror in "
     "HF_ENDPOINT, several at once, and prints the directory that holds them as the last line on stdout, "
     "so that sluice pack \"$(sluice pull ORG/NAME)\" -o MODEL.sluice works. Each file is written as "
     "NAME.incomplete, resumed with a Range request after a broken connection or an interrupted pull, "
     "checked against the hub's size and sha256 (git blob id for small files), and renamed only then; a "
     "file that fails its check is fetched again. Files already complete are not downloaded again. "
     "HF_TOKEN (or the token file of huggingface-cli login) is sent to the hub as a bearer token, never to "
     "the host a download is redirected to; gated and private models need it. docs/PULL.md has the details. "
     "To download, pack and run in one step, into a store that ls, show and rm manage: sluice run ORG/NAME.",
     pull_opts, "sluice pull Qwen/Qwen3-30B-A3B -o ~/models/Qwen3-30B-A3B", 0},
    {"pack", "pack a Hugging Face checkpoint into a .sluice container", cmd_pack,
     "SRC_DIR -o MODEL.sluice [OPTION]...",
     "Packs a checkpoint directory (config.json and *.safetensors, with model.safetensors.index.json when "
     "sharded; MLX checkpoints as they are) into one container: the backbone, and every routed expert as "
     "one block, each with an xxh3-64 checksum. Tokenizer files found in SRC_DIR (tokenizer.json, "
     "tokenizer_config.json, chat_template.jinja) are stored with it, for the text commands. The output is "
     "written under a temporary name and renamed when complete.",
     pack_opts, "sluice pack ~/models/Qwen3-Next-80B-A3B-Instruct -o qwen3-next.sluice --quant q4", 0},
    {"info", "describe a container: architecture, dimensions, layers, sizes", cmd_info, "MODEL.sluice [--json]",
     "Prints a container's architecture, dimensions, layer types (A attention, L DeltaNet; m MoE, d dense), "
     "expert layout, sizes and quantization.",
     info_opts, "sluice info qwen3-next.sluice", 0},
    {"verify", "check every checksum of a container, optionally against its source", cmd_verify,
     "MODEL.sluice [--source SRC_DIR]",
     "Checks the checksum of every backbone tensor and expert block; with --source, also derives every "
     "tensor again from the checkpoint and compares it byte for byte. A failure names the first bad tensor "
     "or expert and exits with status 1.",
     verify_opts, "sluice verify qwen3-next.sluice --source ~/models/Qwen3-Next-80B-A3B-Instruct", 0},
    {"run", "generate text from a prompt, or talk with a model (ORG/NAME: downloaded the first time)", cmd_run,
     "[MODEL] -p TEXT [OPTION]...\n[MODEL] --tokens IDS [OPTION]...\n[MODEL] [OPTION]...",
     "Generates from a text prompt (-p), printing the text as it is produced, or from token ids (--tokens), "
     "printing greedy token ids; with neither, starts a conversation, as 'sluice chat' does. Generation stops "
     "at an end-of-generation token (EOS, <|im_end|>), at a --stop string, after -n tokens, or at Ctrl-C. -p "
     "needs a container packed with its tokenizer.\n"
     "MODEL (or -m MODEL) is a .sluice file, or a Hugging Face repository, ORG/NAME[:QUANT]: the first time, it "
     "is downloaded and packed into the model store ($SLUICE_HOME, else $XDG_CACHE_HOME/sluice, else "
     "~/.cache/sluice), later runs open it there without the network. QUANT of a safetensors checkpoint: keep, "
     "f32, bf16, q8, or q4 / q3 (the routed experts in 4 / 3 bits, the rest q8) (default: keep for a checkpoint "
     "quantized already, else q4); of a GGUF repository: the quantization in its file names, e.g. Q4_K_M "
     "(default: Q4_K_M, else Q4_0, else Q8_0). 'sluice ls', 'show' and 'rm' manage the store.",
     run_opts, "sluice run Qwen/Qwen3-30B-A3B -p \"Why is the sky blue?\" --chat --cache 8G",
     CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"chat", "talk with the model, one turn after another", cmd_chat, "[MODEL] [OPTION]...",
     "An interactive conversation in the model's chat template, read line by line from stdin (with line "
     "editing on a terminal). The model's state is kept between turns, so earlier turns are never evaluated "
     "again. At the prompt: /reset, /stats, /think on|off, /system TEXT, /save FILE (what --save writes), "
     "/help (this list), /quit. Ctrl-C stops the current answer, Ctrl-D leaves. MODEL (or -m MODEL): a "
     ".sluice file or a model of the store, ORG/NAME[:QUANT], as for run.",
     chat_opts, "sluice chat --system \"You are terse.\" -n 128", CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"tokenize", "text to token ids, or ids to text", cmd_tokenize,
     "[-m MODEL.sluice | --tokenizer FILE] [OPTION]... [TEXT]",
     "Prints the token ids of TEXT, or of stdin when there is no TEXT, space-separated, as Hugging Face "
     "tokenizers' encode gives them (no BOS or EOS added); with --decode, the text of ids.",
     tokenize_opts, "sluice tokenize -m qwen3-next.sluice \"Hello, world\"", CLI_DEFAULT_MODEL},
    {"perplexity", "perplexity and bits per byte of a text file", cmd_perplexity,
     "[-m MODEL.sluice] -f FILE [--ctx N] [OPTION]...",
     "Measures how well the model predicts a text, as llama.cpp's llama-perplexity does. The whole file is "
     "tokenized as plain text (special-token text such as <|im_end|> is ordinary text; no BOS is added) and "
     "cut into non-overlapping windows of --ctx tokens; a trailing partial window is dropped, and a file of "
     "fewer tokens than --ctx is one window of all its tokens (at least 2). Each window is evaluated from an "
     "empty state and only its second half is scored: for window tokens t[0..n-1], NLL = sum over j from "
     "n/2 to n-1 of -log softmax(logits of position j-1)[t[j]], computed in double precision.\n"
     "Perplexity is exp(NLL / scored tokens); bits per byte is NLL / ln 2 / bytes, where bytes is the sum "
     "of the UTF-8 lengths of the scored tokens, each decoded on its own (special tokens as their text). "
     "tok/s counts every evaluated token, scored or not.",
     perplexity_opts, "sluice perplexity -f heldout.txt --ctx 512 --json", CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"logits", "write the logits of every position of token ids to a file", cmd_logits,
     "[-m MODEL.sluice] --tokens IDS -o FILE [OPTION]...",
     "Evaluates the token ids in one pass and writes the logits of every position as little-endian float32 "
     "[n_tokens][vocab], under a temporary name renamed when complete.",
     logits_opts, "sluice logits -m qwen3-next.sluice --tokens 9707,11,1879 -o logits.f32",
     CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"profile", "record which experts token ids route to, for --pin", cmd_profile,
     "[-m MODEL.sluice] --tokens IDS -o PROFILE [OPTION]...",
     "Evaluates the token ids and writes how often each expert was chosen: a routing profile, whose "
     "hottest experts --pin keeps in the cache of later runs. Not with --resident.",
     profile_opts, "sluice profile -m qwen3-next.sluice --tokens 9707,11,1879 -o hot.profile",
     CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"bench", "measure prefill and decode speed, per cache size", cmd_bench,
     "[-m MODEL.sluice] [--cache SIZE]... [OPTION]...",
     "Evaluates a prompt of seeded random tokens (the same every run) and decodes after it (random ids on "
     "a model from sluice synth, greedily otherwise: --decode), once per --cache budget, and reports prefill and decode tok/s, cache hit rate, MiB read per token, read "
     "MiB/s, I/O wait, peak RSS and the growth of the model file's page-cache footprint.",
     bench_opts, "sluice bench -m qwen3-next.sluice --cache 2G --cache 8G --json",
     CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"serve", "an OpenAI- and Anthropic-compatible HTTP server, with a chat page", cmd_serve,
     "[-m [NAME=]MODEL.sluice]... [--port PORT] [OPTION]...",
     "Serves the models over HTTP: POST /v1/chat/completions, /v1/completions (OpenAI) and /v1/messages, "
     "/v1/messages/count_tokens (Anthropic), streamed as server-sent events or whole; GET /v1/models, /health, /metrics (Prometheus) "
     "and a chat page at /. Requests to a model share its forward passes (continuous batching): up to "
     "--parallel sequences are evaluated together, the others wait in a queue. One line per request is "
     "printed to stderr; SIGINT or SIGTERM stops the server. docs/SERVER.md lists the fields supported.",
     serve_opts, "sluice serve -m qwen3-next.sluice --port 8080 --cache 8G --parallel 8",
     CLI_MODEL_OPTS | CLI_DEFAULT_MODEL},
    {"ls", "list the models of the store", cmd_ls, "[OPTION]...",
     "Lists the models that 'sluice run ORG/NAME' downloaded and packed into the store ($SLUICE_HOME, else "
     "$XDG_CACHE_HOME/sluice, else ~/.cache/sluice): name, quantization, size on disk and when it was last "
     "used.",
     NULL, "sluice ls", 0},
    {"show", "where a model of the store came from, and what it is", cmd_show, "ORG/NAME[:QUANT]...",
     "Prints where the model came from (hub, repository, commit, format, when), how it was packed and when "
     "it was last used, then what 'sluice info' says of its container (family, dimensions, layers, sizes) "
     "and where that file is. Without :QUANT, every quantization of the model in the store.",
     NULL, "sluice show Qwen/Qwen3-30B-A3B", 0},
    {"rm", "remove a model from the store", cmd_rm, "ORG/NAME[:QUANT]...",
     "Removes the model's container and record from the store; without :QUANT, every quantization of it.",
     NULL, "sluice rm Qwen/Qwen3-30B-A3B:q8", 0},
    {"completion", "print a shell completion script (bash, zsh)", cmd_completion, "bash|zsh",
     "Prints a script that completes sluice's commands, options, option values, the models of the store and "
     "files, written from the same tables as --help. Load it in the running shell with 'source <(sluice "
     "completion bash)' (zsh: 'source <(sluice completion zsh)'); make install puts the bash one in "
     "PREFIX/share/bash-completion/completions/sluice, which bash-completion loads by itself.",
     NULL, "sluice completion bash > ~/.local/share/bash-completion/completions/sluice", 0},
    {"synth", "write a container of a released model's shape with random weights", cmd_synth,
     "--shape NAME -o MODEL.sluice [OPTION]...",
     "Writes a container of a released model's real dimensions filled with seeded random weights, so that "
     "reading and computing cost what they cost on the real model: for benchmarks.",
     synth_opts, "sluice synth --shape qwen3-next-80b-a3b --layers 8 -o next8.sluice", 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0},
};

const cli_command *cli_command_find(const char *name) {
    for (const cli_command *c = cli_commands; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

/* ---- printers ---------------------------------------------------------------------------------- */

enum { WIDTH = 79, TEXT_COL = 26 };

/* Writes text word-wrapped to WIDTH: the first line continues at column col, the others start at
 * column indent. '\n' in text ends a paragraph: a blank line, then column indent. */
static void wrap(FILE *f, const char *text, int col, int indent) {
    const char *p = text;
    while (*p) {
        if (*p == '\n') {
            fprintf(f, "\n\n%*s", indent, "");
            col = indent;
            p++;
            continue;
        }
        if (*p == ' ') { p++; continue; }
        size_t w = strcspn(p, " \n");
        if (col > indent && col + 1 + (int)w > WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, w, f);
        col += (int)w;
        p += w;
    }
    fputc('\n', f);
}

static void opt_line(FILE *f, const cli_opt *o) {
    char left[128];
    snprintf(left, sizeof left, "  %s%s%s", o->flags, o->arg ? " " : "", o->arg ? o->arg : "");
    int n = (int)strlen(left);
    if (n + 2 > TEXT_COL) { /* too long to share the line: the text starts on the next one */
        fprintf(f, "%s\n%*s", left, TEXT_COL, "");
        n = TEXT_COL;
    } else {
        fprintf(f, "%-*s", TEXT_COL, left);
        n = TEXT_COL;
    }
    wrap(f, o->text, n, TEXT_COL);
}

/* The entry of table t with name ("--cache") among its comma-separated spellings, or NULL. */
static const cli_opt *opt_find(const cli_opt *t, const char *name) {
    size_t n = strlen(name);
    for (; t && t->flags; t++)
        for (const char *p = t->flags; *p;) {
            while (*p == ' ' || *p == ',') p++;
            size_t w = strcspn(p, ", ");
            if (w == n && !strncmp(p, name, n)) return t;
            p += w;
        }
    return NULL;
}

void cli_help_main(FILE *f) {
    fprintf(f, "Usage: sluice COMMAND [OPTION]...\n"
               "  or:  sluice COMMAND --help\n"
               "  or:  sluice --version\n");
    wrap(f, "Runs Mixture-of-Experts language models larger than the machine's memory: the dense backbone "
            "stays in memory, the routed experts are read from one packed .sluice file as the router picks "
            "them, and the output is exactly that of the fully resident model.", 0, 0);
    fprintf(f, "\nCommands:\n");
    for (const cli_command *c = cli_commands; c->name; c++) fprintf(f, "  %-12s%s\n", c->name, c->summary);
    fprintf(f, "\nOptions:\n");
    static const cli_opt own[] = {
        {"-h, --help", NULL, "print this help and exit; after a command, that command's help"},
        {"-V, --version", NULL, "print the version and exit"},
        END_OPTS,
    };
    for (const cli_opt *o = own; o->flags; o++) opt_line(f, o);
    fputc('\n', f);
    wrap(f, "Run 'sluice COMMAND --help' for a command's options, their defaults and an example.", 0, 0);
    fprintf(f, "\nEnvironment:\n");
    static const cli_opt env[] = {
        {"SLUICE_MODEL", NULL, "the model that run, chat, perplexity, logits, profile, bench and serve open when "
                               "no -m is given (before the demo model)"},
        {"SLUICE_KERNELS", NULL, "scalar, avx2, avx512 or neon: the compute kernels, instead of the best the "
                                 "CPU supports"},
        {"HF_TOKEN", NULL, "the Hugging Face token that pull sends to the hub (gated and private models)"},
        {"HF_ENDPOINT", NULL, "the hub that pull downloads from (default: https://huggingface.co)"},
        {"HF_HOME", NULL, "pull's cache is $HF_HOME/hub (default: ~/.cache/huggingface/hub)"},
        {"SLUICE_HOME", NULL, "the model store of run ORG/NAME, ls, show and rm (default: $XDG_CACHE_HOME/sluice, "
                              "else ~/.cache/sluice)"},
        END_OPTS,
    };
    for (const cli_opt *o = env; o->flags; o++) opt_line(f, o);
    fprintf(f, "\nExamples:\n"
               "  sluice run Qwen/Qwen3-30B-A3B          # download, pack into the store, talk\n"
               "  sluice pack ~/models/Qwen3-Next-80B-A3B-Instruct -o qwen3-next.sluice --quant q4\n"
               "  sluice run -m qwen3-next.sluice -p \"Why is the sky blue?\" --chat --cache 8G --stats\n"
               "  sluice chat\n");
}

int cli_help(const cli_command *c) {
    FILE *f = stdout;
    const char *u = c->usage;
    for (int first = 1; *u; first = 0) {
        size_t w = strcspn(u, "\n");
        fprintf(f, "%s sluice %s %.*s\n", first ? "Usage:" : "  or: ", c->name, (int)w, u);
        u += w + (u[w] == '\n');
    }
    wrap(f, c->about, 0, 0);
    if (!strcmp(c->name, "synth")) {
        fputc('\n', f);
        char shapes[512];
        snprintf(shapes, sizeof shapes, "Shapes: %s.", sl_synth_shapes());
        wrap(f, shapes, 0, 0);
    }
    fprintf(f, "\nOptions:\n");
    for (const cli_opt *o = c->opts; o && o->flags; o++) opt_line(f, o);
    static const cli_opt help = {"-h, --help", NULL, "print this help and exit"};
    opt_line(f, &help);
    if (c->flags & CLI_MODEL_OPTS) {
        fprintf(f, "\nModel options:\n");
        for (const cli_opt *o = cli_model_opts; o->flags; o++)
            if (!opt_find(c->opts, o->flags)) opt_line(f, o); /* bench's own --cache differs */
    }
    if (c->flags & CLI_DEFAULT_MODEL) {
        fprintf(f, "\nDefault model:\n  ");
        wrap(f, cli_default_model_doc, 2, 2);
    }
    fprintf(f, "\nExample:\n  %s\n", c->example);
    return 0;
}

int cli_help_requested(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) return 0;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    }
    return 0;
}

/* ---- unknown options --------------------------------------------------------------------------- */

int cli_bad_option(const char *cmd, int argc, char **argv, int i) {
    const char *s = argv[i];
    const cli_command *c = cli_command_find(cmd);
    const cli_opt *o = c ? opt_find(c->opts, s) : NULL;
    if (!o && c && (c->flags & CLI_MODEL_OPTS)) o = opt_find(cli_model_opts, s);
    if (s[0] != '-' || !s[1]) fprintf(stderr, "sluice %s: unexpected argument '%s'", cmd, s);
    else if (o && o->arg && i + 1 >= argc) fprintf(stderr, "sluice %s: option '%s' needs a value (%s)", cmd, s, o->arg);
    else if (o) fprintf(stderr, "sluice %s: option '%s' does not apply here", cmd, s);
    else fprintf(stderr, "sluice %s: unknown option '%s'", cmd, s);
    fprintf(stderr, " (see 'sluice %s --help')\n", cmd);
    return 2;
}
