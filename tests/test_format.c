/*
 * test_format.c — import, pack, container read-back, verify, and every bad input the foundation
 * issue lists (each: non-zero status, a message naming the file and the tensor, no output left).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nettle/sha2.h>
#include <xxhash.h>

#include "family/arch.h"
#include "family/hf_config.h"
#include "family/rope.h"
#include "family/tensors.h"
#include "format/container.h"
#include "format/pack.h"
#include "format/synth.h"
#include "import/hf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "sluice.h"
#include "test.h"
#include "util/fileio.h"

/* ---- helpers ---- */

/* Rewrites a safetensors header through fn; data bytes are kept as they are. */
static int st_rewrite(const char *path, void (*fn)(cJSON *root, void *ctx), void *ctx) {
    size_t n;
    char *b = test_read(path, &n);
    if (!b || n < 8) return -1;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (uint8_t)b[i];
    cJSON *root = cJSON_ParseWithLength(b + 8, hl);
    fn(root, ctx);
    char *js = cJSON_PrintUnformatted(root);
    size_t jl = strlen(js), nl = (jl + 7) / 8 * 8;
    size_t total = 8 + nl + (n - 8 - hl);
    char *o = malloc(total);
    for (int i = 0; i < 8; i++) o[i] = (char)(nl >> (8 * i));
    memcpy(o + 8, js, jl);
    memset(o + 8 + jl, ' ', nl - jl);
    memcpy(o + 8 + nl, b + 8 + hl, n - 8 - hl);
    int rc = test_write(path, o, total);
    free(o);
    free(js);
    free(b);
    cJSON_Delete(root);
    return rc;
}

static int edit_config(const char *dir, void (*fn)(cJSON *root, void *ctx), void *ctx) {
    char *p = test_path("%s/config.json", dir);
    char *txt = test_read(p, NULL);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    fn(j, ctx);
    char *out = cJSON_Print(j);
    int rc = test_write(p, out, strlen(out));
    free(out);
    cJSON_Delete(j);
    return rc;
}

static int n_case;

/* A fresh copy of a fixture to break. */
static const char *scratch_copy(const char *fixture) {
    char *d = test_path("%s/bad%d-%s", test_tmpdir(), n_case++, fixture);
    static char keep[8][512];
    static int k;
    char *r = keep[k++ & 7];
    snprintf(r, 512, "%s", d);
    if (test_copy_dir(test_path("tests/data/%s", fixture), r)) return NULL;
    return r;
}

/* Packs dir, expecting failure with a status and message containing each of the needles. */
static void expect_pack_fail(const char *dir, sl_status want, const char *n1, const char *n2) {
    const char *out = test_path("%s/out.sluice", dir);
    sl_error err = {0};
    sl_pack_params p = sl_pack_params_default();
    sl_status st = sl_pack(dir, out, &p, &err);
    CHECKF(st != SL_OK, "pack of %s should fail", dir);
    CHECKF(want == SL_OK || st == want, "status %d (%s), want %d; message: %s", st, sl_strerror(st), want, err.msg);
    CHECKF(!n1 || strstr(err.msg, n1), "message lacks '%s': %s", n1, err.msg);
    CHECKF(!n2 || strstr(err.msg, n2), "message lacks '%s': %s", n2, err.msg);
    CHECKF(strchr(err.msg, '\n') == NULL, "message must be one line: %s", err.msg);
    CHECK(!test_exists(out));
    CHECKF(!test_dir_has_prefix(dir, "out.sluice"), "a temporary output was left in %s", dir);
}

/* ---- pack and read back ---- */

FIXTURE_TEST(pack_roundtrip_every_tensor) {
    slc_file f;
    OPEN_FIXTURE(arg, NULL, NULL, &f);
    sl_error err = {0};
    hf_ckpt *ck = NULL;
    if (hf_open(test_path("tests/data/%s", arg), &ck, &err)) {
        slc_close(&f);
        CHECKF(0, "%s", err.msg);
    }
    int bad = 0, checked = 0;
    uint8_t *a = malloc(f.h.expert_stride > (1u << 22) ? f.h.expert_stride : (1u << 22));
    uint8_t *b = malloc(f.h.expert_stride > (1u << 22) ? f.h.expert_stride : (1u << 22));
    for (int i = 0; i < f.n_tensors && !bad; i++) {
        const hf_tensor *t = hf_find(ck, f.t[i].name);
        if (!t || hf_read(ck, t, f.t[i].dtype, a, &err) || pread(f.fd, b, f.t[i].size, (off_t)f.t[i].off) != (ssize_t)f.t[i].size ||
            memcmp(a, b, f.t[i].size)) {
            test_fail(__FILE__, __LINE__, "tensor %s differs from its source", f.t[i].name);
            bad = 1;
        }
        checked++;
    }
    for (uint32_t s = 0; s < f.h.n_moe_layers && !bad; s++)
        for (uint32_t e = 0; e < f.h.n_experts && !bad; e++)
            for (int p = 0; p < f.n_parts && !bad; p++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp.experts.%u.%s", f.moe_layers[s], e, arch_expert_part_name(&f.cfg, p));
                const hf_tensor *t = hf_find(ck, nm);
                uint64_t off = slc_expert_offset(&f, (int)s, (int)e) + f.parts[p].off;
                if (!t || hf_read(ck, t, f.parts[p].dtype, a, &err) ||
                    pread(f.fd, b, f.parts[p].size, (off_t)off) != (ssize_t)f.parts[p].size || memcmp(a, b, f.parts[p].size)) {
                    test_fail(__FILE__, __LINE__, "expert %s differs from its source", nm);
                    bad = 1;
                }
                checked++;
            }
    free(a);
    free(b);
    int expected_experts = (int)(f.h.n_moe_layers * f.h.n_experts * (uint32_t)f.n_parts);
    int nt = f.n_tensors;
    uint64_t stride = f.h.expert_stride, eoff = f.h.expert_off;
    hf_close(ck);
    slc_close(&f);
    CHECK(!bad);
    CHECK(checked == nt + expected_experts);
    CHECK(stride % 4096 == 0 && eoff % 4096 == 0);
}

FIXTURE_TEST(verify_source_passes) {
    const char *path = test_packed(arg);
    CHECK(path);
    sl_error err = {0};
    CHECKF(sl_verify(path, test_path("tests/data/%s", arg), NULL, NULL, &err) == SL_OK, "%s", err.msg);
}

static void flip_bit(const char *path, uint64_t off) {
    size_t n;
    char *b = test_read(path, &n);
    b[off] ^= 0x10;
    test_write(path, b, n);
    free(b);
}

/* A copy of the container src at <tmp>/name with a bit of byte off flipped (flip_bit): its path, NULL when the copy
 * failed. */
static const char *flipped_copy(const char *src, const char *name, uint64_t off) {
    const char *p = test_path("%s/%s", test_tmpdir(), name);
    if (test_copy_file(src, p)) return NULL;
    flip_bit(p, off);
    return p;
}

