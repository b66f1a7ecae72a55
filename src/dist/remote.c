/*
 * remote.c — the partition and rank 0's side of experts that live elsewhere (remote.h): opening a model's shares
 * on the expert ranks, one request and one reply per rank per MoE layer, and the ranks' figures.
 *
 * A layer's exchange: every request goes out before any reply is awaited (the ranks compute at once); the
 * replies are taken in rank order, each output row copied into its pair's place of q->y. Per rank the client
 * keeps its request buffer, its pair list (global pair indices) and a sequence number that every reply must
 * echo. Timeouts: SLUICE_REMOTE_TIMEOUT seconds per reply (default 120), SLUICE_REMOTE_OPEN_TIMEOUT for opening
 * a share (default 3600: a rank reads its whole share from disk when resident).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/remote.h"
#include "util/clock.h"
#include "util/err.h"

/* ---- the partition ---- */

void rx_partition(int n_slots, int n_experts, int n_ranks, const uint64_t *load, uint8_t *owner) {
    const int R = n_ranks - 1, E = n_experts;
    for (int s = 0; s < n_slots; s++) {
        uint8_t *o = owner + (size_t)s * E;
        if (!load) {
            for (int e = 0; e < E; e++) o[e] = (uint8_t)(1 + (int)((long long)e * R / E));
            continue;
        }
        const uint64_t *ld = load + (size_t)s * E;
        uint64_t sum[RX_MAX_RANKS] = {0};
        unsigned char done[4096];
        int n_done = 0;
        memset(done, 0, sizeof done);
        while (n_done < E) { /* the heaviest expert left (ties: the lower index), to the lightest rank */
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!done[e] && (best < 0 || ld[e] > ld[best])) best = e;
            int r = 0;
            for (int i = 1; i < R; i++)
                if (sum[i] < sum[r]) r = i;
            o[best] = (uint8_t)(1 + r);
            sum[r] += ld[best] + 1;
            done[best] = 1;
            n_done++;
        }
    }
}

uint64_t rx_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

/* ---- rank 0's client ---- */

typedef struct rx_peer {
    void *buf, *in;         /* the request being built; the reply received (transport-grown) */
    size_t cap, in_cap;
    int *pair;              /* [pairs of the layer] global pair index of each of this rank's pairs */
    int n_pairs;
    uint64_t seq;
    int sent;               /* a request of this layer is out */
} rx_peer;

struct rx_client {
    rx_transport *t;
    int n_slots, E, H;
    uint8_t *owner;         /* [n_slots][E] */
    rx_peer *peer;          /* [size] (0 unused) */
    int *row_of;            /* [rows] scratch: a row's index in the current rank's message, -1 none */
    size_t rows_cap;
    double timeout_s;
    rx_rank_stats self;
    char dead[sizeof((sl_error *)0)->msg]; /* the failure that broke the transport (t->failed): every later layer fails with it */
};

static double env_seconds(const char *name, double dflt) {
    const char *v = getenv(name);
    double x = v ? atof(v) : 0;
    return x > 0 ? x : dflt;
}

static void *grow(void **p, size_t *cap, size_t need) {
    if (*cap >= need) return *p;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    void *q = realloc(*p, c);
    if (!q) return NULL;
    *p = q;
    *cap = c;
    return q;
}

/* Rank r broke the protocol or could not be reached: the transport is marked failed (rx_mpi_end aborts). */
static sl_status peer_fail(rx_client *c, int r, const char *what, sl_error *err) {
    const char *h = c->t->ops->host(c->t, r);
    c->t->failed = 1;
    return err_set(err, SL_EIO, "expert rank %d (host %s): %s", r, h && *h ? h : "?", what);
}

/* A reply from rank r of kind `want` (or RX_FAIL: its text becomes the error) into the peer's in-buffer. */
static sl_status take_reply(rx_client *c, int r, uint32_t want, double timeout_s, size_t *len, sl_error *err) {
    rx_peer *p = &c->peer[r];
    double t0 = clk_now_s();
    sl_status st = c->t->ops->recv(c->t, r, &p->in, &p->in_cap, len, timeout_s, err);
    c->self.wait_s += clk_now_s() - t0;
    if (st) {
        c->t->failed = 1;
        return st;
    }
    c->self.bytes_in += *len;
    const rx_head *h = p->in;
    if (*len < sizeof *h || h->magic != RX_MAGIC) return peer_fail(c, r, "sent a malformed message", err);
    if (h->kind == RX_FAIL) {
        char msg[512];
        size_t n = *len - sizeof *h < sizeof msg - 1 ? *len - sizeof *h : sizeof msg - 1;
        memcpy(msg, (const char *)p->in + sizeof *h, n);
        msg[n] = 0;
        const char *host = c->t->ops->host(c->t, r);
        return err_set(err, SL_EIO, "expert rank %d (host %s): %s", r, host && *host ? host : "?", msg);
    }
    if (h->kind != want) return peer_fail(c, r, "answered with the wrong kind of message", err);
    return SL_OK;
}

