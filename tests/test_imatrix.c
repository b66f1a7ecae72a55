/*
 * test_imatrix.c — llama.cpp importance matrices (src/import/imatrix.c) and importance-weighted quantisation
 * (src/quant/qimp.c, `sluice pack --imatrix`): the reader on both formats llama-imatrix writes (files made here byte
 * by byte in its layouts, llama.cpp tools/imatrix/imatrix.cpp save_imatrix / save_imatrix_legacy; values against
 * the sums / counts written), its errors and every truncation, the GGUF names of a family's matrices, the weighted
 * quantisers never worse than the plain ones under the weights (and much better where importances vary), the plain
 * quantisers' bytes pinned as they were before weighting existed, and the pack's record.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buf.h"
#include "format/container.h"
#include "import/gguf.h"
#include "import/hf.h"
#include "import/imatrix.h"
#include "quant/quant.h"
#include "sluice.h"
#include "test.h"
#include "util/err.h"
#include "util/xxh3.h"

/* One weight of an imatrix: its name, n_mat matrices of cols columns, sums [n_mat][cols] and counts [n_mat]. */
typedef struct {
    const char *name;
    int cols, n_mat;
    float *sums, *counts;
} wt;

static void wt_fill(wt *w, unsigned seed) {
    w->sums = malloc(sizeof(float) * (size_t)(w->cols * w->n_mat));
    w->counts = malloc(sizeof(float) * (size_t)w->n_mat);
    for (int m = 0; m < w->n_mat; m++) {
        w->counts[m] = (float)(512 * (1 + (m + seed) % 3));
        for (int j = 0; j < w->cols; j++)
            w->sums[m * w->cols + j] = w->counts[m] * (0.01f + (float)((seed * 7919u + (unsigned)(m * 131 + j) * 2654435761u) % 1000) / 50.0f);
    }
}

/* llama-imatrix's GGUF: general.type, imatrix.datasets, chunk_count, chunk_size; per weight NAME.counts [1][n_mat]
 * and NAME.in_sum2 [cols][n_mat] (ne innermost first), names sorted (gguf_add_tensor in the sorted order of
 * save_imatrix: counts before in_sum2), data aligned to 32. */
static buf imatrix_gguf(const wt *w, int n) {
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)(2 * n));
    u64(&b, 4);
    str(&b, "general.type");
    u32(&b, GGUF_STRING);
    str(&b, "imatrix");
    str(&b, "imatrix.datasets");
    u32(&b, GGUF_ARRAY);
    u32(&b, GGUF_STRING);
    u64(&b, 1);
    str(&b, "calib.txt");
    str(&b, "imatrix.chunk_count");
    u32(&b, GGUF_U32);
    u32(&b, 7);
    str(&b, "imatrix.chunk_size");
    u32(&b, GGUF_U32);
    u32(&b, 512);
    uint64_t off = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            char nm[160];
            snprintf(nm, sizeof nm, "%s.%s", w[i].name, k ? "in_sum2" : "counts");
            str(&b, nm);
            u32(&b, 2);
            u64(&b, k ? (uint64_t)w[i].cols : 1);
            u64(&b, (uint64_t)w[i].n_mat);
            u32(&b, 0); /* F32 */
            u64(&b, off);
            off += ((uint64_t)(k ? w[i].cols * w[i].n_mat : w[i].n_mat) * 4 + 31) / 32 * 32;
        }
    while (b.n % 32) put(&b, "", 1);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            put(&b, k ? w[i].sums : w[i].counts, sizeof(float) * (size_t)(k ? w[i].cols * w[i].n_mat : w[i].n_mat));
            while (b.n % 32) put(&b, "", 1);
        }
    return b;
}

/* save_imatrix_legacy: per entry the mean times ncall (ncall = the largest count over the chunk size, rounded up),
 * then the chunk count and the dataset's name. */
