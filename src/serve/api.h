/*
 * api.h — the HTTP server's internal parts between the wire (http.c, gen.c) and the scheduler: parsed
 * generation requests (api_gen, from OpenAI chat / completions or Anthropic messages bodies), error
 * answers, the answer's text split into reasoning / content / tool calls (out_parser), the writers
 * of responses, whole (api_result -> JSON) or streamed (api_stream -> SSE bytes), and the table that
 * gathers each API's parser and writers (api_dialect). None of it does I/O or touches the scheduler,
 * so all of it is unit-tested on strings (tests/test_serve.c).
 *
 * Sections: errors (api.c); requests (api_openai.c, api_anthropic.c); the answer parser (output.c);
 * results and streams (api.c); dialects (one file per API: api_openai.c, api_anthropic.c; the table
 * in api.c); metrics (metrics.c).
 */
#ifndef SL_SERVE_API_H
#define SL_SERVE_API_H

#include <stddef.h>
#include <stdint.h>

#include "serve/sched.h"
#include "sluice.h"
#include "text/tokenizer.h"

struct cJSON;

/* ---- errors ------------------------------------------------------------------------------------ */

/* An error answer: its HTTP status and the fields of the error object. The object's "type" follows
 * from the status and the API (api_error_json). */
typedef struct api_error {
    int status;       /* 400, 401, 404, 405, 413, 500, 503 */
    char param[64];   /* the request field at fault, or "" (null) */
    char code[48];    /* OpenAI's "code" ("model_not_found", "context_length_exceeded", ...), or "" */
    char message[640];
} api_error;

/* Fills e; returns -1 (so parsers can `return api_fail(...)`). param and code may be NULL. */
int api_fail(api_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The error body and the error object's type in the shape of OpenAI (anthropic 0: {"error": {"message",
 * "type", "param", "code"}}, types "invalid_request_error", "authentication_error", "server_error", ...)
 * or Anthropic (1: {"type": "error", "error": {"type", "message"}}, types "not_found_error",
 * "request_too_large", "overloaded_error", "api_error", ...): the error_json / error_type of the
 * dialects below, for callers that know only which. The body is malloc'ed (NULL when out of memory);
 * the type is static. */
char *api_error_json(const api_error *e, int anthropic);
const char *api_error_type(int status, int anthropic);
/* The message of e as a cJSON string, made valid UTF-8 (it may quote request text); NULL when out of
 * memory. */
struct cJSON *api_error_message(const api_error *e);
/* Shortens every absolute path in msg to its last component, in place: 500-class messages (which
 * quote the engine's errors, such as a failed expert read) name a model's file, never its folder. */
void api_scrub_paths(char *msg);

/* ---- requests ---------------------------------------------------------------------------------- */

/* Which API a request came in (its dialect, below); new APIs take the next value. */
typedef enum { API_CHAT = 0, API_COMPLETION = 1, API_MESSAGES = 2, API_RESPONSES = 3, API_N_KINDS } api_kind;

#define API_MAX_STOP 16
#define API_MAX_N 16 /* choices per request */

/* A generation request, as parsed from any of the three APIs. Strings point into the parsed JSON or
 * into storage the request owns; everything lives until api_gen_free. */