TEST(verify_catches_flipped_expert_bit) {
    const char *src;
    slc_file f;
    OPEN_FIXTURE("qwen3_next", &src, NULL, &f);
    uint64_t off = slc_expert_offset(&f, 1, 5) + 1000; /* slot 1 = model layer 2 (layer 1 is dense) */
    int layer = f.moe_layers[1];
    slc_close(&f);
    const char *p = flipped_copy(src, "flip-expert.sluice", off);
    CHECK(p);
    sl_error err = {0};
    sl_status st = sl_verify(p, NULL, NULL, NULL, &err);
    CHECKF(st == SL_ECHECKSUM, "status %d: %s", st, err.msg);
    char want[64];
    snprintf(want, sizeof want, "layer %d, expert 5", layer);
    CHECKF(strstr(err.msg, want) && strstr(err.msg, "offset"), "%s", err.msg);
    st = sl_verify(p, "tests/data/qwen3_next", NULL, NULL, &err);
    CHECKF(st == SL_ECHECKSUM, "status %d: %s", st, err.msg);
    sl_model *m = NULL;
    sl_model_params mp = sl_model_params_default();
    mp.resident = 1;
    CHECK(sl_model_open(p, &mp, &m, &err) == SL_ECHECKSUM && m == NULL);
    CHECKF(strstr(err.msg, want), "%s", err.msg);
}

/* The tokenizer's files in a container are checked on every load, not only by verify: a flipped bit
 * in tokenizer.json is SL_ECHECKSUM naming it (it used to give different text, exit 0). */
TEST(tokenizer_load_catches_flipped_blob_bit) {
    slc_file f;
    sl_error err = {0};
    CHECK(slc_open("models/demo.sluice", &f, &err) == SL_OK);
    const slc_blob *b = slc_find_blob(&f, "tokenizer.json");
    uint64_t off = b ? b->off + b->size / 2 : 0;
    slc_close(&f);
    CHECK(off);
    const char *p = flipped_copy("models/demo.sluice", "flip-blob.sluice", off);
    CHECK(p);
    sl_tokenizer *tok = NULL;
    sl_status st = sl_tokenizer_load(p, &tok, &err);
    CHECKF(st == SL_ECHECKSUM && !tok && strstr(err.msg, "'tokenizer.json'"), "status %d: %s", st, err.msg);
    sl_tokenizer_free(tok);
}

TEST(verify_catches_flipped_backbone_bit) {
    const char *src;
    slc_file f;
    OPEN_FIXTURE("qwen3_5_moe", &src, NULL, &f);
    const slc_tensor *t = slc_find(&f, "layers.1.linear_attn.in_proj_z");
    uint64_t off = t ? t->off + 17 : 0;
    slc_close(&f);
    CHECK(off);
    const char *p = flipped_copy(src, "flip-backbone.sluice", off);
    CHECK(p);
    sl_error err = {0};
    sl_status st = sl_verify(p, NULL, NULL, NULL, &err);
    CHECKF(st == SL_ECHECKSUM && strstr(err.msg, "layers.1.linear_attn.in_proj_z"), "%d %s", st, err.msg);
}

TEST(verify_source_catches_different_source) {
    /* a container that is internally consistent but was packed from other weights: the same model with one bit
     * of its last tensor flipped */
    const char *d = scratch_copy("qwen3_next");
    CHECK(d);
    const char *st_path = test_path("%s/model.safetensors", d);
    flip_bit(st_path, (uint64_t)test_file_size(st_path) - 3);
    const char *p = test_packed("qwen3_next"); /* after test_path: its buffer may be reused */
    CHECK(p);
    sl_error err = {0};
    sl_status st = sl_verify(p, d, NULL, NULL, &err);
    CHECKF(st == SL_EMISMATCH && strstr(err.msg, "differs from the source"), "%d %s", st, err.msg);
}

TEST(container_rejects_truncation_and_garbage) {
    const char *src = test_packed("qwen3_moe");
    CHECK(src);
    size_t n;
    char *b = test_read(src, &n);
    const char *p = test_path("%s/trunc.sluice", test_tmpdir());
    test_write(p, b, n - 100);
    sl_error err = {0};
    slc_file f;
    CHECK(slc_open(p, &f, &err) == SL_EFORMAT && strstr(err.msg, "truncated"));
    memset(b, 'x', 64);
    test_write(p, b, n);
    CHECK(slc_open(p, &f, &err) == SL_EFORMAT && strstr(err.msg, "not a .sluice"));
    free(b);
}

TEST(pack_quant_modes) {
    sl_error err = {0};
    const char *out = test_path("%s/bf16.sluice", test_tmpdir());
    sl_pack_params p = sl_pack_params_default();
    p.quant = SL_QUANT_BF16;
    CHECKF(sl_pack("tests/data/qwen3_next", out, &p, &err) == SL_OK, "%s", err.msg);
    slc_file f;
    CHECK(slc_open(out, &f, &err) == SL_OK);
    int ok = f.parts[0].dtype == DT_BF16 && slc_find(&f, "layers.0.self_attn.q_proj") == NULL &&
             slc_find(&f, "layers.2.self_attn.q_proj")->dtype == DT_BF16 && slc_find(&f, "norm")->dtype == DT_F32 &&
             slc_find(&f, "layers.0.linear_attn.A_log")->dtype == DT_F32;
    slc_close(&f);
    CHECK(ok);
    CHECKF(sl_verify(out, "tests/data/qwen3_next", NULL, NULL, &err) == SL_OK, "%s", err.msg);
    p.quant = SL_QUANT_F32;
    out = test_path("%s/f32.sluice", test_tmpdir());
    CHECKF(sl_pack("tests/data/qwen3_moe", out, &p, &err) == SL_OK, "%s", err.msg);
    CHECK(slc_open(out, &f, &err) == SL_OK);
    ok = f.parts[2].dtype == DT_F32 && slc_find(&f, "embed_tokens")->dtype == DT_F32;
    slc_close(&f);
    CHECK(ok);
}

TEST(pack_keeps_source_dtypes) {
    const char *want[][2] = {{"qwen3_moe", "f16"}, {"qwen3_5_fused", "bf16"}, {"qwen3_next_fp8", "f32"}, {"qwen3_next", "f32"}};
    for (int i = 0; i < 4; i++) {
        slc_file f;
        OPEN_FIXTURE(want[i][0], NULL, NULL, &f);
        int ok = !strcmp(dt_name(f.parts[0].dtype), want[i][1]);
        slc_close(&f);
        CHECKF(ok, "%s experts stored as %s", want[i][0], want[i][1]);
    }
}

TEST(info_json_describes_container) {
    const char *p = test_packed("qwen3_next");
    CHECK(p);
    char *js = NULL;
    sl_error err = {0};
    CHECK(sl_info_json(p, &js, &err) == SL_OK);
    cJSON *j = cJSON_Parse(js);
    free(js);
    const cJSON *c = cJSON_GetObjectItem(j, "config"), *ex = cJSON_GetObjectItem(j, "experts");
    int ok = !strcmp(cJSON_GetObjectItem(j, "arch")->valuestring, "qwen3_next") &&
             cJSON_GetObjectItem(c, "n_layers")->valueint == 3 && cJSON_GetObjectItem(ex, "moe_layers")->valueint == 2 &&
             cJSON_GetObjectItem(ex, "stride")->valueint % 4096 == 0 &&
             !strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layer_types"), 2)->valuestring, "full_attention") &&
             cJSON_GetObjectItem(j, "backbone_bytes")->valuedouble > 0;
    cJSON_Delete(j);
    CHECK(ok);
}

/* ---- config spellings ---- */

