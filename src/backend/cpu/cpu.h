/*
 * cpu.h — what the files of the CPU backend share (src/backend/cpu/): its context and the entry points of
 * cpu_mix.c (attention, DeltaNet), cpu_mla.c (MLA) and cpu_moe.c (routing, FFNs, combine) that cpu.c puts in the
 * table.
 * Not for use outside src/backend/cpu/.
 *
 * The CPU backend is the oracle (backend.h): its arithmetic is the one kernels.h fixes, and every loop
 * here is what src/model/ ran itself before the seam, moved, not rewritten.
 */
#ifndef SL_BACKEND_CPU_H
#define SL_BACKEND_CPU_H

#include "backend/backend.h"

#define ROPE_MEMO_TOK 64 /* tokens of the RoPE memo (a micro-batch) */

typedef struct cpu_ctx {
    const kern_ops *ops;
    pool_t *pool;
    float *scratch;      /* [n_slots][slot_floats]: per-thread scratch of the mixers (reserve) */
    size_t slot_floats;
    int n_slots;
    /* RoPE's cos and sin of the last rope call's positions, reused by the next call at the same positions
     * and frequencies (q and then k of one micro-batch): [ROPE_MEMO_TOK][512] each */
    float *rope_c, *rope_s, rope_inv[512], rope_af;
    int rope_pos0, rope_n, rope_rot;
    sl_error err;        /* the first failure since the last sync (status SL_OK: none); msg: errmsg() */
    void *ex_buf;        /* cpu_experts.c's scratch, ex_bytes (grown on demand, freed at destroy) */
    size_t ex_bytes;
} cpu_ctx;

static inline cpu_ctx *cpu_of(be_backend *be) { return be->ctx; }
/* Records a failure (the first since the last sync wins). */
void cpu_fail(be_backend *be, sl_status status, const char *what);

/* RoPE's cos and sin of position pos (backend.h rope: angle = pos * inv_freq in f32, times attn_factor) into c, s
 * [rot / 2]; one head's rotation of x's first rot dims (interleave as backend.h rope). */
void cpu_rope_cs(int rot, const float *inv_freq, float attn_factor, int pos, float *c, float *s);
void cpu_rope_one(float *x, int rot, const float *c, const float *s, int interleave);

void cpu_attention(be_backend *be, const be_attn *a);
/* DeepSeek-V4 (cpu_dsv4.c) */
void cpu_hc_mix(be_backend *be, const be_hc *h);
void cpu_hc_post(be_backend *be, float *x, const float *out, const float *mix, size_t ldm, int n, int hc, int H);
void cpu_compress(be_backend *be, const be_cmp *c);
void cpu_index_topk(be_backend *be, const be_index *x);
void cpu_mla(be_backend *be, const be_mla *a);
int cpu_mla_out(be_backend *be, const be_mla *a);
void cpu_dsa_select(be_backend *be, const be_dsa *d);
void cpu_layernorm(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int dim, const float *w,
                   const float *b, float eps);
void cpu_dn_conv(be_backend *be, const be_dn *d);
void cpu_dn_gates(be_backend *be, const be_dn *d);
void cpu_dn_step(be_backend *be, const be_dn *d);
void cpu_dn_chunk(be_backend *be, const be_dn *d);
void cpu_dn_norm(be_backend *be, const be_dn *d);
void cpu_kda_gates(be_backend *be, const be_dn *d);
void cpu_short_conv(be_backend *be, const be_sconv *s);
void cpu_mamba2(be_backend *be, const be_mamba *m);

sl_status cpu_route(be_backend *be, const be_route *r);
void cpu_ffn(be_backend *be, const be_ffn *f);
void cpu_ffn_multi(be_backend *be, const be_ffn *f, int n);
sl_status cpu_ffn_host(be_backend *be, pool_t *pool, const be_ffn *f); /* cpu_ffn: the host is the device */
int cpu_ffn_experts(be_backend *be, const be_experts *q); /* cpu_experts.c */
void cpu_combine(be_backend *be, const be_combine *c);
void cpu_combine_rows(be_backend *be, float *out, int H, int k, const int *tok, const int *slot, const float *top_w,
                      const float *y, int cnt);

#endif
