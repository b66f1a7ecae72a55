/*
 * metrics.c — GET /metrics: the scheduler's and the model's counters in Prometheus' text exposition
 * format (version 0.0.4): "# HELP" and "# TYPE" once per metric, then one sample per model, labelled
 * model="NAME". Counters end in _total; ratios and rates are gauges computed from the counters since
 * start (tok/s over the last few seconds, measured by the server).
 */
#include <stdio.h>
#include <string.h>

#include "serve/api.h"

/* A label value with \, " and newline escaped, as the format asks. */
static int label(tok_buf *b, const char *v) {
    for (const char *p = v; *p; p++) {
        const char *e = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
        if (e ? tok_buf_puts(b, e) : tok_buf_put(b, p, 1)) return -1;
    }
    return 0;
}

static int header(tok_buf *b, const char *name, const char *type, const char *help) {
    char s[512];
    snprintf(s, sizeof s, "# HELP sluice_%s %s\n# TYPE sluice_%s %s\n", name, help, name, type);
    return tok_buf_puts(b, s);
}

static int sample(tok_buf *b, const char *name, const char *model, double v) {
    char s[128];
    int r = tok_buf_puts(b, "sluice_") | tok_buf_puts(b, name);
    if (model) r |= tok_buf_puts(b, "{model=\"") | label(b, model) | tok_buf_puts(b, "\"}");
    if (v == (double)(long long)v && v < 9e15 && v > -9e15) snprintf(s, sizeof s, " %lld\n", (long long)v);
    else snprintf(s, sizeof s, " %.6g\n", v);
    return r | tok_buf_puts(b, s) ? -1 : 0;
}

/* One per-model metric: what to read from an api_model_metrics. */
typedef double (*getter)(const api_model_metrics *m);
typedef struct {
    const char *name, *type, *help;
    getter get;
} metric;

#define G(field) static double get_##field(const api_model_metrics *m)
G(requests) { return (double)m->sched.requests; }
G(completed) { return (double)m->sched.completed; }
G(failed) { return (double)m->sched.failed; }
G(canceled) { return (double)m->sched.canceled; }
G(rejected) { return (double)m->sched.rejected; }
G(active) { return m->sched.active; }
G(queued) { return m->sched.queued; }
G(prompt) { return (double)m->sched.prompt_tokens; }
G(reused) { return (double)m->sched.reused_tokens; }
G(generated) { return (double)m->sched.generated_tokens; }
G(tps) { return m->tok_per_s; }
G(steps) { return (double)m->sched.steps; }
G(rows) { return (double)m->sched.step_rows; }
G(busy) { return m->sched.busy_s; }
G(kv_waits) { return (double)m->sched.kv_waits; }
G(kv_evicted) { return (double)m->sched.kv_evicted; }
G(kv_preempted) { return (double)m->sched.kv_preempted; }
G(kv_used) { return (double)m->sched.kv_pool_used; }
G(kv_limit) { return (double)m->sched.kv_pool_limit; }
G(hits) { return (double)m->model.hits; }
G(misses) { return (double)m->model.misses; }
G(hit_ratio) {
    uint64_t n = m->model.hits + m->model.misses;
    return n ? (double)m->model.hits / (double)n : 0.0;
}
G(bytes_read) { return (double)m->model.bytes_read; }
G(reads) { return (double)m->model.reads; }
G(bytes_per_token) { return m->model.tokens ? (double)m->model.bytes_read / (double)m->model.tokens : 0.0; }
G(io_wait) { return m->model.io_wait_s; }
G(io_wait_ratio) { return m->model.eval_s > 0 ? m->model.io_wait_s / m->model.eval_s : 0.0; }
G(eval) { return m->model.eval_s; }
G(evaluated) { return (double)m->model.tokens; }
G(cache_bytes) { return (double)m->model.cache_bytes; }
G(backbone) { return (double)m->model.backbone_bytes; }
G(experts) { return (double)m->model.expert_bytes; }
G(page_cache) { return (double)m->model.page_cache_bytes; }
G(prefetch_reads) { return (double)m->model.prefetch_reads; }
G(prefetch_used) { return (double)m->model.prefetch_used; }
#undef G

