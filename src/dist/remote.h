/*
 * remote.h — experts that live elsewhere (issue 31: other processes over MPI; issue 32: other cards): one
 * design for "rank 0 holds the backbone, the others a share of the experts each" (docs/SCALE.md).
 *
 * Three pieces, each usable without the others:
 *   - the partition: which rank owns each (MoE slot, expert); balanced by a routing profile's load when one is
 *     given (the hottest experts spread first, each to the least loaded rank), else by count (contiguous
 *     ranges of each slot, so a rank's share of the file is few long reads);
 *   - the messages: per MoE layer ONE request to each rank that owns a chosen expert (its experts, the
 *     (row, expert) pairs, the distinct rows once), ONE reply (every pair's output row, in the request's pair
 *     order); the layout is below (rx_head and the body each kind carries);
 *   - the transport: a table of three functions (send, recv with a timeout, destroy) over ranks 0..size-1.
 *     dist/loop.c is an in-process one (threads, for the tests), dist/mpi.c Open MPI's; an NCCL one for
 *     issue 32 would be a third table (/work/notes/mpi.md says how it plugs in).
 *
 * Rank 0 (rx_client, remote.c) builds the requests from the layer's routing grouped by expert (model/moe.c's
 * e_list / e_count / e_tok), sends them all, then takes the replies rank by rank, each output row straight into
 * its pair's place of one [pairs][H] array in the grouped order; model/moe_remote.c adds those rows in the fixed
 * order one process uses, so where an expert ran never changes a bit. An expert rank (engine/remote.c) serves
 * requests until told to quit.
 *
 * Byte order and float format are the host's: every rank must run on the same architecture (the OPEN message's
 * magic and sizes catch a mismatch). A failure to reach a rank, or no answer within the timeout, is SL_EIO with
 * the rank and its host named; never a hang.
 */
#ifndef SL_DIST_REMOTE_H
#define SL_DIST_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* ---- the transport ---- */

typedef struct sl_remote rx_transport;
typedef struct rx_transport_ops {
    const char *name;
    /* Sends len bytes of buf to rank `to` (buf is the caller's again on return). SL_OK, or SL_EIO naming the rank
     * and host when it cannot be delivered within timeout_s (< 0: no limit). */
    sl_status (*send)(rx_transport *t, int to, const void *buf, size_t len, double timeout_s, sl_error *err);
    /* The next message from rank `from` into *buf (malloc'ed, grown with realloc; *cap its size; the caller
     * frees it), *len its bytes. Waits at most timeout_s (< 0: no limit): SL_EIO naming the rank and its host
     * when nothing came or the transport failed. */
    sl_status (*recv)(rx_transport *t, int from, void **buf, size_t *cap, size_t *len, double timeout_s,
                      sl_error *err);
    /* The host rank r runs on ("" when unknown). */
    const char *(*host)(rx_transport *t, int r);
} rx_transport_ops;

struct sl_remote {
    const rx_transport_ops *ops;
    int rank, size; /* this endpoint's rank; ranks in all (rank 0 the backbone, 1..size-1 the experts) */
    int failed;     /* set by rx_client when a rank failed or did not answer (rx_mpi_end then aborts the job) */
    void *ctx;      /* the transport's own */
};

/* ---- the partition ---- */

/* owner[s * n_experts + e] := the rank (1..n_ranks-1) that holds expert e of MoE slot s. load (may be NULL):
 * [n_slots][n_experts] routing counts (a profile): per slot the experts in decreasing load (ties: lower index
 * first), each to the rank with the least load so far (ties: the lower rank; a rank's load counts 1 more per
 * expert so that experts never routed still spread). NULL: by count, rank 1 + e (size-1) / E (contiguous).
 * n_ranks >= 2. Cannot fail. */
void rx_partition(int n_slots, int n_experts, int n_ranks, const uint64_t *load, uint8_t *owner);

/* ---- the messages ---- */

#define RX_MAGIC 0x534c5258u /* "SLRX" in the host's byte order */
#define RX_MAX_RANKS 255

enum rx_kind {
    RX_OPEN = 1, /* 0 -> r: rx_open_msg, the model path, owner [n_slots][E]          r -> 0: RX_READY */
    RX_READY,    /* r -> 0: rx_rank_stats (what the rank holds)                       or RX_FAIL */
    RX_MOE,      /* 0 -> r: a layer's request (below)                                r -> 0: RX_OUT or RX_FAIL */
    RX_OUT,      /* r -> 0: float y [n_pairs][H] in the request's pair order */
    RX_STATS,    /* 0 -> r: nothing                                                   r -> 0: RX_READY */
    RX_CLOSE,    /* 0 -> r: drop the model (no reply) */
    RX_QUIT,     /* 0 -> r: leave the serve loop (no reply) */
    RX_FAIL,     /* r -> 0: the text of the rank's error (NUL-terminated) */
};