TEST(config_spellings) {
    fam_config c;
    sl_error err = {0};
    const char *a = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,\"moe_intermediate_size\":4,"
                    "\"num_experts_per_tok\":2,\"num_experts\":4,\"rope_theta\":5000}";
    CHECKF(hf_parse_config(a, "a", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.n_experts == 4 && c.rope_theta == 5000 && c.rot_dim == 4 && c.norm_topk == 0 && c.layer_moe[1]);
    const char *b = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":2,\"head_dim\":4,\"moe_intermediate_size\":4,\"num_experts_per_tok\":2,"
                    "\"num_local_experts\":4,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":7000},"
                    "\"mlp_only_layers\":[1],\"intermediate_size\":12}";
    CHECKF(hf_parse_config(b, "b", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.n_experts == 4 && c.rope_theta == 7000 && c.n_kv_heads == 2 && !c.layer_moe[1] && c.dense_inter == 12);
    const char *n = "{\"model_type\":\"qwen3_next\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":8,"
                    "\"num_attention_heads\":2,\"head_dim\":16,\"moe_intermediate_size\":4,\"num_experts_per_tok\":2,"
                    "\"num_experts\":4,\"shared_expert_intermediate_size\":4,\"linear_num_key_heads\":1,"
                    "\"linear_num_value_heads\":2,\"linear_key_head_dim\":4,\"linear_value_head_dim\":4,"
                    "\"linear_conv_kernel_dim\":4,\"full_attention_interval\":4}";
    CHECKF(hf_parse_config(n, "n", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.layer_linear[0] && c.layer_linear[2] && !c.layer_linear[3] && !c.layer_linear[7] && c.rot_dim == 4 &&
          c.rope_theta == 10000 && c.norm_topk == 1 && c.zero_centred_norm && !c.split_lin_proj);
}

/* YaRN (family/rope.h) against the formula of transformers' modeling_rope_utils.py _compute_yarn_parameters,
 * evaluated in numpy with float32 tensor ops and double scalars (commit message of this test): gpt-oss-20b's
 * rope_scaling as released (4.x spelling), DeepSeek-V3's as 5.x writes it (rope_parameters, mscale). */
TEST(rope_yarn_inv_freq) {
    static const float gptoss[32] = {1, 0.689044297f, 0.47478205f, 0.327145845f, 0.225418001f, 0.155322984f,
        0.107024424f, 0.0737445652f, 0.05081328f, 0.0317056961f, 0.0193350017f, 0.0115920492f, 0.00679495931f,
        0.00386035908f, 0.00209379266f, 0.00105260219f, 0.000456483918f, 0.000129318694f, 3.83088118e-05f,
        2.63964721e-05f, 1.8188337e-05f, 1.25325696e-05f, 8.63549576e-06f, 5.95023948e-06f, 4.09997847e-06f,
        2.82506676e-06f, 1.94659629e-06f, 1.34129107e-06f, 9.24208962e-07f, 6.36820914e-07f, 4.38797855e-07f,
        3.0235114e-07f};
    static const float dsv3[32] = {1, 0.749894202f, 0.562341332f, 0.421696514f, 0.316227764f, 0.237137392f,
        0.177827939f, 0.133352146f, 0.100000001f, 0.0749894157f, 0.0562341288f, 0.0390069261f, 0.0268793609f,
        0.0183781441f, 0.012447956f, 0.0083345091f, 0.00550000044f, 0.00356199732f, 0.00224936521f, 0.00137051346f,
        0.000790569407f, 0.000414990413f, 0.00017782794f, 3.3338034e-05f, 2.49999994e-05f, 1.87473543e-05f,
        1.40585325e-05f, 1.05424142e-05f, 7.90569447e-06f, 5.92843435e-06f, 4.44569832e-06f, 3.33380353e-06f};
    fam_config c;
    sl_error err = {0};
    const char *g = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":64,\"moe_intermediate_size\":4,"
                    "\"num_experts_per_tok\":2,\"num_experts\":4,\"rope_theta\":150000,\"max_position_embeddings\":131072,"
                    "\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"
                    "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":false}}";
    CHECKF(hf_parse_config(g, "g", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.rope_type == SL_ROPE_YARN && c.rope_factor == 32 && c.rope_orig_max_pos == 4096 && !c.yarn_truncate);
    float inv[SL_ROPE_MAX_FREQS], af = 0;
    CHECK(rope_freqs(&c, inv, &af) == 32);
    CHECKF(fabs(af - 1.3465735902799727) < 1e-7, "attention factor %.9g", af); /* 0.1 ln 32 + 1 */
    for (int i = 0; i < 32; i++)
        CHECKF(fabsf(inv[i] - gptoss[i]) <= 1e-6f * gptoss[i], "gpt-oss inv_freq[%d] = %.9g, expected %.9g", i, inv[i],
               gptoss[i]);
    const char *d = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":64,\"moe_intermediate_size\":4,"
                    "\"num_experts_per_tok\":2,\"num_experts\":4,\"max_position_embeddings\":163840,"
                    "\"rope_parameters\":{\"rope_theta\":10000,\"rope_type\":\"yarn\",\"factor\":40,\"beta_fast\":32,"
                    "\"beta_slow\":1,\"mscale\":1.0,\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":4096}}";
    CHECKF(hf_parse_config(d, "d", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.yarn_truncate && c.yarn_mscale == 1 && c.yarn_mscale_all_dim == 1);
    CHECK(rope_freqs(&c, inv, &af) == 32 && af == 1.0f);
    for (int i = 0; i < 32; i++)
        CHECKF(fabsf(inv[i] - dsv3[i]) <= 1e-6f * dsv3[i], "DeepSeek-V3 inv_freq[%d] = %.9g, expected %.9g", i, inv[i],
               dsv3[i]);
    CHECK(fabs(rope_yarn_mscale(40, 0.707) - (0.1 * 0.707 * log(40.0) + 1)) < 1e-15 && rope_yarn_mscale(1, 5) == 1);
    /* the default table is bitwise the plain formula; unknown rope types and a bad factor are refused */
    c.rope_type = SL_ROPE_DEFAULT;
    CHECK(rope_freqs(&c, inv, &af) == 32 && af == 1.0f);
    for (int i = 0; i < 32; i++) CHECK(inv[i] == 1.0f / powf(10000.0f, (float)(2 * i) / 64.0f));
    const char *bad = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":2,\"head_dim\":4,\"moe_intermediate_size\":4,\"num_experts_per_tok\":2,"
                      "\"num_experts\":4,\"rope_scaling\":{\"rope_type\":\"longrope\"}}";
    CHECK(hf_parse_config(bad, "bad", &c, &err) == SL_EUNSUPPORTED && strstr(err.msg, "longrope"));
    const char *badf = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":2,\"head_dim\":4,\"moe_intermediate_size\":4,\"num_experts_per_tok\":2,"
                       "\"num_experts\":4,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":-2}}";
    CHECK(hf_parse_config(badf, "badf", &c, &err) == SL_ECONFIG && strstr(err.msg, "factor"));
}

/* ---- bad input ---- */