static const metric metrics[] = {
    {"requests_total", "counter", "Generation requests submitted to the scheduler.", get_requests},
    {"requests_completed_total", "counter", "Generation requests that ended normally.", get_completed},
    {"requests_failed_total", "counter", "Generation requests that ended with an error.", get_failed},
    {"requests_canceled_total", "counter", "Generation requests canceled (client gone, shutdown).", get_canceled},
    {"requests_rejected_total", "counter", "Generation requests refused because the queue was full.", get_rejected},
    {"active_sequences", "gauge", "Sequences being evaluated now (scheduler slots in use).", get_active},
    {"queued_sequences", "gauge", "Requests waiting for a slot.", get_queued},
    {"prompt_tokens_total", "counter", "Prompt tokens of the requests (reused ones included).", get_prompt},
    {"prompt_tokens_reused_total", "counter", "Prompt tokens whose state came from the prefix cache.", get_reused},
    {"generated_tokens_total", "counter", "Tokens generated.", get_generated},
    {"generation_tokens_per_second", "gauge", "Tokens generated per second over the last few seconds.", get_tps},
    {"batch_steps_total", "counter", "Batched forward steps run by the scheduler.", get_steps},
    {"batch_rows_total", "counter", "Tokens evaluated in the scheduler's steps.", get_rows},
    {"busy_seconds_total", "counter", "Time the scheduler spent inside batched evaluation.", get_busy},
    {"kv_pool_bytes", "gauge", "KV cache bytes the sequences hold now (pages of the pool).", get_kv_used},
    {"kv_pool_limit_bytes", "gauge", "KV cache bytes the sequences may share (--kv-pool; 0: no limit).", get_kv_limit},
    {"kv_pool_waits_total", "counter", "Times a sequence waited a step for KV pages.", get_kv_waits},
    {"kv_pool_preempted_total", "counter", "Sequences that gave their KV pages back to be evaluated again later.", get_kv_preempted},
    {"kv_pool_evicted_total", "counter", "Requests ended because every sequence waited for KV pages.", get_kv_evicted},
    {"expert_cache_hits_total", "counter", "Expert requests served from the cache.", get_hits},
    {"expert_cache_misses_total", "counter", "Expert requests read from the model file.", get_misses},
    {"expert_cache_hit_ratio", "gauge", "Expert cache hits over all expert requests since start.", get_hit_ratio},
    {"expert_bytes_read_total", "counter", "Expert bytes read from the model file.", get_bytes_read},
    {"expert_reads_total", "counter", "Expert block reads.", get_reads},
    {"bytes_read_per_token", "gauge", "Expert bytes read per evaluated token since start.", get_bytes_per_token},
    {"io_wait_seconds_total", "counter", "Time the forward pass waited for expert reads.", get_io_wait},
    {"io_wait_ratio", "gauge", "I/O wait over evaluation time since start.", get_io_wait_ratio},
    {"eval_seconds_total", "counter", "Time spent evaluating tokens.", get_eval},
    {"tokens_evaluated_total", "counter", "Tokens evaluated by the model (prompt and generated).", get_evaluated},
    {"expert_cache_bytes", "gauge", "Expert cache budget in bytes (all experts when resident).", get_cache_bytes},
    {"backbone_bytes", "gauge", "Resident backbone bytes.", get_backbone},
    {"expert_section_bytes", "gauge", "Bytes of the experts in the model file.", get_experts},
    {"page_cache_bytes", "gauge", "Bytes of the model file in the page cache.", get_page_cache},
    {"prefetch_reads_total", "counter", "Expert reads started on a prediction of the next layer's routing.", get_prefetch_reads},
    {"prefetch_used_total", "counter", "Predicted expert reads a later request used.", get_prefetch_used},
};

