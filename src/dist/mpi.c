/*
 * mpi.c — the transport (remote.h) over Open MPI's MPI_COMM_WORLD: one endpoint per process, rank 0 the
 * backbone, ranks 1..N-1 the experts (docs/SCALE.md). Built when the Makefile finds Open MPI (SL_MPI; `make
 * MPI=0` leaves it out, and then rx_mpi_new answers "built without MPI").
 *
 * Errors come back as return codes (MPI_ERRORS_RETURN on the communicator), never as an abort inside MPI. No
 * call blocks inside MPI: a send is MPI_Isend then MPI_Test, a receive MPI_Iprobe then MPI_Recv of the size
 * found, each polled with a back-off (a short spin, then sleeps growing to 200 us, 2 ms after a second idle), so
 * a waiting rank does not burn a core as MPI's blocking calls do, and every wait has its timeout: a rank that
 * died or hangs is named (rank and host) instead of waited for. Under a default mpirun a rank that dies makes
 * mpirun stop the job itself and name the rank and node; the timeout covers a rank that stops answering.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/remote.h"
#include "util/clock.h"
#include "util/err.h"

int rx_mpi_launched(void) {
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v) v = getenv("PMI_SIZE");
    return v && atoi(v) > 1;
}

#ifdef SL_MPI
#include <mpi.h>

#define HOST_MAX 64

typedef struct mpi_ctx {
    char (*hosts)[HOST_MAX]; /* [size] */
} mpi_ctx;

/* One poll's pause: nothing for the first polls, then sleeps growing with the time waited. */
static void backoff(int i, double waited) {
    if (i < 64) return;
    long ns = waited < 0.01 ? 20000 : waited < 1.0 ? 200000 : 2000000;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static const char *mpi_host(rx_transport *t, int r) {
    mpi_ctx *c = t->ctx;
    return r >= 0 && r < t->size ? c->hosts[r] : "?";
}

static sl_status mpi_fail(rx_transport *t, int r, int rc, const char *what, sl_error *err) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, s, &n);
    return err_set(err, SL_EIO, "rank %d (host %s): %s%s%s", r, mpi_host(t, r), what, *s ? ": " : "", s);
}

static sl_status mpi_send(rx_transport *t, int to, const void *buf, size_t len, double timeout_s, sl_error *err) {
    if (len > (size_t)0x7fffffff) return err_set(err, SL_ERANGE, "rank %d: a message of %zu bytes", to, len);
    MPI_Request q;
    int rc = MPI_Isend(buf, (int)len, MPI_BYTE, to, 0, MPI_COMM_WORLD, &q), done = 0;
    if (rc != MPI_SUCCESS) return mpi_fail(t, to, rc, "cannot send", err);
    const double t0 = clk_now_s();
    for (int i = 0; !done; i++) {
        if ((rc = MPI_Test(&q, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return mpi_fail(t, to, rc, "send failed", err);
        double w = clk_now_s() - t0;
        if (!done && timeout_s >= 0 && w > timeout_s) {
            char what[96];
            snprintf(what, sizeof what, "did not take a message within %.1f s", timeout_s);
            return mpi_fail(t, to, MPI_SUCCESS, what, err);
        }
        if (!done) backoff(i, w);
    }
    return SL_OK;
}

static sl_status mpi_recv(rx_transport *t, int from, void **buf, size_t *cap, size_t *len, double timeout_s,
                          sl_error *err) {
    MPI_Status s;
    int rc, found = 0, n = 0;
    const double t0 = clk_now_s();
    for (int i = 0; !found; i++) {
        if ((rc = MPI_Iprobe(from, 0, MPI_COMM_WORLD, &found, &s)) != MPI_SUCCESS)
            return mpi_fail(t, from, rc, "receive failed", err);
        double w = clk_now_s() - t0;
        if (!found && timeout_s >= 0 && w > timeout_s) {
            char what[96];
            snprintf(what, sizeof what, "did not answer within %.1f s", timeout_s);
            return mpi_fail(t, from, MPI_SUCCESS, what, err);
        }
        if (!found) backoff(i, w);
    }
    if ((rc = MPI_Get_count(&s, MPI_BYTE, &n)) != MPI_SUCCESS || n < 0) return mpi_fail(t, from, rc, "bad message", err);
    if (*cap < (size_t)n || !*buf) {
        void *nb = realloc(*buf, n ? (size_t)n : 1);
        if (!nb) return err_set(err, SL_ENOMEM, "out of memory for a message of %d bytes from rank %d", n, from);
        *buf = nb;
        *cap = n ? (size_t)n : 1;
    }
    if ((rc = MPI_Recv(*buf, n, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
        return mpi_fail(t, from, rc, "receive failed", err);
    *len = (size_t)n;
    return SL_OK;
}

static const rx_transport_ops mpi_ops = {"mpi", mpi_send, mpi_recv, mpi_host};

sl_status rx_mpi_new(int *argc, char ***argv, rx_transport **out, sl_error *err) {
    *out = NULL;
    int provided = 0, rank = 0, size = 0, n = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return err_set(err, SL_EIO, "MPI_Init failed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rx_transport *t = calloc(1, sizeof *t);
    mpi_ctx *c = calloc(1, sizeof *c);
    char me[MPI_MAX_PROCESSOR_NAME] = "";
    if (!t || !c || !(c->hosts = calloc((size_t)size, HOST_MAX))) {
        free(c);
        free(t);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    MPI_Get_processor_name(me, &n);
    char mine[HOST_MAX] = ""; /* the name cut to HOST_MAX - 1 bytes */
    memcpy(mine, me, strnlen(me, HOST_MAX - 1));
    int rc = MPI_Allgather(mine, HOST_MAX, MPI_CHAR, c->hosts, HOST_MAX, MPI_CHAR, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(c->hosts);
        free(c);
        free(t);
        return err_set(err, SL_EIO, "MPI_Allgather of the host names failed");
    }
    *t = (rx_transport){.ops = &mpi_ops, .rank = rank, .size = size, .ctx = c};
    *out = t;
    return SL_OK;
}

void rx_mpi_end(rx_transport *t, int ok) {
    if (!t) return;
    if (!ok) MPI_Abort(MPI_COMM_WORLD, 1);
    if (t->rank == 0) {
        const rx_head h = {.magic = RX_MAGIC, .kind = RX_QUIT};
        for (int r = 1; r < t->size; r++) mpi_send(t, r, &h, sizeof h, 5.0, NULL);
    }
    MPI_Finalize();
    mpi_ctx *c = t->ctx;
    free(c->hosts);
    free(c);
    free(t);
}

#else

sl_status rx_mpi_new(int *argc, char ***argv, rx_transport **out, sl_error *err) {
    (void)argc;
    (void)argv;
    *out = NULL;
    return err_set(err, SL_EUNSUPPORTED, "built without MPI (install libopenmpi-dev and rebuild; docs/SCALE.md)");
}

void rx_mpi_end(rx_transport *t, int ok) {
    (void)t;
    (void)ok;
}

#endif