static sl_status send_to(rx_client *c, int r, const void *buf, size_t len, sl_error *err) {
    c->self.bytes_out += len;
    sl_status st = c->t->ops->send(c->t, r, buf, len, c->timeout_s, err);
    if (st) c->t->failed = 1;
    return st;
}

sl_status rx_client_open(rx_transport *t, const char *path, const rx_open_msg *o, const uint64_t *load,
                         double open_timeout_s, rx_client **out, sl_error *err) {
    *out = NULL;
    if (t->size < 2 || t->size > RX_MAX_RANKS || t->rank != 0 || o->n_experts > 4096)
        return err_set(err, SL_EINVAL, "experts over %d ranks (this is rank %d): need 2 to %d ranks, rank 0 opening",
                       t->size, t->rank, RX_MAX_RANKS);
    rx_client *c = calloc(1, sizeof *c);
    const size_t n_own = (size_t)o->n_slots * (size_t)o->n_experts, n_path = strlen(path) + 1;
    sl_status st = SL_ENOMEM;
    if (!c) return err_set(err, st, "out of memory");
    c->t = t;
    c->n_slots = o->n_slots;
    c->E = o->n_experts;
    c->H = o->hidden;
    c->timeout_s = env_seconds("SLUICE_REMOTE_TIMEOUT", 120);
    c->owner = malloc(n_own ? n_own : 1);
    c->peer = calloc((size_t)t->size, sizeof *c->peer);
    const size_t len = sizeof(rx_head) + sizeof *o + n_path + n_own;
    void *msg = malloc(len);
    if (!c->owner || !c->peer || !msg) { err_set(err, st, "out of memory"); goto fail; }
    rx_partition(o->n_slots, o->n_experts, t->size, load, c->owner);
    rx_head h = {.magic = RX_MAGIC, .kind = RX_OPEN, .hidden = o->hidden};
    rx_open_msg om = *o;
    om.n_path = (int32_t)n_path;
    memcpy(msg, &h, sizeof h);
    memcpy((char *)msg + sizeof h, &om, sizeof om);
    memcpy((char *)msg + sizeof h + sizeof om, path, n_path);
    memcpy((char *)msg + sizeof h + sizeof om + n_path, c->owner, n_own);
    for (int r = 1; r < t->size; r++) /* every rank reads its share at once */
        if ((st = send_to(c, r, msg, len, err))) goto fail;
    for (int r = 1; r < t->size; r++) {
        size_t got;
        if ((st = take_reply(c, r, RX_READY, open_timeout_s, &got, err))) goto fail;
        c->peer[r].sent = 0;
    }
    snprintf(c->self.host, sizeof c->self.host, "%s", t->ops->host(t, 0));
    free(msg);
    *out = c;
    return SL_OK;
fail:
    free(msg);
    rx_client_free(c);
    return st;
}

void rx_client_free(rx_client *c) {
    if (!c) return;
    if (c->peer) {
        const rx_head h = {.magic = RX_MAGIC, .kind = RX_CLOSE};
        for (int r = 1; r < c->t->size; r++) c->t->ops->send(c->t, r, &h, sizeof h, 5.0, NULL);
        for (int r = 0; r < c->t->size; r++) {
            free(c->peer[r].buf);
            free(c->peer[r].in);
            free(c->peer[r].pair);
        }
    }
    free(c->peer);
    free(c->owner);
    free(c->row_of);
    free(c);
}

int rx_client_owner(const rx_client *c, int slot, int e) { return c->owner[(size_t)slot * c->E + e]; }

int rx_client_size(const rx_client *c) { return c->t->size; }

/* A failed layer: the replies still owed are written off (a late one must not be taken as the next layer's: its
 * sequence number is behind), the transport marked failed, the message prefixed with the layer. */
static sl_status layer_failed(rx_client *c, const rx_layer *q, sl_error *err) {
    sl_status st = err ? err->status : SL_EIO;
    for (int r = 1; r < c->t->size; r++) c->peer[r].sent = 0;
    if (err) err_prefix(err, "layer %d", q->layer);
    if (c->t->failed && !c->dead[0]) snprintf(c->dead, sizeof c->dead, "%s", err ? err->msg : "an expert rank failed");
    return st;
}

/* Rank r's request of layer q (nothing when it owns none of the chosen experts): built in its peer buffer and
 * sent. row_of: [n] scratch. */