/* A latency histogram per model: cumulative _bucket{le=...} samples, then _sum and _count. */
static int histogram(tok_buf *b, const char *name, const char *help, const api_model_metrics *m, int n_models, int ttft) {
    int r = header(b, name, "histogram", help);
    for (int k = 0; k < n_models; k++) {
        const srv_sched_stats *st = &m[k].sched;
        const uint64_t *bucket = ttft ? st->ttft_bucket : st->queue_bucket;
        uint64_t cum = 0;
        for (int i = 0; i < SRV_LAT_BUCKETS; i++) {
            char le[32], s[64];
            cum += bucket[i];
            if (i < SRV_LAT_BUCKETS - 1) snprintf(le, sizeof le, "%g", srv_latency_bounds[i]);
            else snprintf(le, sizeof le, "+Inf");
            r |= tok_buf_puts(b, "sluice_") | tok_buf_puts(b, name) | tok_buf_puts(b, "_bucket{model=\"") |
                 label(b, m[k].name) | tok_buf_puts(b, "\",le=\"") | tok_buf_puts(b, le);
            snprintf(s, sizeof s, "\"} %llu\n", (unsigned long long)cum);
            r |= tok_buf_puts(b, s);
        }
        char sum[96], cnt[96];
        snprintf(sum, sizeof sum, "%s_sum", name);
        snprintf(cnt, sizeof cnt, "%s_count", name);
        r |= sample(b, sum, m[k].name, ttft ? st->ttft_sum_s : st->queue_sum_s);
        r |= sample(b, cnt, m[k].name, (double)(ttft ? st->ttft_count : st->queue_count));
    }
    return r;
}

int api_metrics_text(tok_buf *b, const api_http_metrics *h, const api_model_metrics *m, int n_models) {
    int r = 0;
    for (size_t i = 0; i < sizeof metrics / sizeof *metrics; i++) {
        r |= header(b, metrics[i].name, metrics[i].type, metrics[i].help);
        for (int k = 0; k < n_models; k++) r |= sample(b, metrics[i].name, m[k].name, metrics[i].get(&m[k]));
    }
    r |= histogram(b, "time_to_first_token_seconds", "From a request's arrival to its first generated token.", m,
                   n_models, 1);
    r |= histogram(b, "queue_wait_seconds", "From a request's arrival to a scheduler slot.", m, n_models, 0);
    r |= header(b, "http_requests_total", "counter", "HTTP requests answered, by status class.");
    static const char *cls[] = {"", "1xx", "2xx", "3xx", "4xx", "5xx"};
    for (int k = 1; k <= 5; k++) {
        char s[96];
        snprintf(s, sizeof s, "sluice_http_requests_total{code=\"%s\"} %llu\n", cls[k], (unsigned long long)h->by_class[k]);
        r |= tok_buf_puts(b, s);
    }
    r |= header(b, "http_disconnects_total", "counter", "Clients that left before their answer was complete.");
    r |= sample(b, "http_disconnects_total", NULL, (double)h->disconnects);
    r |= header(b, "http_slow_closed_total", "counter", "Connections closed for sending a request slower than --read-timeout.");
    r |= sample(b, "http_slow_closed_total", NULL, (double)h->slow_closed);
    r |= header(b, "http_connections", "gauge", "Open HTTP connections.");
    r |= sample(b, "http_connections", NULL, h->connections);
    r |= header(b, "peak_rss_bytes", "gauge", "Peak resident memory of the process.");
    r |= sample(b, "peak_rss_bytes", NULL, n_models ? (double)m[0].model.peak_rss_bytes : 0.0);
    r |= header(b, "uptime_seconds", "gauge", "Seconds since the server started.");
    r |= sample(b, "uptime_seconds", NULL, h->uptime_s);
    return r ? -1 : 0;
}