typedef struct api_gen {
    api_kind kind;
    const char *model;         /* the "model" field, or NULL (the first model served) */
    /* chat (API_CHAT, API_MESSAGES) */
    sl_chat_msg *msgs;
    int n_msgs;
    const char *tools;         /* JSON array of {"type": "function", "function": {...}}, or NULL */
    int enable_thinking;       /* -1: the template's default */
    /* API_COMPLETION: a text prompt, or token ids */
    const char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    int echo;                  /* the answer starts with the prompt */
    /* all */
    sl_sampler_params sp;
    int seed_set;
    int max_tokens;            /* 0: not given; counts the thinking block too when enable_thinking was given (gen.c answer_budget) */
    int think_budget;          /* 0: none; the thinking block's tokens, after which it is closed */
    const char *stop[API_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int logprobs;              /* 0: none; 1 + k: each token's log-probability and its k top alternatives */
    int n;                     /* choices (OpenAI's n), >= 1; choice i is sampled with seed + i */
    /* structured outputs: the grammar every token must keep the answer in (constrain.c), or NULL */
    gr_grammar *grammar;
    /* owned */
    void *root;                /* the cJSON tree */
    char **owned;
    int n_owned, cap_owned;
} api_gen;

/* Parse a request body (len bytes, need not be NUL-terminated) into g (zeroed first). Returns 0, or -1
 * with e filled (status 400: malformed JSON, a field of the wrong type or out of range, n > 1, an
 * unsupported feature). Sampling fields not given keep sl_sampler_params_default()'s values. */
int oai_parse_chat(const char *body, size_t len, api_gen *g, api_error *e);
int oai_parse_completion(const char *body, size_t len, api_gen *g, api_error *e);
int ant_parse_messages(const char *body, size_t len, api_gen *g, api_error *e);
int resp_parse(const char *body, size_t len, api_gen *g, api_error *e);
void api_gen_free(api_gen *g);
/* Copies s[0..n) into storage g owns (NUL-terminated); NULL when out of memory. */
char *api_gen_strndup(api_gen *g, const char *s, size_t n);
/* Takes ownership of s (malloc'ed; freed with g). Returns s, or NULL (s freed) when out of memory. */
char *api_gen_own(api_gen *g, char *s);
/* Appends a zeroed message of role to the growing array *v (*n in use, *cap allocated). NULL when out
 * of memory. */
sl_chat_msg *api_msg_push(sl_chat_msg **v, int *n, int *cap, const char *role);
/* The "text" of each part of the array c joined with "\n" into storage g owns (*out): every part is
 * first checked by check (0, or -1 with e naming param[i]); by_index 1: a "\n" before every part but
 * the first; 0: only once some text came before. Returns 0, or -1 with e (500 when out of memory). */
typedef int (*api_part_check)(const struct cJSON *part, const char *param, int i, api_error *e);
int api_join_parts(api_gen *g, const struct cJSON *c, const char *param, api_part_check check, int by_index,
                   const char **out, api_error *e);

/* Helpers of the parsers (api.c). Each reads o[key] when present: 0 when absent or null (out
 * untouched), 1 when read, -1 with e filled (400 naming key) when of the wrong type or outside
 * [lo, hi]. */
int api_num(const struct cJSON *o, const char *key, double lo, double hi, double *out, api_error *e);
int api_int(const struct cJSON *o, const char *key, double lo, double hi, long long *out, api_error *e);
int api_bool(const struct cJSON *o, const char *key, int *out, api_error *e);
int api_str(const struct cJSON *o, const char *key, const char **out, api_error *e);
/* The common fields: model, stream, temperature, top_p, top_k, min_p, seed, presence_penalty,
 * frequency_penalty (0 only), repeat_penalty, repeat_last_n, stop (key: "stop" or "stop_sequences";
 * a string or an array of strings). Returns 0 or -1. */
int api_common(api_gen *g, const struct cJSON *root, const char *stop_key, api_error *e);
/* Parses body into a JSON object (g->root). Returns it, or NULL with e filled (400). */
struct cJSON *api_parse_root(api_gen *g, const char *body, size_t len, api_error *e);

/* Structured outputs (constrain.c): g->grammar for a JSON Schema (schema NULL: any JSON object), or
 * for a forced tool call to the tool named name (NULL: any of g->tools, which must be set). Thinking is
 * turned off (enable_thinking 0). Returns 0, or -1 with e (400 naming param: an unsupported schema
 * keyword, an unknown tool). */
int api_json_grammar(api_gen *g, const struct cJSON *schema, const char *param, api_error *e);
int api_tool_grammar(api_gen *g, const char *name, const char *param, api_error *e);
/* tool_choice auto with a tool marked "strict" (function.strict true): g->grammar for free text that
 * may end in calls (<tool_call> blocks), each to one of g->tools, a strict tool's arguments valid
 * under its parameters (the others' any object); no text after the calls. Thinking off. Nothing
 * without a strict tool, or when g->grammar is set already (a response_format's). 0 or -1 with e. */
int api_tool_auto_grammar(api_gen *g, const char *param, api_error *e);

/* ---- the answer parser ------------------------------------------------------------------------- */

/* Splits generated text, as it streams in, into reasoning (a <think>...</think> block at the start of
 * the answer), content, and tool calls (<tool_call>{"name": ..., "arguments": ...}</tool_call>, or the
 * <function=NAME><parameter=P>V</parameter></function> form of Qwen3-Coder / Qwen3.5, inside the same
 * tags). Text that could still be the start of a tag is held back until it is known; reasoning loses
 * its surrounding newlines and the content after </think> its leading ones, as the Qwen template
 * strips them; whitespace around tool calls is dropped. A <tool_call> block whose body is neither form
 * is given back as content, tags included, and so is one cut off by the end. */
typedef enum { OUT_CONTENT = 0, OUT_REASONING = 1, OUT_TOOL_CALL = 2 } out_kind;

typedef struct out_call {
    const char *name;
    const char *arguments; /* JSON text of an object */
} out_call;

/* Receives a piece: text (len bytes, not NUL-terminated) for OUT_CONTENT / OUT_REASONING, call for
 * OUT_TOOL_CALL; all valid during the call. Returns 0, or non-zero to fail the push (out of memory). */
typedef int (*out_fn)(void *user, out_kind kind, const char *text, size_t len, const out_call *call);

typedef struct out_parser {
    int state;  /* START, THINK, CONTENT, CALL (output.c) */
    int tools;  /* <tool_call> and DeepSeek's <｜DSML｜tool_calls> blocks are parsed */
    int dsml;   /* in CALL: the block is a DSML one */
    int lstrip; /* drop leading whitespace before the next text of this state */
    int n_calls;
    tok_buf hold;
} out_parser;

/* think: 0 no reasoning parsed (completions), 1 a <think> block may open the answer, 2 the answer
 * starts inside one (the prompt ended with "<think>\n" or "<think>"). tools: parse tool calls. Cannot fail. */
void out_init(out_parser *p, int think, int tools);
/* Feeds text; calls fn for each piece that became final. Returns 0, or -1 (out of memory, or fn
 * failed). */
int out_push(out_parser *p, const char *text, size_t len, out_fn fn, void *user);
/* The end of the answer: whatever is held becomes final. Returns 0 or -1. */
int out_end(out_parser *p, out_fn fn, void *user);
void out_free(out_parser *p);

/* ---- results and streams ----------------------------------------------------------------------- */

/* How a generation ended, for finish_reason / stop_reason and usage. */
typedef struct api_done {
    sl_stop_reason stop;
    const char *stop_sequence; /* the stop string that ended it (SL_STOP_STRING), or NULL */
    int n_prompt, n_generated;
    int n_reused;   /* of n_prompt, those whose state came from the prefix cache (not evaluated) */
    int n_thinking; /* of n_generated, the thinking block's (OpenAI's reasoning_tokens) */
    int n_kept;     /* of n_prompt, those after n_reused whose state this request added to the cache */
} api_done;

typedef struct api_call {
    char id[40];
    char *name, *arguments;
} api_call;

/* A whole answer, collected for a non-streamed response. */
typedef struct api_result {
    tok_buf content, reasoning;
    api_call *calls;
    int n_calls;
} api_result;

/* An out_fn collecting into an api_result (user). */
int api_result_add(void *user, out_kind kind, const char *text, size_t len, const out_call *call);
void api_result_free(api_result *r);

/* What every response carries. */
typedef struct api_meta {
    char id[48];       /* "chatcmpl-...", "cmpl-...", "msg_..." */
    const char *model; /* the name served */
    long long created; /* Unix seconds */
} api_meta;

/* A fresh random id with prefix into out (e.g. "call_", "toolu_"). Cannot fail. */
void api_new_id(char *out, size_t n, const char *prefix);

/* The non-streamed response bodies (api_openai.c, api_anthropic.c); malloc'ed, NULL when out of
 * memory. text (completions) is the whole answer, the prompt first when echo was asked. */
char *oai_chat_response(const api_meta *m, const api_result *r, const api_done *d);
char *oai_completion_response(const api_meta *m, const char *text, size_t len, const api_done *d);
char *ant_message_response(const api_meta *m, const api_result *r, const api_done *d);

struct api_dialect;

/* A streamed response: SSE bytes appended to out as pieces arrive, in the events of its dialect. */
typedef struct api_stream {
    api_kind kind;
    const struct api_dialect *d;
    api_meta meta;
    int include_usage;
    int n_prompt;      /* known before the first token (Anthropic's message_start carries it) */
    int n_reused, n_kept; /* as api_done's: set (gen.c) before the first piece, for message_start */
    int started;
    int block;         /* Anthropic: index of the open content block, -1 if none */
    int block_kind;    /* ... its out_kind */
    int n_blocks, n_calls;
    /* OpenAI n > 1 streamed: this choice's index in its chunks; hold_close: the end writes the finish
     * chunk only (the usage chunk of all choices and [DONE] come once, from oai_stream_close) */
    int choice, hold_close;
    /* Responses: the events' sequence number, the open item's id and text so far, the items done (a
     * cJSON array, for the final response) */
    int seq;
    char item_id[48];
    tok_buf acc;
    void *items;
    char *output;      /* Responses, once ended: the output items (JSON array text), for the response store */
    tok_buf out;
} api_stream;

/* kind picks the dialect (api_dialect_of). Cannot fail. */
void api_stream_init(api_stream *s, api_kind kind, const api_meta *m, int include_usage, int n_prompt);
/* The opening events (OpenAI: the role chunk; Anthropic: message_start, ping). Returns 0 or -1 (out of
 * memory). Called by the first piece if not before. */
int api_stream_begin(api_stream *s);
/* An out_fn (user: the api_stream): one piece as SSE events. */
int api_stream_piece(void *user, out_kind kind, const char *text, size_t len, const out_call *call);
/* The closing events: finish_reason (+ usage chunk when asked, "data: [DONE]"), or Anthropic's
 * content_block_stop, message_delta, message_stop. */
int api_stream_end(api_stream *s, const api_done *d);
/* An error after the stream began: OpenAI `data: {"error": ...}` then [DONE]; Anthropic `event: error`. */
int api_stream_error(api_stream *s, const api_error *e);
/* OpenAI chat / completions: the closing events after the finish chunks of n choices (hold_close):
 * the usage chunk when asked (d: their sum), then [DONE]. Returns 0 or -1 (out of memory). */
int oai_stream_close(api_stream *s, const api_done *d);
void api_stream_free(api_stream *s);

/* A cJSON string of s[0..n) (s may be NULL: ""); NULL when out of memory. */
void *api_text(const char *s, size_t n);

/* Appends one SSE event ("event: NAME\n" when name is non-NULL, "data: JSON\n\n") of the cJSON value
 * j (which it deletes). Returns 0 or -1. */
int api_sse(tok_buf *out, const char *name, void *j);

/* ---- logprobs (logprobs.c) -------------------------------------------------------------------- */

/* A generated token and its log-probabilities, as the scheduler reported them. */
typedef struct api_token_lp {
    int32_t id;
    srv_logprob lp;
} api_token_lp;

/* The logprobs object of a choice for tokens t[0..n) (special tokens left out): chat's {"content": [{"token",
 * "logprob", "bytes", "top_logprobs"}], "refusal": null} (kind API_CHAT), completions' {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"} (API_COMPLETION; offset: where t[0]'s text starts in
 * the choice's text). NULL when out of memory. */
struct cJSON *api_logprobs_json(api_kind kind, const sl_tokenizer *tok, const api_token_lp *t, int n, size_t offset);
/* body (a whole response, malloc'ed; freed) with choices[0].logprobs set to lp (taken). The new body,
 * NULL when out of memory. */
char *api_with_logprobs(char *body, struct cJSON *lp);
/* A chunk that carries only logprobs (lp, taken), in the stream's OpenAI shape. 0 or -1. */
int api_stream_logprobs(api_stream *s, struct cJSON *lp);

/* ---- dialects ---------------------------------------------------------------------------------- */

/* What /v1/models says of one model. */
typedef struct api_model_info {
    const char *name;
    int n_ctx;         /* positions per sequence */
    long long created; /* Unix seconds (the server's start) */
} api_model_info;

/* An API dialect: how one endpoint's requests are read and its answers and errors written. The server
 * (http.c, gen.c) knows a dialect only through this table, as SQLite knows a VFS through
 * sqlite3_io_methods: OpenAI chat and completions (api_openai.c), Anthropic messages (api_anthropic.c).
 * A new API is one file defining one, its api_kind (in the order of api_dialect_of's table, api.c) and
 * its row in the route table (routes.c). Every function returns 0 or -1 (out of memory) unless said;
 * none does I/O. */
typedef struct api_dialect {
    const char *name;         /* "chat", "completions", "messages" */
    api_kind kind;
    const char *id_prefix;    /* of response ids: "chatcmpl-", "cmpl-", "msg_" */
    int chat;                 /* 1: the prompt is messages through the chat template; 0: a completion's
                                 text or token ids (api_gen.prompt / prompt_ids) */
    const char *prompt_param; /* the request field a context-length error names */
    /* A request body into g (see oai_parse_chat): 0, or -1 with e filled. */
    int (*parse)(const char *body, size_t len, api_gen *g, api_error *e);
    /* The non-streamed response of a collected answer; malloc'ed, NULL when out of memory. */
    char *(*response)(const api_meta *m, const api_result *r, const api_done *d);
    /* A streamed answer, appended to s->out: the opening events, one piece, the closing events, and
     * an error after the stream began (its own event, then whatever ends the stream). */
    int (*stream_begin)(api_stream *s);
    int (*stream_piece)(api_stream *s, out_kind kind, const char *text, size_t len, const out_call *call);
    int (*stream_end)(api_stream *s, const api_done *d);
    int (*stream_error)(api_stream *s, const api_error *e);
    /* An error answer's body (malloc'ed, NULL when out of memory), and the error type of a status. */
    char *(*error_json)(const api_error *e);
    const char *(*error_type)(int status);
    /* GET /v1/models in this API's shape: the list of n models, or one. malloc'ed, NULL when out of
     * memory. */
    char *(*models_json)(const api_model_info *m, int n);
    char *(*model_json)(const api_model_info *m);
} api_dialect;

/* OpenAI's error object, its types, and its model list and model (api_openai.c): the shapes of every
 * OpenAI dialect, and of the routes that are no dialect's. */
char *oai_error_json(const api_error *e);
const char *oai_error_type(int status);
char *oai_models_json(const api_model_info *m, int n);
char *oai_model_json(const api_model_info *m);

extern const api_dialect api_openai_chat, api_openai_completions, api_anthropic_messages, api_openai_responses;

/* The dialect of a kind. Static; kind must be a value of api_kind. */
const api_dialect *api_dialect_of(api_kind kind);

/* ---- metrics ----------------------------------------------------------------------------------- */

/* One model's numbers for /metrics. */
typedef struct api_model_metrics {
    const char *name;
    srv_sched_stats sched;
    sl_stats model;
    double tok_per_s;      /* generated tokens per second over the last few seconds */
} api_model_metrics;

/* Server-wide HTTP counters. */
typedef struct api_http_metrics {
    uint64_t by_class[6];     /* [k]: statuses k00..k99 (k = 1..5) */
    uint64_t disconnects;     /* clients that left before their answer was complete */
    uint64_t slow_closed;     /* connections closed for reading a request longer than read_timeout */
    int connections;          /* open now */
    double uptime_s;
} api_http_metrics;

/* Prometheus text exposition (version 0.0.4) of every counter, sluice_ prefix, one label model="NAME"
 * on per-model series; appended to out. Returns 0 or -1. */
int api_metrics_text(tok_buf *out, const api_http_metrics *h, const api_model_metrics *m, int n_models);

#endif