static void del_field(cJSON *j, void *ctx) { cJSON_DeleteItemFromObject(j, ctx); }
static void set_num(cJSON *j, void *ctx) {
    const char *const *kv = ctx;
    cJSON_DeleteItemFromObject(j, kv[0]);
    cJSON_AddNumberToObject(j, kv[0], atof(kv[1]));
}
static void set_str(cJSON *j, void *ctx) {
    const char *const *kv = ctx;
    cJSON_DeleteItemFromObject(j, kv[0]);
    cJSON_AddStringToObject(j, kv[0], kv[1]);
}

TEST(bad_config_missing_field) {
    const char *d = scratch_copy("qwen3_next");
    CHECK(d && edit_config(d, del_field, "hidden_size") == 0);
    expect_pack_fail(d, SL_ECONFIG, "config.json", "'hidden_size'");
}

TEST(bad_config_contradiction) {
    const char *d = scratch_copy("qwen3_moe"); /* has num_local_experts 16 */
    const char *kv[] = {"num_experts", "8"};
    CHECK(d && edit_config(d, set_num, (void *)kv) == 0);
    expect_pack_fail(d, SL_ECONFIG, "config.json", "disagree");
    const char *d2 = scratch_copy("qwen3_next");
    const char *kv2[] = {"num_experts_per_tok", "99"};
    CHECK(d2 && edit_config(d2, set_num, (void *)kv2) == 0);
    expect_pack_fail(d2, SL_ECONFIG, "config.json", "num_experts_per_tok");
}

static void bad_layer_types(cJSON *j, void *ctx) {
    cJSON *tc = cJSON_GetObjectItem(j, "text_config");
    cJSON *lt = cJSON_GetObjectItem(tc, "layer_types");
    cJSON_DeleteItemFromArray(lt, 0);
}

TEST(bad_config_layer_types_length) {
    const char *d = scratch_copy("qwen3_5_moe");
    CHECK(d && edit_config(d, bad_layer_types, NULL) == 0);
    expect_pack_fail(d, SL_ECONFIG, "config.json", "layer_types");
}

TEST(bad_config_unknown_model_type) {
    const char *d = scratch_copy("qwen3_next");
    const char *kv[] = {"model_type", "llama"};
    CHECK(d && edit_config(d, set_str, (void *)kv) == 0);
    char want[1024]; /* the families' own list (family/arch.c), so adding a family needs no edit here */
    snprintf(want, sizeof want, "(supported: %s)", arch_hf_type_list());
    CHECK(strstr(want, "qwen3_moe") && strstr(want, "mixtral") && strstr(want, "deepseek_v3"));
    expect_pack_fail(d, SL_EUNSUPPORTED, "'llama'", want);
}

TEST(bad_safetensors_truncated) {
    const char *d = scratch_copy("qwen3_next");
    CHECK(d);
    const char *p = test_path("%s/model.safetensors", d);
    long long n = test_file_size(p);
    CHECK(truncate(p, n - 1000) == 0);
    expect_pack_fail(d, SL_EFORMAT, "model.safetensors", "runs past the end");
    CHECK(truncate(p, 20) == 0);
    expect_pack_fail(d, SL_EFORMAT, "model.safetensors", "header length");
}

/* moves tensor ctx's data_offsets onto those of the first other tensor */
static void overlap(cJSON *root, void *ctx) {
    cJSON *victim = cJSON_GetObjectItem(root, ctx), *it;
    cJSON_ArrayForEach(it, root) {
        if (it == victim || !strcmp(it->string, "__metadata__")) continue;
        cJSON *o = cJSON_GetObjectItem(it, "data_offsets");
        cJSON *vo = cJSON_GetObjectItem(victim, "data_offsets");
        double len = cJSON_GetArrayItem(vo, 1)->valuedouble - cJSON_GetArrayItem(vo, 0)->valuedouble;
        double b = cJSON_GetArrayItem(o, 0)->valuedouble;
        cJSON_ReplaceItemInArray(vo, 0, cJSON_CreateNumber(b));
        cJSON_ReplaceItemInArray(vo, 1, cJSON_CreateNumber(b + len));
        return;
    }
}

TEST(bad_safetensors_overlap) {
    const char *d = scratch_copy("qwen3_next");
    CHECK(d && st_rewrite(test_path("%s/model.safetensors", d), overlap, "model.layers.1.linear_attn.A_log") == 0);
    expect_pack_fail(d, SL_EFORMAT, "model.safetensors", "overlap");
}

static void past_end(cJSON *root, void *ctx) {
    cJSON *vo = cJSON_GetObjectItem(cJSON_GetObjectItem(root, ctx), "data_offsets");
    cJSON_ReplaceItemInArray(vo, 1, cJSON_CreateNumber(cJSON_GetArrayItem(vo, 1)->valuedouble + 1e9));
}

TEST(bad_safetensors_offsets_past_file) {
    const char *d = scratch_copy("qwen3_next");
    CHECK(d && st_rewrite(test_path("%s/model.safetensors", d), past_end, "model.norm.weight") == 0);
    expect_pack_fail(d, SL_EFORMAT, "model.safetensors", "model.norm.weight");
}

static void lie_shape(cJSON *root, void *ctx) {
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(root, ctx), "shape");
    cJSON_ReplaceItemInArray(sh, 1, cJSON_CreateNumber(cJSON_GetArrayItem(sh, 1)->valuedouble / 2));
}
static void lie_dtype(cJSON *root, void *ctx) {
    cJSON *t = cJSON_GetObjectItem(root, ctx);
    cJSON_ReplaceItemInObject(t, "dtype", cJSON_CreateString("BF16"));
}
static void swap_shape(cJSON *root, void *ctx) {
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(root, ctx), "shape");
    double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
    cJSON_ReplaceItemInArray(sh, 0, cJSON_CreateNumber(b));
    cJSON_ReplaceItemInArray(sh, 1, cJSON_CreateNumber(a));
}

TEST(bad_safetensors_header_lies) {
    const char *t = "model.layers.2.self_attn.q_proj.weight";
    const char *d = scratch_copy("qwen3_next");
    CHECK(d && st_rewrite(test_path("%s/model.safetensors", d), lie_shape, (void *)t) == 0);
    expect_pack_fail(d, SL_EFORMAT, "model.safetensors", t);
    d = scratch_copy("qwen3_next");
    CHECK(d && st_rewrite(test_path("%s/model.safetensors", d), lie_dtype, (void *)t) == 0);
    expect_pack_fail(d, SL_EFORMAT, "model.safetensors", t);
    d = scratch_copy("qwen3_next"); /* same byte size, wrong shape for the config */
    CHECK(d && st_rewrite(test_path("%s/model.safetensors", d), swap_shape, (void *)t) == 0);
    expect_pack_fail(d, SL_EFORMAT, t, "config implies");
}

TEST(bad_missing_shard) {
    const char *d = scratch_copy("qwen3_moe");
    CHECK(d);
    CHECK(unlink(test_path("%s/model-00002-of-00003.safetensors", d)) == 0);
    expect_pack_fail(d, SL_ENOENT, "model-00002-of-00003.safetensors", "index.json for tensor");
}

TEST(bad_missing_tensor) {
    const char *d = scratch_copy("qwen3_next");
    CHECK(d && st_rewrite(test_path("%s/model.safetensors", d), del_field, "model.layers.2.mlp.experts.7.up_proj.weight") == 0);
    expect_pack_fail(d, SL_EFORMAT, "layers.2.mlp.experts.7.up_proj", "missing");
}

