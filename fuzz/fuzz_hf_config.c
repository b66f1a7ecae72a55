/* fuzz_hf_config.c — config.json of every family (family/hf_config.c, the arch tables' config hooks). */
#include "family/hf_config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_str(data, size);
    fam_config c;
    sl_error err;
    hf_parse_config(s, "config.json", &c, &err);
    free(s);
    return 0;
}
