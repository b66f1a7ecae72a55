/*
 * test_gguf.c — the GGUF reader on bad input (src/import/gguf.c): a small valid qwen3moe GGUF written here
 * byte by byte packs; cut at every length of its header and at points of its data, and with random bytes
 * changed in its header, each pack either succeeds or fails with one message naming the file, never
 * crashes (run under `make asan FILTER=gguf`), and never leaves an output file behind. The conversions and
 * the families are tested against gguf-py in tests/py/test_gguf.py.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buf.h"
#include "family/arch/common.h"
#include "import/gguf.h"
#include "sluice.h"
#include "test.h"

static void kv_u32(buf *b, const char *k, uint32_t v) {
    str(b, k);
    u32(b, GGUF_U32);
    u32(b, v);
}
static void kv_f32(buf *b, const char *k, float v) {
    str(b, k);
    u32(b, GGUF_F32);
    put(b, &v, 4);
}

/* qwen3moe: vocab 8, hidden 32, 1 layer, 1 head of 32, 2 experts (1 per token) of width 32; F32. */
static buf tiny_gguf(size_t *header_len) {
    static const struct {
        const char *name;
        int nd;
        uint64_t ne[3];
    } T[] = {
        {"token_embd.weight", 2, {32, 8}},          {"output_norm.weight", 1, {32}},
        {"blk.0.attn_norm.weight", 1, {32}},        {"blk.0.ffn_norm.weight", 1, {32}},
        {"blk.0.attn_q.weight", 2, {32, 32}},       {"blk.0.attn_k.weight", 2, {32, 32}},
        {"blk.0.attn_v.weight", 2, {32, 32}},       {"blk.0.attn_output.weight", 2, {32, 32}},
        {"blk.0.attn_q_norm.weight", 1, {32}},      {"blk.0.attn_k_norm.weight", 1, {32}},
        {"blk.0.ffn_gate_inp.weight", 2, {32, 2}},  {"blk.0.ffn_gate_exps.weight", 3, {32, 32, 2}},
        {"blk.0.ffn_up_exps.weight", 3, {32, 32, 2}}, {"blk.0.ffn_down_exps.weight", 3, {32, 32, 2}},
    };
    const int nt = (int)(sizeof T / sizeof *T);
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)nt);
    u64(&b, 12);
    str(&b, "general.architecture");
    u32(&b, GGUF_STRING);
    str(&b, "qwen3moe");
    kv_u32(&b, "qwen3moe.block_count", 1);
    kv_u32(&b, "qwen3moe.context_length", 64);
    kv_u32(&b, "qwen3moe.embedding_length", 32);
    kv_u32(&b, "qwen3moe.attention.head_count", 1);
    kv_u32(&b, "qwen3moe.attention.head_count_kv", 1);
    kv_u32(&b, "qwen3moe.expert_count", 2);
    kv_u32(&b, "qwen3moe.expert_used_count", 1);
    kv_u32(&b, "qwen3moe.expert_feed_forward_length", 32);
    kv_f32(&b, "qwen3moe.rope.freq_base", 10000.0f);
    kv_f32(&b, "qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
    str(&b, "tokenizer.ggml.scores"); /* an array, read and kept */
    u32(&b, GGUF_ARRAY);
    u32(&b, GGUF_F32);
    u64(&b, 3);
    float sc[3] = {0.5f, 1.5f, 2.5f};
    put(&b, sc, sizeof sc);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        str(&b, T[i].name);
        u32(&b, (uint32_t)T[i].nd);
        uint64_t n = 1;
        for (int d = 0; d < T[i].nd; d++) {
            u64(&b, T[i].ne[d]);
            n *= T[i].ne[d];
        }
        u32(&b, 0); /* F32 */
        u64(&b, off);
        off += (n * 4 + 31) / 32 * 32;
    }
    *header_len = b.n;
    while (b.n % 32) put(&b, "", 1);
    for (uint64_t i = 0; i < off / 4; i++) {
        float v = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        put(&b, &v, 4);
    }
    return b;
}

static int pack_one(const char *src, const char *out, sl_error *err) {
    sl_pack_params p = sl_pack_params_default();
    p.hash_sources = 0;
    return sl_pack(src, out, &p, err);
}

TEST(gguf_tiny_model_packs) {
    size_t hl;
    buf b = tiny_gguf(&hl);
    const char *g = test_path("%s/tiny.gguf", test_tmpdir()), *o = test_path("%s/tiny.sluice", test_tmpdir());
    CHECK(!test_write(g, b.p, b.n));
    free(b.p);
    sl_error err = {0};
    CHECKF(pack_one(g, o, &err) == SL_OK, "%s", err.msg);
    CHECK(test_exists(o));
    gguf_file f;
    CHECKF(gguf_open_file(g, &f, &err) == SL_OK, "%s", err.msg);
    const gguf_kv *kv = gguf_kv_find(&f, "tokenizer.ggml.scores");
    int ok = kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_F32 && kv->n == 3 && ((float *)kv->arr)[2] == 2.5f &&
             f.n_tensors == 14 && f.t[11].ne[2] == 2 && f.data_off % 32 == 0;
    gguf_close_file(&f);
    CHECK(ok);
}