/* fault-injecting writer: fails with ENOSPC once `budget` bytes have been written */
typedef struct {
    long long budget;
} disk;

static ssize_t full_disk(void *ctx, int fd, const void *buf, size_t n, off_t off) {
    disk *d = ctx;
    if (d->budget <= 0) { errno = ENOSPC; return -1; }
    size_t k = n < (size_t)d->budget ? n : (size_t)d->budget;
    ssize_t r = pwrite(fd, buf, k, off);
    if (r > 0) d->budget -= r;
    return r;
}

TEST(bad_disk_full_during_pack) {
    long long budgets[] = {0, 5000, 300000, 1000000};
    const char *dir = test_path("%s/diskfull", test_tmpdir());
    mkdir(dir, 0755);
    const char *out = test_path("%s/model.sluice", dir);
    /* an existing file at the output path must survive a failed pack untouched */
    CHECK(test_write(out, "precious", 8) == 0);
    for (int i = 0; i < 4; i++) {
        disk dk = {budgets[i]};
        pack_io io = {full_disk, &dk};
        sl_error err = {0};
        sl_status st = pack_run("tests/data/qwen3_next", out, NULL, &io, &err);
        CHECKF(st == SL_ENOSPC && strstr(err.msg, "No space left"), "budget %lld: %d %s", budgets[i], st, err.msg);
        CHECK(test_file_size(out) == 8);
        CHECK(!test_dir_has_prefix(dir, "model.sluice.tmp"));
    }
}

/* Rewrites the manifest of a container copy through fn (the manifest is the last section), fixing up
 * the header's manifest length, hash and file size: a structurally valid file whose content lies. */
static int edit_manifest(const char *src, const char *dst, void (*fn)(cJSON *man, void *ctx), void *ctx) {
    size_t n;
    char *b = test_read(src, &n);
    if (!b) return -1;
    slc_header h;
    if (slc_header_decode((uint8_t *)b, &h, src, NULL)) { free(b); return -1; }
    cJSON *man = cJSON_ParseWithLength(b + h.manifest_off, h.manifest_len);
    fn(man, ctx);
    char *txt = cJSON_PrintUnformatted(man);
    cJSON_Delete(man);
    h.manifest_len = strlen(txt);
    h.manifest_hash = XXH3_64bits(txt, h.manifest_len);
    h.file_size = h.manifest_off + h.manifest_len;
    char *o = malloc(h.file_size);
    memcpy(o, b, h.manifest_off);
    memcpy(o + h.manifest_off, txt, h.manifest_len);
    slc_header_encode(&h, (uint8_t *)o);
    int rc = test_write(dst, o, h.file_size);
    free(o);
    free(txt);
    free(b);
    return rc;
}

static void lie_heads(cJSON *man, void *ctx) {
    cJSON *c = cJSON_GetObjectItem(man, "config");
    cJSON_ReplaceItemInObject(c, "n_heads", cJSON_CreateNumber(2)); /* q_proj / o_proj no longer fit */
}

static void lie_tensor_shape(cJSON *man, void *ctx) {
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(man, "tensors")) {
        if (strcmp(cJSON_GetObjectItem(it, "name")->valuestring, ctx)) continue;
        cJSON *sh = cJSON_GetObjectItem(it, "shape");
        double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
        cJSON_ReplaceItemInArray(sh, 0, cJSON_CreateNumber(b));
        cJSON_ReplaceItemInArray(sh, 1, cJSON_CreateNumber(a));
    }
}

TEST(open_rejects_shapes_that_do_not_match_config) {
    const char *src = test_packed("qwen3_next");
    CHECK(src);
    const char *p = test_path("%s/lying-config.sluice", test_tmpdir());
    CHECK(edit_manifest(src, p, lie_heads, NULL) == 0);
    sl_model *m = NULL;
    sl_error err = {0};
    sl_status st = sl_model_open(p, NULL, &m, &err);
    CHECKF(st == SL_EFORMAT && m == NULL && strstr(err.msg, "q_proj") && strstr(err.msg, "config implies"), "%d %s", st,
           err.msg);
    const char *p2 = test_path("%s/lying-shape.sluice", test_tmpdir());
    CHECK(edit_manifest(src, p2, lie_tensor_shape, "layers.0.linear_attn.out_proj") == 0);
    st = sl_model_open(p2, NULL, &m, &err);
    CHECKF(st == SL_EFORMAT && m == NULL && strstr(err.msg, "layers.0.linear_attn.out_proj"), "%d %s", st, err.msg);
}

/* sluice synth's shapes of released models have their published sizes: total parameters (backbone +
 * every routed expert) from the family table within 1.5% of the count each family's file gives with the shape
 * (arch_shape.params: the model card's, or where a card counts a vision tower or an MTP module, the text
 * weights'). Every shape of every family, so a new family's shapes are checked without an edit here. */
TEST(synth_shapes_have_released_sizes) {
    int checked = 0;
    for (int f = 0; arch_list[f]; f++)
        for (int k = 0; k < arch_list[f]->n_shapes; k++) {
            const arch_shape *sh = &arch_list[f]->shapes[k];
            if (!strncmp(sh->name, "tiny", 4)) continue; /* a test shape (tiny, tiny-wide...), not a release */
            CHECKF(sh->params > 0, "shape %s of %s has no published parameter count", sh->name, arch_list[f]->name);
            fam_config c;
            sl_error err = {0};
            CHECKF(synth_config(sh->name, 0, &c, &err) == SL_OK, "%s: %s", sh->name, err.msg);
            arch_tensor *at = NULL;
            int n = arch_backbone_tensors(&c, &at);
            CHECK(n > 0);
            double p = 0;
            for (int t = 0; t < n; t++) p += (double)at[t].shape[0] * (double)(at[t].ndim == 2 ? at[t].shape[1] : 1);
            free(at);
            for (int part = 0; part < arch_n_parts(&c); part++) {
                int64_t ps[2];
                arch_expert_shape(&c, part, ps);
                p += (double)cfg_n_moe_layers(&c) * c.n_experts * (double)ps[0] * (double)ps[1];
            }
            printf("     %s: %.2fB parameters (published %.2fB)\n", sh->name, p / 1e9, sh->params / 1e9);
            CHECKF(p > sh->params * 0.985 && p < sh->params * 1.015, "%s: %.3g parameters, published %.3g", sh->name,
                   p, sh->params);
            checked++;
        }
    CHECK(checked >= 18);
    fam_config c;
    sl_error err = {0};
    CHECK(synth_config("no-such-model", 0, &c, &err) == SL_EINVAL && strstr(err.msg, "mixtral-8x7b"));
}

/* Appends the multi-token-prediction module DeepSeek-V3 releases as layers.num_hidden_layers.* (embed_tokens,
 * enorm, hnorm, eh_proj, shared_head, attention, experts; zero BF16 data) to a safetensors file. */
