/*
 * fuzz_state.c — saved conversation state (sl_session_load, the state format of docs/FORMAT.md) against
 * the demo model: a blob that loads must leave a session that evaluates a token; one that does not load
 * must leave the session as it was (it evaluates, too).
 */
#include "fuzz.h"
#include "sluice.h"

static sl_model *m;

static void open_model(void) {
    sl_error err;
    if (!m) {
        char p[4096];
        snprintf(p, sizeof p, "%s/models/demo.sluice", FUZZ_ROOT);
        sl_model_params mp = sl_model_params_default();
        mp.resident = 1;
        mp.n_threads = 1;
        if (sl_model_open(p, &mp, &m, &err) != SL_OK) { fprintf(stderr, "fuzz: %s\n", err.msg); abort(); }
    }
}

/* FUZZ_STATE_SEED=FILE: write a real state blob (5 tokens evaluated) to FILE and exit: the seed's origin. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *seed = getenv("FUZZ_STATE_SEED");
    if (!seed) return 0;
    open_model();
    sl_session *s = NULL;
    int32_t ids[5] = {10, 200, 3000, 7, 42};
    void *blob = NULL;
    size_t len = 0;
    FILE *f;
    if (sl_session_new(m, 256, &s) || sl_session_eval(s, ids, 5, NULL, 0) || sl_session_save(s, &blob, &len) ||
        !(f = fopen(seed, "wb")) || fwrite(blob, 1, len, f) != len || fclose(f))
        abort();
    exit(0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    open_model();
    sl_session *s = NULL;
    if (sl_session_new(m, 256, &s) != SL_OK) abort();
    sl_session_load(s, data, size);
    int32_t id = 42;
    if (sl_session_eval(s, &id, 1, NULL, 0) != SL_OK && sl_session_n_past(s) < 256) abort();
    sl_session_free(s);
    return 0;
}