static void check_bad(const unsigned char *p, size_t n, const char *what, size_t at) {
    const char *g = test_path("%s/bad.gguf", test_tmpdir());
    const char *o = test_path("%s/bad.sluice", test_tmpdir());
    CHECK(!test_write(g, p, n));
    sl_error err = {0};
    sl_status st = pack_one(g, o, &err);
    if (st) {
        CHECKF(strstr(err.msg, "bad.gguf") && !strchr(err.msg, '\n'), "%s %zu: message '%s'", what, at, err.msg);
        CHECKF(!test_exists(o), "%s %zu: failed pack left %s", what, at, o);
    } else {
        remove(o);
    }
    CHECKF(!test_dir_has_prefix(test_tmpdir(), "bad.sluice.tmp"), "%s %zu: temporary file left", what, at);
}

TEST(gguf_truncated_at_every_header_byte) {
    size_t hl;
    buf b = tiny_gguf(&hl);
    for (size_t n = 0; n < hl + 40 && !test_failed(); n++) {
        check_bad(b.p, n, "cut at", n);
        const char *g = test_path("%s/bad.gguf", test_tmpdir());
        sl_error err = {0};
        gguf_file f;
        sl_status st = gguf_open_file(g, &f, &err);
        if (!st) gguf_close_file(&f);
        CHECKF(st != SL_OK, "cut at %zu (of %zu header bytes) opened", n, hl);
    }
    for (size_t n = hl + 40; n < b.n && !test_failed(); n += 997) check_bad(b.p, n, "cut at", n);
    free(b.p);
}

TEST(gguf_random_header_bytes) {
    size_t hl;
    buf b = tiny_gguf(&hl);
    unsigned char *m = malloc(b.n);
    unsigned s = test_seed();
    for (int k = 0; k < 400 && !test_failed(); k++) {
        memcpy(m, b.p, b.n);
        s = s * 1103515245u + 12345u;
        size_t at = (s >> 8) % hl;
        s = s * 1103515245u + 12345u;
        m[at] = (unsigned char)(s >> 16);
        if (k % 3 == 0) { /* also a large value in a length or count field */
            s = s * 1103515245u + 12345u;
            size_t a2 = (s >> 8) % (hl - 8);
            memset(m + a2, 0xff, 1 + (s >> 24) % 7);
        }
        check_bad(m, b.n, "byte changed at", at);
    }
    free(m);
    free(b.p);
}

/* Every family imports GGUF through its own table: a GGUF architecture name that maps back to it, and a metadata
 * hook (src/family/arch/<family>.c; nothing per family in import/). */
TEST(gguf_every_family_has_its_architecture) {
    int n = 0;
    for (int i = 0; arch_list[i]; i++, n++) {
        const arch_desc *a = arch_list[i];
        if (!a->gguf_arch && a->id == SL_ARCH_LONGCAT_FLASH) { /* llama.cpp has no architecture for it */
            n--;
            continue;
        }
        CHECKF(a->gguf_arch && a->gguf_config, "%s has no GGUF import", a->name);
        CHECKF(arch_by_gguf(a->gguf_arch) == a, "%s: '%s' maps elsewhere", a->name, a->gguf_arch);
        CHECKF(strstr(arch_gguf_list(), a->gguf_arch), "%s missing from '%s'", a->gguf_arch, arch_gguf_list());
    }
    CHECK(n >= 9);
}

/* Qwen3-Next / 3.5 GGUF store A = -exp(A_log), computed by the converter's exp (torch's), which may differ from
 * libm's expf in the last place; the import takes back the f32 A_log whose expf is A (model/deltanet.c computes
 * -expf(A_log)). On A one float step off expf of random A_log in [0, 1] (where every float A has a preimage),
 * every value comes back exact; and a non-negative A is refused (its index returned). */
TEST(gguf_a_log_round_trip) {
    enum { N = 4096 };
    float *a = malloc(N * sizeof *a), *x = malloc(N * sizeof *x);
    unsigned s = test_seed();
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        float e = expf((float)(s >> 8) / (float)(1u << 24));
        a[i] = -(i % 3 == 0 ? e : nextafterf(e, i % 3 == 1 ? INFINITY : 0.0f));
    }
    fam_config c;
    memset(&c, 0, sizeof c);
    c.lin_nv = N;
    int64_t bad = arch_gguf_a_log(&c, a, x);
    int exact = 0;
    for (int i = 0; i < N; i++) exact += -expf(x[i]) == a[i];
    a[7] = 0.0f;
    int64_t bad2 = arch_gguf_a_log(&c, a, x);
    free(a);
    free(x);
    CHECK(bad == -1);
    CHECKF(exact == N, "%d of %d exact", exact, N);
    CHECK(bad2 == 7);
}