static int add_mtp_layer(const char *path, int layer) {
    size_t n;
    char *b = test_read(path, &n);
    if (!b || n < 8) return -1;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (uint8_t)b[i];
    cJSON *root = cJSON_ParseWithLength(b + 8, hl);
    size_t data = n - 8 - hl;
    static const struct { const char *name; int r, c; } t[] = {
        {"embed_tokens", 256, 64}, {"enorm", 64, 0}, {"hnorm", 64, 0}, {"eh_proj", 64, 128},
        {"shared_head.head", 256, 64}, {"shared_head.norm", 64, 0}, {"self_attn.kv_a_proj_with_mqa", 40, 64},
        {"mlp.experts.0.gate_proj", 16, 64}, {"mlp.gate.e_score_correction_bias", 16, 0},
    };
    size_t add = 0;
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "model.layers.%d.%s%s", layer, t[i].name,
                 strstr(t[i].name, "bias") ? "" : ".weight");
        size_t bytes = (size_t)t[i].r * (size_t)(t[i].c ? t[i].c : 1) * 2;
        cJSON *e = cJSON_AddObjectToObject(root, nm);
        cJSON_AddStringToObject(e, "dtype", "BF16");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(t[i].r));
        if (t[i].c) cJSON_AddItemToArray(sh, cJSON_CreateNumber(t[i].c));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(data + add)));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(data + add + bytes)));
        add += bytes;
    }
    char *js = cJSON_PrintUnformatted(root);
    size_t jl = strlen(js), nl = (jl + 7) / 8 * 8, total = 8 + nl + data + add;
    char *o = calloc(1, total);
    for (int i = 0; i < 8; i++) o[i] = (char)(nl >> (8 * i));
    memcpy(o + 8, js, jl);
    memset(o + 8 + jl, ' ', nl - jl);
    memcpy(o + 8 + nl, b + 8 + hl, data);
    int rc = test_write(path, o, total);
    free(o);
    free(js);
    free(b);
    cJSON_Delete(root);
    return rc;
}

/* The released checkpoints carry a multi-token-prediction layer past num_hidden_layers (num_nextn_predict_layers);
 * pack leaves it out: the same tensors, the same experts as without it. */
TEST(deepseek_v3_mtp_layer_is_not_read) {
    const char *d = scratch_copy("deepseek_v3");
    CHECK(d && add_mtp_layer(test_path("%s/model.safetensors", d), 3) == 0);
    const char *out = test_path("%s/mtp.sluice", d);
    sl_error err = {0};
    sl_pack_params p = sl_pack_params_default();
    CHECKF(sl_pack(d, out, &p, &err) == SL_OK, "%s", err.msg);
    slc_file a, b;
    CHECKF(slc_open(out, &a, &err) == SL_OK, "%s", err.msg);
    if (slc_open(test_packed("deepseek_v3"), &b, &err)) {
        slc_close(&a);
        CHECKF(0, "%s", err.msg);
    }
    int same = a.n_tensors == b.n_tensors && a.h.n_moe_layers == b.h.n_moe_layers && a.h.n_experts == b.h.n_experts;
    for (int i = 0; same && i < a.n_tensors; i++) same = !strcmp(a.t[i].name, b.t[i].name) && !strstr(a.t[i].name, "layers.3.");
    slc_close(&a);
    slc_close(&b);
    CHECK(same);
}

/* DeepSeek-V3's config.json (and Kimi-K2's model_type): the MLA dimensions, head_dim = qk_nope + qk_rope whatever
 * config.json's head_dim says, q_lora_rank null = one q_proj, rope_interleave by default; contradictions refused
 * naming the field. */