static sl_status send_request(rx_client *c, int r, const rx_layer *q, sl_error *err) {
    rx_peer *p = &c->peer[r];
    const int H = q->H;
    int n_exp = 0, n_pairs = 0, n_rows = 0;
    for (int i = 0, start = 0; i < q->n_list; start = q->e_end[i++])
        if (c->owner[(size_t)q->slot * c->E + q->e_list[i]] == r) {
            n_exp++;
            n_pairs += q->e_end[i] - start;
        }
    p->sent = 0;
    if (!n_exp) return SL_OK;
    const size_t len = sizeof(rx_head) + (size_t)(2 * n_exp + n_pairs) * sizeof(int32_t) +
                       (size_t)q->n * (size_t)H * sizeof(float); /* at most n rows */
    if (!grow(&p->buf, &p->cap, len)) return err_set(err, SL_ENOMEM, "out of memory");
    int *np = realloc(p->pair, (size_t)n_pairs * sizeof *np);
    if (!np) return err_set(err, SL_ENOMEM, "out of memory");
    p->pair = np;
    int32_t *ex = (int32_t *)((char *)p->buf + sizeof(rx_head)), *cnt = ex + n_exp, *row = cnt + n_exp;
    float *rows = (float *)(row + n_pairs);
    for (int t = 0; t < q->n; t++) c->row_of[t] = -1;
    int k = 0, j = 0;
    for (int i = 0, start = 0; i < q->n_list; start = q->e_end[i++]) {
        if (c->owner[(size_t)q->slot * c->E + q->e_list[i]] != r) continue;
        ex[k] = q->e_list[i];
        cnt[k++] = q->e_end[i] - start;
        for (int a = start; a < q->e_end[i]; a++, j++) {
            const int t = q->e_tok[a];
            if (c->row_of[t] < 0) { /* a row goes once, however many of the rank's experts it chose */
                c->row_of[t] = n_rows;
                memcpy(rows + (size_t)n_rows++ * H, q->x + (size_t)t * H, (size_t)H * sizeof(float));
            }
            row[j] = c->row_of[t];
            p->pair[j] = a;
        }
    }
    const rx_head h = {.magic = RX_MAGIC, .kind = RX_MOE, .layer = q->layer, .slot = q->slot, .n_rows = n_rows,
                       .n_exp = n_exp, .n_pairs = n_pairs, .hidden = H, .seq = ++p->seq};
    memcpy(p->buf, &h, sizeof h);
    p->n_pairs = n_pairs;
    const size_t used = sizeof h + (size_t)(2 * n_exp + n_pairs) * sizeof(int32_t) + (size_t)n_rows * H * sizeof(float);
    sl_status st = send_to(c, r, p->buf, used, err);
    if (!st) {
        p->sent = 1;
        c->self.requests++;
    }
    return st;
}

sl_status rx_client_send(rx_client *c, const rx_layer *q, sl_error *err) {
    if (q->H != c->H || q->slot < 0 || q->slot >= c->n_slots)
        return err_set(err, SL_EINVAL, "layer %d: a request of hidden %d, slot %d (model: %d, %d slots)", q->layer,
                       q->H, q->slot, c->H, c->n_slots);
    if (c->t->failed) /* a rank that failed once is not asked again: the job must be restarted */
        return err_set(err, SL_EIO, "the expert ranks cannot be used since an earlier failure (%s)",
                       c->dead[0] ? c->dead : "an expert rank failed");
    if (!grow((void **)&c->row_of, &c->rows_cap, (size_t)q->n * sizeof(int)))
        return err_set(err, SL_ENOMEM, "out of memory");
    sl_status st = SL_OK;
    for (int r = 1; r < c->t->size && !st; r++) st = send_request(c, r, q, err);
    return st ? layer_failed(c, q, err) : SL_OK;
}

sl_status rx_client_recv(rx_client *c, const rx_layer *q, sl_error *err) {
    sl_status st = SL_OK;
    for (int r = 1; r < c->t->size && !st; r++) {
        rx_peer *p = &c->peer[r];
        if (!p->sent) continue;
        size_t len;
        if ((st = take_reply(c, r, RX_OUT, c->timeout_s, &len, err))) break;
        const rx_head *h = p->in;
        p->sent = 0;
        if (h->seq != p->seq || h->layer != q->layer || h->n_pairs != p->n_pairs ||
            len != sizeof *h + (size_t)p->n_pairs * q->H * sizeof(float)) {
            char what[160];
            snprintf(what, sizeof what, "a reply to request %llu of layer %d with %d outputs (expected %d)",
                     (unsigned long long)h->seq, h->layer, h->n_pairs, p->n_pairs);
            st = peer_fail(c, r, what, err);
            break;
        }
        const float *y = (const float *)(h + 1);
        for (int j = 0; j < p->n_pairs; j++)
            memcpy(q->y + (size_t)p->pair[j] * q->H, y + (size_t)j * q->H, (size_t)q->H * sizeof(float));
        c->self.pairs += (uint64_t)p->n_pairs;
    }
    return st ? layer_failed(c, q, err) : SL_OK;
}

sl_status rx_client_stats(rx_client *c, int r, rx_rank_stats *out, sl_error *err) {
    if (r < 0 || r >= c->t->size) return err_set(err, SL_ERANGE, "rank %d: the transport has %d", r, c->t->size);
    if (r == 0) {
        *out = c->self;
        out->peak_rss = rx_peak_rss();
        return SL_OK;
    }
    const rx_head h = {.magic = RX_MAGIC, .kind = RX_STATS};
    size_t len;
    sl_status st = send_to(c, r, &h, sizeof h, err);
    if (!st) st = take_reply(c, r, RX_READY, c->timeout_s, &len, err);
    if (st) return st;
    if (len != sizeof h + sizeof *out) return peer_fail(c, r, "sent figures of the wrong size", err);
    memcpy(out, (const char *)c->peer[r].in + sizeof h, sizeof *out);
    return SL_OK;
}