/* Every message starts with this. RX_MOE: layer (the model's layer index), slot (its MoE slot), n_rows, n_exp,
 * n_pairs, then int32 exp[n_exp] (ascending), int32 cnt[n_exp] (pairs per expert), int32 row[n_pairs] (each
 * pair's row of this message, grouped by expert in exp's order), float rows[n_rows][H]. RX_OUT: the same layer,
 * slot, n_pairs and seq, then float y[n_pairs][H]. seq numbers a rank's requests, so a late reply is refused. */
typedef struct rx_head {
    uint32_t magic, kind;
    int32_t layer, slot, n_rows, n_exp, n_pairs, hidden;
    uint64_t seq;
} rx_head;

/* RX_OPEN's fixed part; the path (n_path bytes with its NUL) and owner[n_slots * n_experts] follow. */
typedef struct rx_open_msg {
    int32_t n_slots, n_experts, hidden, n_path;
    int32_t resident, exact, no_verify, n_threads, io_mode, io_engine, policy, io_depth;
    uint64_t cache_bytes;
} rx_open_msg;

/* What a rank holds and did (RX_READY's body): sluice.h's sl_rank_stats. */
typedef sl_rank_stats rx_rank_stats;

/* The peak resident set of this process (VmHWM of /proc/self/status; 0 when unknown). */
uint64_t rx_peak_rss(void);

/* ---- rank 0's side ---- */

typedef struct rx_client rx_client;

/* The request an rx_client sends for one MoE layer, in moe.c's grouping: n_list experts e_list[] (ascending),
 * expert e's pairs at [start, end) of e_tok (rows of x) with end = e_end[i], start the previous end (0 first);
 * x [n][H] host rows. y [pairs][H] (host) receives every pair's output in that same order. */
typedef struct rx_layer {
    int layer, slot, n, H;
    const float *x;
    int n_list;
    const int *e_list, *e_end, *e_tok;
    float *y;
} rx_layer;

/* Opens path's experts on every rank of t: partition (load NULL: by count), RX_OPEN to each, their RX_READY.
 * *out is the caller's (rx_client_free, which closes them). SL_OK, or an error naming the rank (its RX_FAIL's
 * text, or that it did not answer within open_timeout_s). t is borrowed and outlives the client. */
sl_status rx_client_open(rx_transport *t, const char *path, const rx_open_msg *o, const uint64_t *load,
                         double open_timeout_s, rx_client **out, sl_error *err);
void rx_client_free(rx_client *c);
/* One MoE layer in two halves, so that rank 0 computes (the shared expert) while the ranks do: send puts every
 * request out, recv takes the replies (each within the client's timeout) into q->y. SL_OK, or SL_EIO naming the
 * rank and host that failed or did not answer. One layer at a time (not thread-safe); recv after every send. */
sl_status rx_client_send(rx_client *c, const rx_layer *q, sl_error *err);
sl_status rx_client_recv(rx_client *c, const rx_layer *q, sl_error *err);
/* Rank r's figures: r 0 the client's own, else asked of the rank now (RX_STATS). */
sl_status rx_client_stats(rx_client *c, int r, rx_rank_stats *out, sl_error *err);
/* The rank holding expert e of MoE slot s. */
int rx_client_owner(const rx_client *c, int slot, int e);
/* Ranks of the client's transport. */
int rx_client_size(const rx_client *c);

/* ---- in-process transport (dist/loop.c) ---- */

/* n endpoints of one in-process transport (ranks 0..n-1) into ends[] (each the caller's; free them with
 * rx_loop_free after every thread using them is done). Messages are copied into per-pair mailboxes.
 * SL_OK or SL_ENOMEM. */
sl_status rx_loop_new(int n, rx_transport **ends);
void rx_loop_free(rx_transport **ends, int n);
/* Tests: from its `after`-th send on, rank r's messages are dropped (a rank that stops answering). */
void rx_loop_drop_after(rx_transport *end, int r, int after);

/* ---- Open MPI (dist/mpi.c; SL_EUNSUPPORTED "built without MPI" without it) ---- */

/* 1 when this process was started by mpirun with more than one rank (its environment says so). */
int rx_mpi_launched(void);
/* MPI_Init and this process's endpoint over MPI_COMM_WORLD (errors returned, never fatal), the ranks' host names
 * gathered. SL_OK, SL_EUNSUPPORTED in a build without MPI. */
sl_status rx_mpi_new(int *argc, char ***argv, rx_transport **out, sl_error *err);
/* Rank 0 with ok: RX_QUIT to every rank, MPI_Finalize; else (a failure) MPI_Abort, which stops every rank. */
void rx_mpi_end(rx_transport *t, int ok);

#endif