static buf imatrix_dat(const wt *w, int n) {
    buf b = {0};
    u32(&b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        u32(&b, (uint32_t)strlen(w[i].name));
        put(&b, w[i].name, strlen(w[i].name));
        float mx = 0;
        for (int m = 0; m < w[i].n_mat; m++) mx = fmaxf(mx, w[i].counts[m]);
        const int32_t ncall = (int32_t)((mx + 511) / 512);
        u32(&b, (uint32_t)ncall);
        u32(&b, (uint32_t)(w[i].cols * w[i].n_mat));
        for (int m = 0; m < w[i].n_mat; m++)
            for (int j = 0; j < w[i].cols; j++) {
                float c = w[i].counts[m], v = w[i].sums[m * w[i].cols + j];
                if (c == 0) v = c = 1; /* "store 1 for partial data" */
                const float s = (v / c) * (float)ncall;
                put(&b, &s, 4);
            }
    }
    u32(&b, 7);
    u32(&b, (uint32_t)strlen("calib.txt")); /* an i32 length here, not GGUF's u64 */
    put(&b, "calib.txt", strlen("calib.txt"));
    return b;
}

static void wts_free(wt *w, int n) {
    for (int i = 0; i < n; i++) free(w[i].sums), free(w[i].counts);
}

/* b written to the test folder as name and opened: SL_OK with *f (the caller closes it), or the error in err.
 * b stays the caller's. */
static sl_status write_open(const buf *b, const char *name, imat_file **f, sl_error *err) {
    const char *p = test_path("%s/%s", test_tmpdir(), name);
    if (test_write(p, b->p, b->n)) return err_set(err, SL_EIO, "cannot write %s", p);
    return imat_open(p, f, err);
}

TEST(imatrix_reads_gguf) {
    wt w[2] = {{"blk.0.attn_q.weight", 64, 1, 0, 0}, {"blk.1.ffn_up_exps.weight", 32, 4, 0, 0}};
    wt_fill(&w[0], 1);
    wt_fill(&w[1], 2);
    w[1].counts[2] = 0; /* expert 2 saw no token */
    buf b = imatrix_gguf(w, 2);
    imat_file *f = NULL;
    sl_error err = {0};
    sl_status st = write_open(&b, "im.gguf", &f, &err);
    CHECKF(st == SL_OK, "%s", err.msg);
    int ok = !f->legacy && f->n == 2 && f->chunk_count == 7 && f->chunk_size == 512 && f->hash == XXH3_64bits(b.p, b.n);
    free(b.p);
    const float *iw = NULL;
    for (int i = 0; i < 2 && ok; i++)
        for (int m = 0; m < w[i].n_mat && ok; m++) {
            st = imat_weights(f, w[i].name, w[i].cols, w[i].n_mat, m, &iw, &err);
            if (st) break;
            if (w[i].counts[m] == 0) {
                ok = iw == NULL;
                continue;
            }
            for (int j = 0; j < w[i].cols && ok; j++) ok = iw && iw[j] == w[i].sums[m * w[i].cols + j] / w[i].counts[m];
        }
    const imat_entry *e = imat_find(f, "blk.1.ffn_up_exps.weight");
    ok = ok && !st && e && e->cols == 32 && e->n_mat == 4 && e->counts[3] == w[1].counts[3];
    imat_close(f);
    wts_free(w, 2);
    CHECKF(ok, "values differ from in_sum2 / counts (%s)", err.msg);
}

TEST(imatrix_reads_legacy) {
    wt w[2] = {{"blk.0.attn_q.weight", 64, 1, 0, 0}, {"blk.1.ffn_up_exps.weight", 32, 4, 0, 0}};
    wt_fill(&w[0], 3);
    wt_fill(&w[1], 4);
    buf b = imatrix_dat(w, 2);
    imat_file *f = NULL;
    sl_error err = {0};
    const sl_status st = write_open(&b, "im.dat", &f, &err);
    free(b.p);
    CHECKF(st == SL_OK, "%s", err.msg);
    int ok = f->legacy && f->n == 2 && f->chunk_count == 7, bad = -1;
    for (int i = 0; i < 2 && ok; i++) {
        for (int m = 0; m < w[i].n_mat && ok; m++) {
            const float *iw = NULL;
            ok = imat_weights(f, w[i].name, w[i].cols, w[i].n_mat, m, &iw, &err) == SL_OK && iw;
            for (int j = 0; j < w[i].cols && ok; j++) {
                const float want = w[i].sums[m * w[i].cols + j] / w[i].counts[m];
                /* (mean * ncall) / ncall in f32: within an ulp or two of the mean */
                if (!(fabsf(iw[j] - want) <= 4e-7f * want)) ok = 0, bad = j;
            }
        }
    }
    /* a legacy file does not say how many matrices an entry holds: 32 columns x 4 or 128 x 1 both read */
    const float *iw = NULL;
    ok = ok && imat_weights(f, "blk.1.ffn_up_exps.weight", 128, 1, 0, &iw, &err) == SL_OK && iw;
    imat_close(f);
    wts_free(w, 2);
    CHECKF(ok, "legacy values differ (column %d; %s)", bad, err.msg);
}

