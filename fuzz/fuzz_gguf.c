/*
 * fuzz_gguf.c — a GGUF file (import/gguf.c): header, metadata of every value type, tensor infos and
 * their ranges; one that parses has its config.json and tokenizer rebuilt from the metadata
 * (gguf_config_json, gguf_tokenizer_json), and is packed (sl_pack: the family's tensor mapping through
 * the arch table, every type's conversion) into a scratch folder when it is small.
 */
#include <sys/stat.h>

#include "fuzz.h"
#include "import/gguf.h"
#include "sluice.h"

static char out[96];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!out[0]) {
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/sluice-fuzz-gguf-%d", (int)getpid());
        mkdir(dir, 0700);
        snprintf(out, sizeof out, "%s/out.sluice", dir);
    }
    const char *path = fuzz_file(0, data, size);
    gguf_model m;
    sl_error err;
    if (gguf_open_model(path, &m, &err) != SL_OK) return 0;
    char *cfg = NULL, *tok = NULL, *tcfg = NULL;
    int ok = gguf_config_json(&m, &cfg, &err) == SL_OK;
    gguf_tokenizer_json(&m, &tok, &tcfg, &err);
    free(cfg), free(tok), free(tcfg);
    gguf_close_model(&m);
    if (ok && size < (1u << 20)) {
        sl_pack_params p = sl_pack_params_default();
        if (sl_pack(path, out, &p, &err) == SL_OK) unlink(out);
    }
    return 0;
}
