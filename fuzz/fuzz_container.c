/*
 * fuzz_container.c — the .sluice container (format/container.c, docs/FORMAT.md) and the model open that
 * binds it (engine/open.c, engine/backbone.c). The template is a packed fixture (build/fuzz/template.sluice, made by
 * `make fuzz`). Both checksummed parts are fuzzed past their checksums: input byte 0 picks the mode,
 *   even: the rest is the manifest (JSON), appended to the template, header fields and checksums fixed;
 *   odd:  the rest overwrites the header's fields (bytes 16..127: sizes, offsets, expert layout) and the
 *         header checksum is recomputed, the template's manifest kept.
 * A container that opens is then opened as a model (resident), which checks every tensor against the
 * config and reads the experts.
 */
#include <xxhash.h>

#include "format/container.h"
#include "fuzz.h"
#include "sluice.h"

static uint8_t *tmpl;
static size_t tmpl_len;

static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tmpl) tmpl = (uint8_t *)fuzz_repo_file("build/fuzz/template.sluice", &tmpl_len);
    if (size < 1) return 0;
    size_t cap = tmpl_len + size + SLC_ALIGN;
    uint8_t *b = calloc(1, cap), *in = (uint8_t *)data + 1;
    size_t n = size - 1, len = tmpl_len;
    if (!b) abort();
    memcpy(b, tmpl, tmpl_len);
    if (data[0] % 2 == 0) { /* a new manifest at the end of the file */
        uint64_t off = (tmpl_len + 63) / 64 * 64;
        memcpy(b + off, in, n);
        len = off + n;
        put64(b + 24, off);
        put64(b + 32, n);
        put64(b + 40, XXH3_64bits(in, n));
        put64(b + 16, len);
    } else {
        memcpy(b + 16, in, n < 112 ? n : 112);
        if (get64(b + 16) > cap) put64(b + 16, len); /* keep the stated size usable */
        len = get64(b + 16) > len ? len : get64(b + 16) < SLC_HEADER_BYTES ? len : get64(b + 16);
    }
    put64(b + SLC_HEADER_BYTES - 8, XXH3_64bits(b, SLC_HEADER_BYTES - 8));
    const char *path = fuzz_file(0, b, len);
    slc_file f;
    sl_error err;
    if (slc_open(path, &f, &err) == SL_OK) {
        slc_close(&f);
        sl_model_params p = sl_model_params_default();
        p.resident = 1;
        p.n_threads = 1;
        sl_model *m = NULL;
        if (sl_model_open(path, &p, &m, &err) == SL_OK) sl_model_close(m);
    }
    free(b);
    return 0;
}
