/*
 * fuzz_checkpoint.c — a Hugging Face checkpoint directory as import sees it (import/hf.c): the input is
 * model.safetensors.index.json, a NUL byte, then the one shard it may name, model-00001-of-00001.safetensors;
 * config.json is the qwen3_moe fixture's. hf_open checks the index against the shards and every tensor
 * against the architecture's table; a checkpoint that opens is read tensor by tensor.
 */
#include <sys/stat.h>

#include "fuzz.h"
#include "import/hf.h"

static char dir[64];

static void put(const char *name, const void *d, size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n)) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/sluice-fuzz-ckpt-%d", (int)getpid());
        mkdir(dir, 0700);
        size_t n;
        char *cfg = fuzz_repo_file("tests/data/qwen3_moe/config.json", &n);
        put("config.json", cfg, n);
        free(cfg);
    }
    const uint8_t *z = memchr(data, 0, size);
    size_t ilen = z ? (size_t)(z - data) : size;
    put("model.safetensors.index.json", data, ilen);
    put("model-00001-of-00001.safetensors", z ? z + 1 : data, z ? size - ilen - 1 : 0);
    hf_ckpt *ck = NULL;
    sl_error err;
    if (hf_open(dir, &ck, &err) == SL_OK) {
        for (int i = 0; i < hf_n_tensors(ck); i++) {
            const hf_tensor *t = hf_tensor_at(ck, i);
            size_t bytes = 4;
            for (int d = 0; d < t->ndim; d++) bytes *= (size_t)t->shape[d];
            if (bytes > (64u << 20)) continue;
            void *buf = malloc(bytes ? bytes : 1);
            if (buf) hf_read(ck, t, DT_F32, buf, &err);
            free(buf);
        }
        hf_close(ck);
    }
    return 0;
}
