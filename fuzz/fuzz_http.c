/*
 * fuzz_http.c — whole HTTP requests against a real `sluice serve` (serve/http.c over libmicrohttpd, the
 * scheduler, the three APIs, /metrics, /health, the page) on the demo model, started once in-process on a
 * loopback port with an API key and a 64-token context (so that any generation ends quickly). Each input
 * is sent as it is on a new connection (write side shut after it) and the answer read until the server
 * closes or 5 s pass; a server that stops answering a well-formed request afterwards is a finding.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "fuzz.h"
#include "serve/serve.h"
#include "sluice.h"

static srv_server *srv;
static int port;

static void start(void) {
    char p[4096];
    snprintf(p, sizeof p, "%s/models/demo.sluice", FUZZ_ROOT);
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1;
    mp.n_threads = 1;
    sl_model *m = NULL;
    sl_tokenizer *tok = NULL;
    sl_error err;
    if (sl_model_open(p, &mp, &m, &err) || sl_tokenizer_load(p, &tok, &err)) { fprintf(stderr, "fuzz: %s\n", err.msg); abort(); }
    srv_params sp = srv_params_default();
    sp.port = 0;
    sp.api_key = "k";
    sp.max_body = 64 << 10;
    sp.sched.n_ctx = 64;
    sp.sched.max_active = 4;
    sp.sched.state_cache_bytes = 8 << 20;
    srv_model_entry me = {"demo", m, tok};
    if (srv_server_new(&sp, &me, 1, &srv, &err)) { fprintf(stderr, "fuzz: %s\n", err.msg); abort(); }
    port = srv_server_port(srv);
}

/* Sends req, reads the answer; returns its bytes (-1: no connection). */
static long exchange(const void *req, size_t n) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    long got = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        const char *s = req;
        size_t left = n;
        while (left) {
            ssize_t w = send(fd, s, left, MSG_NOSIGNAL);
            if (w <= 0) break;
            s += w, left -= (size_t)w;
        }
        shutdown(fd, SHUT_WR);
        char buf[16384];
        got = 0;
        ssize_t r;
        while ((r = recv(fd, buf, sizeof buf, 0)) > 0 || (r < 0 && errno == EINTR))
            if (r > 0) got += r;
    }
    close(fd);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!srv) start();
    exchange(data, size);
    static unsigned k;
    if (++k % 64 == 0) { /* still serving? */
        static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        if (exchange(health, sizeof health - 1) <= 0) { fprintf(stderr, "the server stopped answering\n"); abort(); }
    }
    return 0;
}
