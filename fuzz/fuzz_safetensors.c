/* fuzz_safetensors.c — a safetensors file: its 8-byte length, JSON header and offsets (import/safetensors.c). */
#include "fuzz.h"
#include "import/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    sl_error err;
    if (st_open(fuzz_file(0, data, size), &f, &err) == SL_OK) {
        st_find(&f, "model.embed_tokens.weight");
        st_close(&f);
    }
    return 0;
}
