/*
 * test_server_io.c — an I/O error on the model file while serving (issue 14 §2): a real server in-process
 * (serve/http.c) on the demo model streamed through a small cache, its reads going through the
 * fault-injecting engine (stream/io_fault.c). The request whose expert read fails ends with a clear
 * error naming the I/O failure; the next request that needs the same experts reads them again and gets
 * exactly the answer a fault-free server gives, and so does one running beside it. A single fault
 * inside a batched step is absorbed (the step's items are evaluated again one by one).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "serve/serve.h"
#include "stream/io.h"
#include "test.h"

#define DEMO "models/demo.sluice"

typedef struct {
    int port;
    const char *body;
    char *resp; /* whole HTTP response, malloc'ed */
    pthread_t th;
} call;

static void *do_call(void *arg) {
    call *c = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t cap = 1 << 16, n = 0;
    c->resp = calloc(1, cap);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        char req[4096];
        int rl = snprintf(req, sizeof req,
                          "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                          strlen(c->body), c->body);
        ssize_t sent;
        while ((sent = send(fd, req, (size_t)rl, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
        if (sent == rl) {
            ssize_t r;
            /* a signal may interrupt recv (the runner's, the library's threads'): not the end */
            while (n + 1 < cap && ((r = recv(fd, c->resp + n, cap - 1 - n, 0)) > 0 || (r < 0 && errno == EINTR)))
                if (r > 0) n += (size_t)r;
        }
    }
    if (fd >= 0) close(fd);
    return NULL;
}

static int status_of(const char *resp) { return strncmp(resp, "HTTP/1.", 7) ? 0 : atoi(resp + 9); }

/* The "text" of a completion response, or the error message ("ERR: ..."), malloc'ed. */
static char *answer(const char *resp) {
    const char *b = strstr(resp, "\r\n\r\n");
    cJSON *j = b ? cJSON_Parse(b + 4) : NULL;
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ch, "text");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
    char *out = NULL;
    if (cJSON_IsString(t)) out = strdup(t->valuestring);
    else if (cJSON_IsString(m) && (out = malloc(strlen(m->valuestring) + 6))) sprintf(out, "ERR: %s", m->valuestring);
    cJSON_Delete(j);
    return out ? out : strdup("(no answer)");
}

static srv_server *serve(sl_model *m, sl_tokenizer *tok) {
    srv_params sp = srv_params_default();
    sp.port = 0;
    srv_model_entry me = {"demo", m, tok};
    srv_server *s = NULL;
    sl_error err;
    if (srv_server_new(&sp, &me, 1, &s, &err)) fprintf(stderr, "    server: %s\n", err.msg);
    return s;
}

static sl_model *open_streamed(const io_fault_cfg *fault) {
    sl_model_params mp = sl_model_params_default();
    mp.cache_bytes = 1; /* the smallest cache: nearly every expert is read */
    mp.prefetch = -1;
    mp.n_threads = 2;
    sl_model *m = NULL;
    sl_error err = {0};
    if (model_open_ex(test_path(DEMO), &mp, fault, &m, &err)) fprintf(stderr, "    open: %s\n", err.msg);
    return m;
}

static const char *const body_a = "{\"prompt\": \"And it came to pass\", \"max_tokens\": 12, \"temperature\": 0}";
static const char *const body_b = "{\"prompt\": \"In the beginning God\", \"max_tokens\": 12, \"temperature\": 0}";

TEST(server_io_error_fails_one_request_then_retries) {
    sl_tokenizer *tok = NULL;
    sl_error err;
    CHECK(sl_tokenizer_load(test_path(DEMO), &tok, &err) == SL_OK);
    /* the fault-free answers */
    sl_model *good = open_streamed(NULL);
    CHECK(good);
    srv_server *gs = serve(good, tok);
    CHECK(gs);
    call ra = {srv_server_port(gs), body_a, NULL, 0}, rb = {srv_server_port(gs), body_b, NULL, 0};
    do_call(&ra);
    do_call(&rb);
    srv_server_free(gs);
    sl_model_close(good);
    char *want_a = answer(ra.resp), *want_b = answer(rb.resp);
    CHECKF(status_of(ra.resp) == 200 && status_of(rb.resp) == 200, "fault-free: %d %d", status_of(ra.resp),
           status_of(rb.resp));
    free(ra.resp);
    free(rb.resp);

    /* the first two expert reads fail: the step's, then the one of A evaluated again on its own (the
     * scheduler re-runs each item of a failed step alone to find whose it is, serve/sched.c, so a fault
     * that does not come back is absorbed: tested below too) */
    io_fault_cfg fault;
    memset(&fault, 0, sizeof fault);
    fault.fail_every = 1;
    fault.max_faults = 2;
    sl_model *m = open_streamed(&fault);
    CHECK(m);
    srv_server *s = serve(m, tok);
    CHECK(s);
    int port = srv_server_port(s);
    call a = {port, body_a, NULL, 0};
    do_call(&a); /* alone, so that the fault is surely its own */
    char *got_a = answer(a.resp);
    CHECKF(status_of(a.resp) >= 500 && strstr(got_a, "ERR: ") && (strstr(got_a, "I/O") || strstr(got_a, "read")),
           "the failed request: HTTP %d, '%s'", status_of(a.resp), got_a);
    /* then A again beside B: both served, A's experts read again, answers exactly the fault-free ones */
    call a2 = {port, body_a, NULL, 0}, b = {port, body_b, NULL, 0};
    pthread_create(&a2.th, NULL, do_call, &a2);
    pthread_create(&b.th, NULL, do_call, &b);
    pthread_join(a2.th, NULL);
    pthread_join(b.th, NULL);
    char *got_a2 = answer(a2.resp), *got_b = answer(b.resp);
    CHECKF(status_of(a2.resp) == 200 && !strcmp(got_a2, want_a), "A retried: HTTP %d '%s' (fault-free '%s')",
           status_of(a2.resp), got_a2, want_a);
    CHECKF(status_of(b.resp) == 200 && !strcmp(got_b, want_b), "B: HTTP %d '%s' (fault-free '%s')",
           status_of(b.resp), got_b, want_b);
    srv_server_free(s);
    sl_model_close(m);

    /* one fault in a step beside another request: both answers exact */
    fault.fail_every = 5;
    fault.max_faults = 1;
    m = open_streamed(&fault);
    CHECK(m);
    s = serve(m, tok);
    CHECK(s);
    call a3 = {srv_server_port(s), body_a, NULL, 0}, b3 = {srv_server_port(s), body_b, NULL, 0};
    pthread_create(&a3.th, NULL, do_call, &a3);
    pthread_create(&b3.th, NULL, do_call, &b3);
    pthread_join(a3.th, NULL);
    pthread_join(b3.th, NULL);
    char *got_a3 = answer(a3.resp), *got_b3 = answer(b3.resp);
    CHECKF(status_of(a3.resp) == 200 && !strcmp(got_a3, want_a) && status_of(b3.resp) == 200 && !strcmp(got_b3, want_b),
           "one fault: A HTTP %d '%s', B HTTP %d '%s'", status_of(a3.resp), got_a3, status_of(b3.resp), got_b3);
    srv_server_free(s);
    sl_model_close(m);
    free(a3.resp), free(b3.resp), free(got_a3), free(got_b3);
    sl_tokenizer_free(tok);
    free(a.resp), free(a2.resp), free(b.resp);
    free(got_a), free(got_a2), free(got_b), free(want_a), free(want_b);
}