TEST(deepseek_v3_config) {
    const char *base = "{\"model_type\": \"%s\", \"vocab_size\": 32, \"hidden_size\": 16, \"num_hidden_layers\": 3, "
                       "\"num_attention_heads\": 2, \"num_key_value_heads\": %d, \"head_dim\": 4, \"n_routed_experts\": 8, "
                       "\"num_experts_per_tok\": 2, \"n_group\": 2, \"topk_group\": 1, \"routed_scaling_factor\": 2.5, "
                       "\"intermediate_size\": 8, \"moe_intermediate_size\": 4, \"first_k_dense_replace\": 1, "
                       "\"q_lora_rank\": %s, \"kv_lora_rank\": 12, \"qk_nope_head_dim\": 6, \"qk_rope_head_dim\": 4, "
                       "\"v_head_dim\": 5%s}";
    char txt[1024];
    fam_config c;
    sl_error err = {0};
    snprintf(txt, sizeof txt, base, "deepseek_v3", 2, "10", "");
    CHECKF(hf_parse_config(txt, "config.json", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.arch == SL_ARCH_DEEPSEEK_V3 && c.q_lora == 10 && c.kv_lora == 12 && c.qk_nope == 6 && c.rot_dim == 4 &&
          c.v_head_dim == 5 && c.head_dim == 10 && c.rope_interleave == 1 && !c.layer_moe[0] && c.layer_moe[1] &&
          c.dense_inter == 8 && c.shared_inter == 4 && c.router == SL_ROUTER_SIGMOID_GROUP && cfg_kv_row(&c) == 16);
    CHECK(fabs(c.attn_scale - 1.0 / sqrt(10.0)) < 1e-15);
    snprintf(txt, sizeof txt, base, "kimi_k2", 2, "null", ", \"rope_interleave\": false");
    CHECKF(hf_parse_config(txt, "config.json", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.arch == SL_ARCH_DEEPSEEK_V3 && c.q_lora == 0 && c.rope_interleave == 0);
    snprintf(txt, sizeof txt, base, "deepseek_v3", 1, "10", "");
    CHECK(hf_parse_config(txt, "config.json", &c, &err) == SL_ECONFIG && strstr(err.msg, "num_key_value_heads"));
    snprintf(txt, sizeof txt, base, "deepseek_v3", 2, "10", ", \"attention_bias\": true");
    CHECK(hf_parse_config(txt, "config.json", &c, &err) == SL_EUNSUPPORTED && strstr(err.msg, "attention_bias"));
    const char *no_kv = "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 32, \"hidden_size\": 16, "
                        "\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"n_routed_experts\": 4, "
                        "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 4}";
    CHECK(hf_parse_config(no_kv, "config.json", &c, &err) == SL_ECONFIG && strstr(err.msg, "kv_lora_rank"));
}

/* deepseek-ai/DeepSeek-V3's own config.json (its fields as released: rope_scaling with "type": "yarn", top-level
 * rope_theta, no rope_interleave, num_nextn_predict_layers, FP8 quantization_config): the MLA dimensions, YaRN,
 * and the softmax scale 192^-0.5 * (0.1 ln 40 + 1)^2 of DeepseekV3Attention. */
TEST(deepseek_v3_release_config) {
    const char *txt =
        "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"vocab_size\": 129280, "
        "\"hidden_size\": 7168, \"intermediate_size\": 18432, \"moe_intermediate_size\": 2048, \"num_hidden_layers\": 61, "
        "\"num_nextn_predict_layers\": 1, \"num_attention_heads\": 128, \"num_key_value_heads\": 128, "
        "\"n_shared_experts\": 1, \"n_routed_experts\": 256, \"ep_size\": 1, \"routed_scaling_factor\": 2.5, "
        "\"kv_lora_rank\": 512, \"q_lora_rank\": 1536, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, "
        "\"qk_nope_head_dim\": 128, \"topk_method\": \"noaux_tc\", \"n_group\": 8, \"topk_group\": 4, "
        "\"num_experts_per_tok\": 8, \"moe_layer_freq\": 1, \"first_k_dense_replace\": 3, \"norm_topk_prob\": true, "
        "\"scoring_func\": \"sigmoid\", \"hidden_act\": \"silu\", \"max_position_embeddings\": 163840, "
        "\"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false, \"rope_theta\": 10000, "
        "\"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, "
        "\"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, "
        "\"attention_bias\": false, \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
        "\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}";
    fam_config c;
    sl_error err = {0};
    CHECKF(hf_parse_config(txt, "config.json", &c, &err) == SL_OK, "%s", err.msg);
    CHECK(c.n_layers == 61 && c.n_experts == 256 && c.n_experts_used == 8 && c.n_group == 8 && c.topk_group == 4);
    CHECK(c.q_lora == 1536 && c.kv_lora == 512 && c.qk_nope == 128 && c.rot_dim == 64 && c.v_head_dim == 128 &&
          c.head_dim == 192 && c.rope_interleave == 1 && c.dense_inter == 18432 && c.shared_inter == 2048);
    CHECK(!c.layer_moe[2] && c.layer_moe[3] && c.layer_moe[60] && cfg_kv_row(&c) == 576);
    CHECK(c.rope_type == SL_ROPE_YARN && c.rope_factor == 40 && c.rope_orig_max_pos == 4096 && c.yarn_mscale_all_dim == 1);
    double m = 0.1 * log(40.0) + 1.0;
    CHECKF(fabs(c.attn_scale - m * m / sqrt(192.0)) < 1e-15, "attn_scale %.17g", c.attn_scale);
    fam_config s;
    CHECK(synth_config("deepseek-v3", 0, &s, &err) == SL_OK);
    CHECK(s.attn_scale == c.attn_scale && s.rope_factor == c.rope_factor && s.yarn_beta_fast == 32 &&
          s.q_lora == c.q_lora && s.kv_lora == c.kv_lora && s.max_pos == c.max_pos && s.head_dim == c.head_dim);
}

/* A model_type no family serves is refused with the list of those served; each family's own is taken. */
TEST(unknown_model_type_lists_the_supported) {
    fam_config c;
    sl_error err = {0};
    const char *llama = "{\"model_type\": \"llama\", \"vocab_size\": 8, \"hidden_size\": 8}";
    CHECK(hf_parse_config(llama, "config.json", &c, &err) == SL_EUNSUPPORTED);
    CHECKF(strstr(err.msg, "'llama'") && strstr(err.msg, "qwen3_moe") && strstr(err.msg, "mixtral") &&
           strstr(err.msg, "olmoe") && strstr(err.msg, "qwen2_moe") && strstr(err.msg, "glm4_moe") &&
           strstr(err.msg, "deepseek_v3") && strstr(err.msg, "kimi_k2"), "%s", err.msg);
    const char *types[] = {"mixtral", "olmoe", "qwen2_moe", "glm4_moe"};
    for (int i = 0; i < 4; i++) {
        char txt[512];
        snprintf(txt, sizeof txt, "{\"model_type\": \"%s\", \"vocab_size\": 32, \"hidden_size\": 16, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_experts\": 4, \"num_local_experts\": 4, "
                 "\"num_experts_per_tok\": 2, \"intermediate_size\": 8, \"moe_intermediate_size\": 8, "
                 "\"shared_expert_intermediate_size\": 8}", types[i]);
        memset(&err, 0, sizeof err);
        CHECKF(hf_parse_config(txt, "config.json", &c, &err) == SL_OK, "%s: %s", types[i], err.msg);
        CHECK(!strcmp(cfg_arch_name(c.arch), types[i]));
    }
}

/* ---- gpt-oss ---- */

/* sluice's MXFP4 dequantisation of the gpt_oss_mxfp4 fixture's experts, packed as they are, is bitwise
 * transformers' own: ref.json keeps the sha256 of integrations/mxfp4.py convert_moe_packed_tensors' float32
 * output (tools/make_fixtures.py), laid out [E][rows][cols]; here every expert's rows come from q_row_to_f32. */
TEST(mxfp4_dequant_matches_transformers) {
    const char *path = test_packed("gpt_oss_mxfp4");
    CHECK(path);
    char *txt = test_read("tests/data/gpt_oss_mxfp4/ref.json", NULL);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(ref, "dequant_sha256");
    CHECK(cJSON_GetArraySize(hs) == 4);
    slc_file f;
    sl_error err = {0};
    CHECKF(slc_open(path, &f, &err) == SL_OK, "%s", err.msg);
    uint8_t *blk = malloc(f.h.expert_stride);
    float row[4096];
    int matched = 0;
    for (uint32_t s = 0; s < f.h.n_moe_layers; s++)
        for (int which = 0; which < 2; which++) {
            struct sha256_ctx ctx;
            sha256_init(&ctx);
            for (uint32_t e = 0; e < f.h.n_experts; e++) {
                CHECK(pread(f.fd, blk, f.block_bytes, (off_t)slc_expert_offset(&f, (int)s, (int)e)) == (ssize_t)f.block_bytes);
                tn_expert ex;
                slc_bind_expert(&f, (int)s, blk, &ex);
                const tn_mat *m = which ? &ex.down : &ex.gate_up;
                CHECK(m->dtype == DT_MXFP4 && m->cols <= 4096);
                for (int r = 0; r < m->rows; r++) {
                    q_row_to_f32(m, r, row);
                    sha256_update(&ctx, (size_t)m->cols * 4, (const uint8_t *)row); /* little-endian host */
                }
            }
            uint8_t dig[SHA256_DIGEST_SIZE];
            char hex[2 * SHA256_DIGEST_SIZE + 1], key[96];
            sha256_digest(&ctx, SHA256_DIGEST_SIZE, dig);
            for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(hex + 2 * i, 3, "%02x", dig[i]);
            snprintf(key, sizeof key, "model.layers.%d.mlp.experts.%s", f.moe_layers[s], which ? "down_proj" : "gate_up_proj");
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(hs, key);
            CHECKF(cJSON_IsString(want) && !strcmp(want->valuestring, hex), "%s: sha256 %s, transformers %s", key, hex,
                   cJSON_IsString(want) ? want->valuestring : "(none)");
            matched++;
        }
    free(blk);
    slc_close(&f);
    cJSON_Delete(ref);
    CHECK(matched == 4);
}

/* The gpt-oss fixtures' YaRN table is transformers' own (GptOssRotaryEmbedding.inv_freq and attention_scaling,
 * kept in ref.json), and their config reads as sliding (window 8) / full layers with sinks and fused experts. */
TEST(gpt_oss_config_and_yarn_match_transformers) {
    for (int k = 0; k < 2; k++) {
        const char *fx = k ? "gpt_oss_mxfp4" : "gpt_oss";
        char *ctext = test_read(test_path("tests/data/%s/config.json", fx), NULL), *rtext = test_read(test_path("tests/data/%s/ref.json", fx), NULL);
        CHECK(ctext && rtext);
        fam_config c;
        sl_error err = {0};
        sl_status st = hf_parse_config(ctext, fx, &c, &err);
        cJSON *ref = cJSON_Parse(rtext);
        free(ctext);
        free(rtext);
        CHECKF(st == SL_OK, "%s", err.msg);
        CHECK(c.arch == SL_ARCH_GPT_OSS && c.rope_type == SL_ROPE_YARN && c.sliding_window == 8 && c.layer_sliding[0] &&
              !c.layer_sliding[1] && c.attn_sinks && c.attn_bias && c.expert_kind == SL_EXPERT_GPTOSS &&
              c.swiglu_limit == 7.0 && c.router == SL_ROUTER_TOPK_SOFTMAX && arch_n_parts(&c) == 4);
        float inv[SL_ROPE_MAX_FREQS], af = 0;
        int n = rope_freqs(&c, inv, &af);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(ref, "inv_freq");
        CHECK(n == cJSON_GetArraySize(want) && n == 8);
        for (int i = 0; i < n; i++) {
            float w = (float)cJSON_GetArrayItem(want, i)->valuedouble;
            CHECKF(fabsf(inv[i] - w) <= 1e-6f * w, "%s inv_freq[%d] = %.9g, transformers %.9g", fx, i, inv[i], w);
        }
        CHECK(af == (float)cJSON_GetObjectItemCaseSensitive(ref, "attention_scaling")->valuedouble);
        cJSON_Delete(ref);
    }
    /* bad input: an unknown layer kind, a sliding layer without a window, MXFP4 blocks without quantization_config */
    const char *base = "{\"model_type\":\"gpt_oss\",\"vocab_size\":10,\"hidden_size\":64,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":32,"
                       "\"num_local_experts\":4,\"num_experts_per_tok\":2,";
    char cfg[1024];
    fam_config c;
    sl_error err = {0};
    snprintf(cfg, sizeof cfg, "%s\"layer_types\":[\"sliding_attention\",\"chunked_attention\"],\"sliding_window\":8}", base);
    CHECK(hf_parse_config(cfg, "lt", &c, &err) == SL_ECONFIG && strstr(err.msg, "layer_types[1]"));
    snprintf(cfg, sizeof cfg, "%s\"layer_types\":[\"sliding_attention\",\"full_attention\"]}", base);
    CHECK(hf_parse_config(cfg, "sw", &c, &err) == SL_ECONFIG && strstr(err.msg, "sliding_window"));
    snprintf(cfg, sizeof cfg, "%s\"sliding_window\":4}", base); /* no layer_types: transformers' alternation */
    CHECK(hf_parse_config(cfg, "alt", &c, &err) == SL_OK && c.layer_sliding[0] && !c.layer_sliding[1]);
    char dir[1024]; /* not test_path's: test_copy_dir turns its buffers over */
    snprintf(dir, sizeof dir, "%s/gptoss-noquant", test_tmpdir());
    CHECK(test_copy_dir("tests/data/gpt_oss_mxfp4", dir) == 0);
    char *ct = test_read(test_path("%s/config.json", dir), NULL);
    CHECK(ct);
    cJSON *cj = cJSON_Parse(ct);
    free(ct);
    cJSON_DeleteItemFromObject(cj, "quantization_config");
    char *out = cJSON_Print(cj);
    CHECK(test_write(test_path("%s/config.json", dir), out, strlen(out)) == 0);
    free(out);
    cJSON_Delete(cj);
    hf_ckpt *ck = NULL;
    CHECK(hf_open(dir, &ck, &err) == SL_EFORMAT && strstr(err.msg, "_proj_blocks") && strstr(err.msg, "quant_method mxfp4"));
}

/* sluice synth writes the same file for any number of writer threads (every tensor and expert from its
 * own streams), a different one for another seed; the file verifies, and its weights are what synth.c
 * says: a q4 expert's values within ±1.25/sqrt(cols), spread over both signs; bf16 ones within ±1/sqrt(cols). */
TEST(synth_same_file_for_any_thread_count) {
    static const sl_quant qs[] = {SL_QUANT_BF16, SL_QUANT_Q4, SL_QUANT_Q3, SL_QUANT_Q8, SL_QUANT_F32};
    for (size_t qi = 0; qi < sizeof qs / sizeof *qs; qi++) {
        char *data[4] = {0};
        size_t len[4] = {0};
        static const int threads[] = {1, 3, 0, 1};
        for (int v = 0; v < 4; v++) {
            const char *p = test_path("%s/synth-thr-%d.sluice", test_tmpdir(), v);
            sl_error err = {0};
            CHECKF(sl_synth_threads("tiny", 0, qs[qi], v == 3 ? 2 : 1, threads[v], p, NULL, NULL, &err) == SL_OK,
                   "%s", err.msg);
            CHECKF(sl_verify(p, NULL, NULL, NULL, &err) == SL_OK, "quant %d: %s", (int)qs[qi], err.msg);
            CHECK(fio_read_file(p, &data[v], &len[v], &err) == SL_OK);
        }
        CHECKF(len[0] == len[1] && !memcmp(data[0], data[1], len[0]), "quant %d: 1 and 3 threads differ", (int)qs[qi]);
        CHECKF(len[0] == len[2] && !memcmp(data[0], data[2], len[0]), "quant %d: 1 and all threads differ", (int)qs[qi]);
        CHECKF(len[0] != len[3] || memcmp(data[0], data[3], len[0]), "quant %d: seeds 1 and 2 give one file", (int)qs[qi]);
        for (int v = 0; v < 4; v++) free(data[v]);
        if (qs[qi] != SL_QUANT_Q4 && qs[qi] != SL_QUANT_BF16) continue;
        slc_file f;
        sl_error err = {0};
        CHECK(slc_open(test_path("%s/synth-thr-0.sluice", test_tmpdir()), &f, &err) == SL_OK);
        uint8_t *blk = malloc(f.h.expert_stride);
        CHECK(fio_pread_all(f.fd, blk, f.h.expert_stride, slc_expert_offset(&f, 1, 7), "x", &err) == SL_OK);
        tn_expert ex;
        slc_bind_expert(&f, 1, blk, &ex);
        int cols = ex.down.cols, neg = 0, pos = 0, bad = 0;
        float row[4096], lim = (qs[qi] == SL_QUANT_Q4 ? 1.25f : 1.0f) / sqrtf((float)cols) * 1.001f;
        for (int r = 0; r < ex.down.rows; r++) {
            q_row_to_f32(&ex.down, r, row);
            for (int c = 0; c < cols; c++) {
                bad += !(fabsf(row[c]) <= lim);
                neg += row[c] < -0.3f * lim;
                pos += row[c] > 0.3f * lim;
            }
        }
        int n = ex.down.rows * cols;
        free(blk);
        slc_close(&f);
        CHECKF(!bad && neg > n / 4 && pos > n / 4, "quant %d: %d of %d values outside ±%g, %d negative, %d positive",
               (int)qs[qi], bad, n, lim, neg, pos);
    }
}

/* Adding a family is adding src/family/arch/<name>.c (arch.h): every such file is a registered family of
 * that name with a tensor table and at least one HF model_type, and every family is such a file. */
#include <dirent.h>
TEST(every_arch_file_is_a_family) {
    DIR *d = opendir(test_path("src/family/arch"));
    CHECK(d != NULL);
    int files = 0, listed = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".c")) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - 2), e->d_name);
        files++;
        const arch_desc *a = arch_by_name(name);
        CHECKF(a && a->n_tensors > 0 && a->hf_types && a->hf_types[0] && arch_get(a->id) == a,
               "src/family/arch/%s is not a registered family (run make: tools/gen_families.sh)", e->d_name);
    }
    if (d) closedir(d);
    for (int i = 0; arch_list[i]; i++) listed++;
    CHECKF(files == listed, "%d family files, %d families registered", files, listed);
}