/* Every prefix of a valid file, and files with one field broken, fail with a message naming the file. */
TEST(imatrix_rejects_bad_files) {
    wt w[2] = {{"blk.0.attn_q.weight", 64, 1, 0, 0}, {"blk.1.ffn_up_exps.weight", 32, 4, 0, 0}};
    wt_fill(&w[0], 5);
    wt_fill(&w[1], 6);
    const char *p = test_path("%s/bad.imatrix", test_tmpdir());
    sl_error err = {0};
    imat_file *f = NULL;
    for (int fmt = 0; fmt < 2; fmt++) {
        buf b = fmt ? imatrix_dat(w, 2) : imatrix_gguf(w, 2);
        for (size_t cut = 0; cut < b.n; cut += cut < 600 ? 1 : 97) {
            if (fmt && cut >= b.n - (4 + 4 + 9)) break; /* the legacy trailer is optional */
            CHECK(!test_write(p, b.p, cut));
            memset(&err, 0, sizeof err);
            sl_status st = imat_open(p, &f, &err);
            if (st == SL_OK) imat_close(f);
            CHECKF(st == SL_EFORMAT && strstr(err.msg, p), "%s cut at %zu of %zu: status %d, '%s'",
                   fmt ? "dat" : "gguf", cut, b.n, (int)st, err.msg);
        }
        free(b.p);
    }
    /* a NaN, a negative sum, an in_sum2 without its counts, a model GGUF */
    buf b = imatrix_gguf(w, 2);
    size_t data = b.n - (32 + 256 + 32 + 512); /* where blk.0.attn_q.weight's data starts */
    const float nan = NAN, neg = -1.0f;
    struct {
        size_t at;
        const void *v;
        const char *want;
    } bad[] = {{data + 32 + 8, &nan, "in_sum2[0][2]"}, {data + 32 + 4, &neg, "in_sum2[0][1]"}, {data, &nan, "count 0"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        unsigned char *c = malloc(b.n);
        memcpy(c, b.p, b.n);
        memcpy(c + bad[k].at, bad[k].v, 4);
        CHECK(!test_write(p, c, b.n));
        free(c);
        sl_status st = imat_open(p, &f, &err);
        if (st == SL_OK) imat_close(f);
        CHECKF(st == SL_EFORMAT && strstr(err.msg, bad[k].want), "case %zu: %d '%s'", k, (int)st, err.msg);
    }
    free(b.p);
    wt one = {"blk.0.attn_q.weight", 64, 1, w[0].sums, w[0].counts};
    b = imatrix_gguf(&one, 1);
    unsigned char *c = memmem(b.p, b.n, "weight.counts", 13); /* renamed: an in_sum2 alone */
    CHECK(c);
    memcpy(c + 7, "c0unts", 6);
    CHECK(!test_write(p, b.p, b.n));
    free(b.p);
    sl_status st = imat_open(p, &f, &err);
    if (st == SL_OK) imat_close(f);
    CHECKF(st == SL_EFORMAT && strstr(err.msg, "'blk.0.attn_q.weight' has in_sum2 but no counts"), "%d '%s'", (int)st,
           err.msg);
    CHECK(!test_write(p, "GGUF\3\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24)); /* a GGUF without tensors */
    st = imat_open(p, &f, &err);
    if (st == SL_OK) imat_close(f);
    CHECKF(st == SL_EFORMAT && strstr(err.msg, "not an importance matrix"), "%d '%s'", (int)st, err.msg);
    st = imat_open(test_path("%s/no-such.imatrix", test_tmpdir()), &f, &err);
    CHECKF(st == SL_ENOENT, "%d '%s'", (int)st, err.msg);
    wts_free(w, 2);
}

TEST(imatrix_lookup_errors) {
    wt w[1] = {{"blk.1.ffn_up_exps.weight", 32, 4, 0, 0}};
    wt_fill(&w[0], 7);
    buf b = imatrix_gguf(w, 1);
    imat_file *f = NULL;
    sl_error err = {0};
    const sl_status st = write_open(&b, "look.gguf", &f, &err);
    free(b.p);
    CHECKF(st == SL_OK, "%s", err.msg);
    const float *iw = (const float *)1;
    sl_status a = imat_weights(f, "blk.1.ffn_down_exps.weight", 32, 4, 0, &iw, &err);
    int ok = a == SL_ENOENT && !iw && strstr(err.msg, "no entry 'blk.1.ffn_down_exps.weight'");
    sl_status c = imat_weights(f, "blk.1.ffn_up_exps.weight", 64, 4, 0, &iw, &err); /* wrong column count */
    ok = ok && c == SL_EMISMATCH && strstr(err.msg, "32 columns, the matrix 64");
    sl_status d = imat_weights(f, "blk.1.ffn_up_exps.weight", 32, 8, 0, &iw, &err); /* 4 experts, not 8 */
    ok = ok && d == SL_EMISMATCH && strstr(err.msg, "holds 4 matrices");
    imat_close(f);
    wts_free(w, 1);
    CHECKF(ok, "%d %d %d '%s'", (int)a, (int)c, (int)d, err.msg);
}

TEST(imatrix_gguf_names) {
    hf_ckpt *ck = NULL;
    sl_error err = {0};
    CHECKF(hf_open("tests/data/qwen3_next", &ck, &err) == SL_OK, "%s", err.msg);
    const fam_config *c = hf_config(ck);
    static const struct {
        const char *name;
        int layer, part;
        const char *want;
    } T[] = {
        {"layers.0.linear_attn.in_proj_qkvz", 0, 0, "blk.0.attn_qkv.weight"}, /* split by the converter: its first */
        {"layers.0.linear_attn.in_proj_ba", 0, 0, "blk.0.ssm_ba.weight"},
        {"layers.2.self_attn.q_proj", 0, 0, "blk.2.attn_q.weight"},
        {"layers.1.mlp.gate", 0, 0, "blk.1.ffn_gate_inp.weight"},
        {"lm_head", 0, 0, "output.weight"},
        {"embed_tokens", 0, 0, "token_embd.weight"},
        {NULL, 1, 1, "blk.1.ffn_up_exps.weight"},
        {NULL, 2, 2, "blk.2.ffn_down_exps.weight"},
    };
    char out[160];
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        int r = imat_gguf_name(c, T[i].name, T[i].layer, T[i].part, out, sizeof out);
        if (r || strcmp(out, T[i].want)) {
            hf_close(ck);
            CHECKF(0, "%s: got '%s' (%d), want '%s'", T[i].name ? T[i].name : "part", r ? "" : out, r, T[i].want);
        }
    }
    int r = imat_gguf_name(c, "layers.0.no_such", 0, 0, out, sizeof out);
    hf_close(ck);
    CHECK(r == -1);
}

/* ---- the quantisers -------------------------------------------------------------------------------------------- */

static const struct {
    dt_type dt;
    int group;
    dt_type sdt;
} QT[] = {{DT_Q8, 64, DT_BF16}, {DT_Q4, 32, DT_F16}, {DT_Q4, 64, DT_BF16}, {DT_Q4, 128, DT_F32}, {DT_Q3, 32, DT_BF16},
          {DT_Q3, 64, DT_BF16}, {DT_Q3, 128, DT_F16}, {DT_Q2, 128, DT_NONE}, {DT_Q2V, 128, DT_NONE}};
#define N_QT (sizeof QT / sizeof *QT)

/* The plain quantisers' bytes on a fixed input, as the code before weighting existed wrote them (commit 1817542):
 * q_quantize and q_quantize_imp without importances must keep them. */
static const uint64_t PINNED[N_QT] = {
    0x61538b02ef22ca3dull, 0x793ee9f982cb248eull, 0xb8a89eae3c82c10aull,
    0x667fb6a322368706ull, 0x21da4a6f0624ccf7ull, 0xecc5cf73ff6566f1ull,
    0x80b3f3b71b4a0f3dull, 0x2a8259c8d1793186ull, 0x1c3b769bcc7bc0ebull,
};

static void fixed_input(float *w, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        w[i] = ((float)(h % 1000) / 1000.0f - 0.5f) * (i % 37 == 0 ? 8.0f : 1.0f);
    }
}

TEST(imatrix_plain_bytes_unchanged) {
    const int rows = 8, cols = 256;
    float *w = malloc(sizeof(float) * rows * cols);
    fixed_input(w, rows * cols);
    for (size_t k = 0; k < N_QT; k++) {
        size_t n = (size_t)q_mat_bytes(QT[k].dt, rows, cols, QT[k].group, QT[k].sdt);
        unsigned char *a = calloc(1, n), *b = malloc(n);
        memset(b, 0xa5, n); /* poisoned: every byte must be written */
        q_quantize(QT[k].dt, w, rows, cols, QT[k].group, QT[k].sdt, 0x1234u, a);
        q_quantize_imp(QT[k].dt, w, rows, cols, QT[k].group, QT[k].sdt, 0x1234u, NULL, b);
        const uint64_t ha = XXH3_64bits(a, n);
        const int same = !memcmp(a, b, n);
        free(a), free(b);
        if (ha != PINNED[k] || !same) {
            free(w);
            CHECKF(0, "%s group %d: xxh3 %016llx, pinned %016llx; imp NULL equal: %d", dt_name(QT[k].dt), QT[k].group,
                   (unsigned long long)ha, (unsigned long long)PINNED[k], same);
        }
    }
    free(w);
}

static double gauss(void) {
    double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Fresh random rows and importances as activations give them (log-normal, a few channels 30-300x the rest): every
 * row's weighted error is at most the plain quantiser's (the plain choice is among the weighted one's candidates),
 * and the total is lower by a clear margin; equal importances in a group change little. */
TEST(imatrix_weighting_lowers_weighted_error) {
    const int rows = 24, cols = 256;
    srand(test_seed());
    float *w = malloc(sizeof(float) * rows * cols), imp[256];
    for (int i = 0; i < rows * cols; i++) w[i] = (float)(gauss() * 0.02);
    for (int j = 0; j < cols; j++) imp[j] = (float)exp(gauss()) * (rand() % 23 == 0 ? 30.0f + (float)(rand() % 270) : 1.0f);
    for (size_t k = 0; k < N_QT; k++) {
        size_t n = (size_t)q_mat_bytes(QT[k].dt, rows, cols, QT[k].group, QT[k].sdt);
        void *a = malloc(n), *b = malloc(n);
        q_quantize(QT[k].dt, w, rows, cols, QT[k].group, QT[k].sdt, 0x77u, a);
        q_quantize_imp(QT[k].dt, w, rows, cols, QT[k].group, QT[k].sdt, 0x77u, imp, b);
        tn_mat ma, mb;
        q_mat_bind(&ma, a, QT[k].dt, rows, cols, QT[k].group, QT[k].sdt, 0x77u);
        q_mat_bind(&mb, b, QT[k].dt, rows, cols, QT[k].group, QT[k].sdt, 0x77u);
        double ta = 0, tb = 0;
        int worse = -1;
        for (int r = 0; r < rows; r++) {
            const double ea = q_row_werr(&ma, r, w + (size_t)r * cols, imp), eb = q_row_werr(&mb, r, w + (size_t)r * cols, imp);
            if (eb > ea * (1 + 1e-9)) worse = r;
            ta += ea, tb += eb;
        }
        free(a), free(b);
        /* margins seen: q8 / q4 -15..-35%, q3 -20%, q2 / q2v -15..-25% */
        if (worse >= 0 || !(tb < 0.95 * ta)) {
            free(w);
            CHECKF(0, "%s group %d (seed %u): weighted %.4g vs plain %.4g (row %d worse)", dt_name(QT[k].dt), QT[k].group,
                   test_seed(), tb, ta, worse);
        }
    }
    free(w);
}

/* ---- the pack ----------------------------------------------------------------------------------------------------- */

static sl_status pack_q4(const char *out, const char *imatrix, sl_error *err) {
    sl_pack_params p = sl_pack_params_default();
    p.hash_sources = 0;
    p.quant = SL_QUANT_Q4;
    p.group = 32;
    p.imatrix = imatrix;
    return sl_pack("tests/data/qwen3_next", out, &p, err);
}

static uint64_t tensor_hash(const slc_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->t[i].name, name)) return f->t[i].hash;
    return 0;
}

/* An imatrix for three of the fixture's weights (layer 2's 16 experts' up_proj one by one; layer 1 is dense): those matrices change, the others
 * keep the plain pack's bytes, the manifest records the file; verify --source refuses what it cannot re-derive; an
 * entry of the wrong width, or a file for another model, fails the pack and leaves no file. */
TEST(imatrix_pack_weights_what_it_covers) {
    const char *dir = test_tmpdir();
    const char *plain = test_path("%s/imp-plain.sluice", dir), *wtd = test_path("%s/imp-w.sluice", dir);
    const char *im = test_path("%s/fixture.imatrix.gguf", dir), *bad = test_path("%s/imp-bad.sluice", dir);
    sl_error err = {0};
    CHECKF(pack_q4(plain, NULL, &err) == SL_OK, "%s", err.msg);
    wt w[3] = {{"blk.0.attn_qkv.weight", 64, 1, 0, 0}, {"blk.2.ffn_up_exps.weight", 64, 16, 0, 0},
               {"blk.2.attn_q.weight", 64, 1, 0, 0}};
    for (int i = 0; i < 3; i++) wt_fill(&w[i], 11 + (unsigned)i);
    for (int j = 0; j < 64; j += 9) w[0].sums[j] *= 200.0f; /* outlier channels: the weighting must move codes */
    buf b = imatrix_gguf(w, 3);
    CHECK(!test_write(im, b.p, b.n));
    const uint64_t fh = XXH3_64bits(b.p, b.n);
    free(b.p);
    CHECKF(pack_q4(wtd, im, &err) == SL_OK, "%s", err.msg);
    slc_file a, c;
    CHECKF(slc_open(plain, &a, &err) == SL_OK, "%s", err.msg);
    if (slc_open(wtd, &c, &err)) {
        slc_close(&a);
        CHECKF(0, "%s", err.msg);
    }
    int changed = tensor_hash(&a, "layers.0.linear_attn.in_proj_qkvz") != tensor_hash(&c, "layers.0.linear_attn.in_proj_qkvz") &&
                  tensor_hash(&a, "layers.2.self_attn.q_proj") != tensor_hash(&c, "layers.2.self_attn.q_proj");
    int kept = 1;
    for (int i = 0; i < a.n_tensors; i++)
        if (strcmp(a.t[i].name, "layers.0.linear_attn.in_proj_qkvz") && strcmp(a.t[i].name, "layers.2.self_attn.q_proj"))
            kept &= a.t[i].hash == tensor_hash(&c, a.t[i].name);
    const cJSON *io = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c.manifest, "pack"), "imatrix");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(io, "xxh3"), *nw = cJSON_GetObjectItemCaseSensitive(io, "weighted");
    char hex[17];
    slc_hash_hex(fh, hex);
    const int rec = cJSON_IsString(x) && !strcmp(x->valuestring, hex) && cJSON_IsNumber(nw) && nw->valueint == 18 &&
                    !cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(a.manifest, "pack"), "imatrix");
    slc_close(&a);
    slc_close(&c);
    CHECKF(changed && kept && rec, "changed %d kept %d recorded %d", changed, kept, rec);
    CHECKF(sl_verify(wtd, NULL, NULL, NULL, &err) == SL_OK, "%s", err.msg);
    sl_status st = sl_verify(wtd, "tests/data/qwen3_next", NULL, NULL, &err);
    CHECKF(st == SL_EUNSUPPORTED && strstr(err.msg, "importance matrix"), "%d '%s'", (int)st, err.msg);

    w[2].cols = 32; /* blk.2.attn_q.weight 32 wide: the model's is 64 */
    b = imatrix_gguf(w, 3);
    CHECK(!test_write(im, b.p, b.n));
    free(b.p);
    st = pack_q4(bad, im, &err);
    CHECKF(st == SL_EMISMATCH && strstr(err.msg, "layers.2.self_attn.q_proj") && !test_exists(bad), "%d '%s'", (int)st,
           err.msg);
    wt other = {"blk.9.attn_q.weight", 64, 1, w[0].sums, w[0].counts};
    b = imatrix_gguf(&other, 1);
    CHECK(!test_write(im, b.p, b.n));
    free(b.p);
    st = pack_q4(bad, im, &err);
    CHECKF(st == SL_EMISMATCH && strstr(err.msg, "no entry for any matrix") && !test_exists(bad), "%d '%s'", (int)st,
           err.msg);
    wts_free(w, 3);
}
