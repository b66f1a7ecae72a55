/*
 * fuzz_profile.c — a routing profile (`sluice profile`, read by sl_model_open's pin_profile: engine/experts.c)
 * for the demo model, opened streaming so that its hottest experts are pinned.
 */
#include "fuzz.h"
#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char p[4096];
    snprintf(p, sizeof p, "%s/models/demo.sluice", FUZZ_ROOT);
    sl_model_params mp = sl_model_params_default();
    mp.n_threads = 1;
    mp.cache_bytes = 4u << 20;
    mp.pin_profile = fuzz_file(0, data, size);
    sl_model *m = NULL;
    sl_error err;
    if (sl_model_open(p, &mp, &m, &err) == SL_OK) sl_model_close(m);
    return 0;
}
