/*
 * loop.c — an in-process transport (remote.h) for the tests: n endpoints sharing one mailbox per (from, to)
 * pair, each message a copy, each mailbox first in first out under one mutex and condition variable. The
 * expert ranks are threads of the same process, each with its own model share (engine/remote.c), so a test
 * runs the whole exchange, the partition and the combine without MPI. rx_loop_drop_after makes a rank stop
 * answering (its sends vanish), which a receive's timeout must turn into an error naming it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/remote.h"
#include "util/err.h"

typedef struct loop_msg {
    struct loop_msg *next;
    size_t len;
    char data[];
} loop_msg;

typedef struct loop_hub {
    int n, refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    loop_msg **head, **tail; /* [from * n + to] */
    int *drop_after;         /* [n] sends of rank r after which they are dropped (-1: never) */
    int *sends;              /* [n] */
} loop_hub;

static sl_status loop_send(rx_transport *t, int to, const void *buf, size_t len, double timeout_s, sl_error *err) {
    loop_hub *hub = t->ctx;
    if (to < 0 || to >= hub->n) return err_set(err, SL_EINVAL, "rank %d: the transport has %d", to, hub->n);
    loop_msg *m = malloc(sizeof *m + len);
    if (!m) return err_set(err, SL_ENOMEM, "out of memory");
    m->next = NULL;
    m->len = len;
    memcpy(m->data, buf, len);
    pthread_mutex_lock(&hub->mu);
    const int me = t->rank, q = me * hub->n + to;
    if (hub->drop_after[me] >= 0 && hub->sends[me]++ >= hub->drop_after[me]) {
        free(m);
    } else {
        if (hub->tail[q]) hub->tail[q]->next = m;
        else hub->head[q] = m;
        hub->tail[q] = m;
        pthread_cond_broadcast(&hub->cv);
    }
    pthread_mutex_unlock(&hub->mu);
    return SL_OK;
}

static sl_status loop_recv(rx_transport *t, int from, void **buf, size_t *cap, size_t *len, double timeout_s,
                           sl_error *err) {
    loop_hub *hub = t->ctx;
    if (from < 0 || from >= hub->n) return err_set(err, SL_EINVAL, "rank %d: the transport has %d", from, hub->n);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_s >= 0) {
        long long ns = (long long)(timeout_s * 1e9) + until.tv_nsec;
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
    }
    const int q = from * hub->n + t->rank;
    pthread_mutex_lock(&hub->mu);
    int rc = 0;
    while (!hub->head[q] && rc != ETIMEDOUT)
        rc = timeout_s >= 0 ? pthread_cond_timedwait(&hub->cv, &hub->mu, &until) : pthread_cond_wait(&hub->cv, &hub->mu);
    loop_msg *m = hub->head[q];
    if (m && !(hub->head[q] = m->next)) hub->tail[q] = NULL;
    pthread_mutex_unlock(&hub->mu);
    if (!m)
        return err_set(err, SL_EIO, "rank %d (host %s) did not answer within %.1f s", from, t->ops->host(t, from),
                       timeout_s);
    if (*cap < m->len || !*buf) {
        void *nb = realloc(*buf, m->len ? m->len : 1);
        if (!nb) {
            free(m);
            return err_set(err, SL_ENOMEM, "out of memory");
        }
        *buf = nb;
        *cap = m->len ? m->len : 1;
    }
    memcpy(*buf, m->data, m->len);
    *len = m->len;
    free(m);
    return SL_OK;
}

static const char *loop_host(rx_transport *t, int r) {
    (void)t;
    (void)r;
    return "this process";
}

static const rx_transport_ops loop_ops = {"loop", loop_send, loop_recv, loop_host};

sl_status rx_loop_new(int n, rx_transport **ends) {
    loop_hub *hub = calloc(1, sizeof *hub);
    if (!hub) return SL_ENOMEM;
    hub->n = n;
    hub->head = calloc((size_t)n * n, sizeof *hub->head);
    hub->tail = calloc((size_t)n * n, sizeof *hub->tail);
    hub->drop_after = malloc((size_t)n * sizeof(int));
    hub->sends = calloc((size_t)n, sizeof(int));
    if (!hub->head || !hub->tail || !hub->drop_after || !hub->sends) goto fail;
    pthread_mutex_init(&hub->mu, NULL);
    pthread_cond_init(&hub->cv, NULL);
    for (int r = 0; r < n; r++) {
        hub->drop_after[r] = -1;
        ends[r] = calloc(1, sizeof **ends);
        if (!ends[r]) {
            hub->refs = r;
            rx_loop_free(ends, r);
            return SL_ENOMEM;
        }
        *ends[r] = (rx_transport){.ops = &loop_ops, .rank = r, .size = n, .ctx = hub};
    }
    hub->refs = n;
    return SL_OK;
fail:
    free(hub->head);
    free(hub->tail);
    free(hub->drop_after);
    free(hub->sends);
    free(hub);
    return SL_ENOMEM;
}

void rx_loop_free(rx_transport **ends, int n) {
    loop_hub *hub = n > 0 && ends[0] ? ends[0]->ctx : NULL;
    for (int r = 0; r < n; r++) free(ends[r]);
    if (!hub) return;
    for (int q = 0; q < hub->n * hub->n; q++)
        for (loop_msg *m = hub->head[q], *nx; m; m = nx) {
            nx = m->next;
            free(m);
        }
    pthread_mutex_destroy(&hub->mu);
    pthread_cond_destroy(&hub->cv);
    free(hub->head);
    free(hub->tail);
    free(hub->drop_after);
    free(hub->sends);
    free(hub);
}

void rx_loop_drop_after(rx_transport *end, int r, int after) {
    loop_hub *hub = end->ctx;
    pthread_mutex_lock(&hub->mu);
    hub->drop_after[r] = after;
    hub->sends[r] = 0;
    pthread_mutex_unlock(&hub->mu);
}
