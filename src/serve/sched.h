/*
 * sched.h — continuous batching over one model: requests (a prompt, sampling and stop parameters) join
 * a queue; one scheduler thread repeatedly builds a step from every active sequence — one token for
 * each that is decoding, a chunk of prompt for those still prefilling — and evaluates it with
 * sl_batch_eval, so sequences that choose the same experts share their reads. Finished requests leave
 * and queued ones take their place between steps.
 *
 * Fairness: decode steps are never delayed by prefill beyond one step; the prefill budget of a step
 * (prefill_chunk tokens) goes to the prefilling sequences round-robin, in chunks, so one long prompt
 * cannot stall the others; admission is first come, first served.
 *
 * Output is pushed: emit() is called on the scheduler thread for every token with the text that became
 * final (unfinished UTF-8 and possible stop-string beginnings held back), and once with done = 1. It
 * must not block for long; a non-zero return cancels the request. srv_cancel() works from any thread
 * (a client that went away); the slot is free before the next step.
 *
 * KV pages (sl_model_set_kv_pool): a sequence takes its pages before a step (a new one its whole prompt's first,
 * first come first served, holding none while it waits) and waits, skipped in the step, while the model's pool has
 * none; when every sequence of a step waits, the newest that has generated gives its pages back and is evaluated
 * again later (preempted: its prompt, then its tokens one a step: bitwise its state before, nothing delivered
 * twice); with none such, the newest ends with SL_EBUSY ("the KV pool is full: ..."). A finished request's session
 * gives its pages back.
 *
 * A request's tokens are exactly what sl_generate() gives alone for the same prompt, sampler parameters
 * and seed (sl_batch_eval is bitwise equal to sl_session_eval).
 */
#ifndef SL_SERVE_SCHED_H
#define SL_SERVE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "text/grammar.h"

typedef struct srv_sched srv_sched;

typedef struct srv_sched_params {
    int max_active;    /* sequences evaluated together (slots); default 16 */
    int max_queue;     /* requests waiting for a slot beyond which srv_submit says SL_EBUSY; default 64 */
    int n_ctx;         /* positions per sequence; 0 = the model's */
    int prefill_chunk; /* prompt tokens per step, over all prefilling sequences; default 256 */
    /* Prefix cache: sequence states kept for token prefixes, within this many bytes (LRU; 0 = off), so
     * a follow-up turn does not evaluate its history again. A state is kept at the last multiple of
     * 64 tokens of each prompt (where the micro-batches of a cold evaluation end too, so a hit is
     * bitwise a cold request); a request starts from the longest kept prefix of its prompt. */
    uint64_t state_cache_bytes;
    /* With state_cache_bytes: kept states are also written to this directory (checksummed, temp name
     * then rename) and read back by the next scheduler on the same model. NULL = memory only. */
    const char *state_dir;
    /* 1: a sequence that fills n_ctx while generating drops the oldest half of its positions after the first
     * n_keep and goes on (sl_session_shift: a prefill of the rest, in the step); 0: the length ends it */
    int context_shift, n_keep;
} srv_sched_params;

srv_sched_params srv_sched_params_default(void);

#define SRV_MAX_TOP_LOGPROBS 20

/* A generated token's log-probability under the model (log-softmax of its logits after a grammar's
 * mask, before the sampler's penalties and temperature) and the most likely tokens' at its step. */
typedef struct srv_logprob {
    float logprob;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS]; /* most likely first (ties: lower id) */
    float top_logprob[SRV_MAX_TOP_LOGPROBS];
} srv_logprob;

typedef struct srv_request {
    const int32_t *prompt; /* copied by srv_submit */
    int n_prompt;
    sl_sampler_params sampling;
    int max_tokens;          /* <= 0: until the context is full */
    const char *const *stop; /* copied */
    int n_stop;
    int skip_special;        /* 1: special tokens are not delivered as text */
    /* NULL, or the grammar the answer must follow: each step's logits are masked with it before
     * sampling (gr_mask) and the sampled token accepted into it. Used on the scheduler thread until
     * the done event; the caller keeps it and frees it after. */
    gr_state *grammar;
    const gr_vocab *vocab;   /* with grammar: the model's tokens by their bytes */
    int logprobs;            /* 0: none; 1 + k: each token's srv_logprob with k (<= 20) top entries */
    /* Thinking: 0 the answer has none; 1 it may open with a <think>...</think> block; 2 it starts inside
     * one (the prompt ends with <think>). Stop strings then apply to what follows the block
     * (textgen_think; max_tokens counts the block too unless answer_only), and with think_budget > 0 the block is closed
     * after that many tokens: "\n</think>\n\n" is generated in place of sampled tokens, and the
     * answer follows. */
    int think;
    int think_budget;
    /* clk_now_s() time after which the request ends at its next token, as max_tokens would end it
     * (SL_STOP_LENGTH, the text held back delivered); 0: none */
    double deadline;
    /* 0, or the id of a request submitted earlier to this scheduler with the same prompt (n choices of
     * one request): this one waits for that one's prompt to be evaluated and starts from a copy of its
     * state and logits (the prompt evaluated once); if that one ends or fails first, or the prompts
     * differ, this one evaluates its own. Its tokens are the same either way. */
    uint64_t share_prompt_of;
    /* with think: max_tokens counts only the answer after the block (textgen's answer_only); the
     * block is then bounded by think_budget (which the caller sets) or the context */
    int answer_only;
} srv_request;

typedef struct srv_event {
    int done;            /* 0: a token; 1: the end (no token) */
    int32_t id;          /* the token (done = 0); -1 for a last flush of held-back text */
    const char *text;    /* text that became final with it (may be empty); valid during the call */
    size_t len;
    const srv_logprob *logprob; /* the token's (done = 0, id >= 0, logprobs asked), else NULL */
    /* on every event (known from the first token on): */
    int n_reused;        /* prompt tokens whose state came from the prefix cache (not evaluated) */
    int n_kept;          /* prompt tokens after those whose state this request added to the prefix cache */
    /* done = 1: */
    sl_status status;    /* SL_OK, or why the request failed (message in errmsg) */
    const char *errmsg;
    sl_stop_reason stop;
    int n_prompt, n_generated;
    int n_thinking;      /* of n_generated, the thinking block's (its tags and the spaces after it) */
    double queued_s, ttft_s, total_s; /* waiting for a slot; submit to first token; submit to end */
} srv_event;

typedef int (*srv_emit_fn)(void *user, const srv_event *ev);

/* Starts the scheduler thread. The model and tokenizer must outlive it; tok may be NULL (a model
 * without one: events carry ids and no text, and only max_tokens or the context end a request). With state_dir, the states
 * found there are loaded first (files that are damaged or of another model are skipped). */
sl_status srv_sched_new(sl_model *m, const sl_tokenizer *tok, const srv_sched_params *p, srv_sched **out,
                        sl_error *err);
/* Stops the thread: every request still queued or active gets its done event with SL_ECANCELED. */
void srv_sched_free(srv_sched *s);

/* Queues a request. SL_EBUSY when the queue is full, SL_ERANGE when the prompt cannot fit the context,
 * SL_EINVAL for an empty prompt. *id (may be NULL) names it for srv_cancel. emit is never called before
 * srv_submit returns SL_OK, and never after the done event. */
sl_status srv_submit(srv_sched *s, const srv_request *r, srv_emit_fn emit, void *user, uint64_t *id, sl_error *err);
/* Cancels a queued or active request (its done event comes with SL_ECANCELED); unknown ids are ignored. */
void srv_cancel(srv_sched *s, uint64_t id);

#define SRV_LAT_BUCKETS 11
typedef struct srv_sched_stats {
    uint64_t requests, completed, failed, canceled, rejected;
    int active, queued;
    uint64_t prompt_tokens, reused_tokens, generated_tokens;
    uint64_t state_hits, state_misses; /* prefix-cache lookups (requests) with / without a kept prefix */
    uint64_t state_entries, state_bytes;
    uint64_t steps, step_rows; /* batched steps run, and rows (tokens) in them */
    double busy_s;             /* time inside sl_batch_eval */
    uint64_t kv_waits;         /* a sequence skipped in a step for want of KV pages (a pool's limit), each time */
    uint64_t kv_preempted;     /* sequences that gave their KV pages back to be evaluated again (every one waited) */
    uint64_t kv_evicted;       /* requests ended because every sequence waited and none could be preempted */
    uint64_t kv_pool_used, kv_pool_limit; /* the model's KV pool now: bytes its sessions hold, its limit (0: none) */
    /* latency histograms: counts of requests at or under each bound of srv_latency_bounds (the last
     * bucket is everything above), their sum and count */
    uint64_t ttft_bucket[SRV_LAT_BUCKETS], queue_bucket[SRV_LAT_BUCKETS];
    double ttft_sum_s, queue_sum_s;
    uint64_t ttft_count, queue_count;
} srv_sched_stats;

/* Upper bounds in seconds of the latency buckets (time to first token, time waiting for a slot). */
extern const double srv_latency_bounds[SRV_LAT_BUCKETS - 1];

void srv_sched_stats_get(srv_sched *s, srv_sched_stats *out);

#endif
