/*
 * backend.h — the backend seam (issue 13 §1): what the forward pass (src/model/) asks of the machine that
 * computes, as one table of function pointers at block level, after llama.cpp's
 * ggml/src/ggml-backend-impl.h (a backend owns its buffers; ops take its memory, never assume the host's)
 * and SQLite's sqlite3_io_methods. docs/ARCHITECTURE.md tells the story; this header is the contract.
 *
 * The CPU backend (src/backend/cpu/) is today's code and the oracle: every other backend is tested against
 * it on random inputs and on the fixtures. A backend is added by writing its table (src/backend/<name>/)
 * and naming it in be_open (backend.c), the only place with an #ifdef.
 *
 * Memory. "Backend memory" is what alloc(BE_BUF_DEVICE) returns (host memory for the CPU backend, VRAM for
 * CUDA). Every float * an op reads or writes is backend memory unless its comment says HOST; index arrays
 * (tokens, expert ids, token lists) and routing weights are always HOST memory, as are the RoPE frequency
 * table. Weights (tn_mat, tn_expert, the f32 vectors of the model) point into backend memory. When
 * is_host is 1 the backend's memory is host memory, so the forward pass may hand it the caller's
 * buffers (logits) directly.
 Errors. Compute ops return nothing: a failing op records the first failure, and sync() returns it (SL_OK
 * or a negative sl_status, the message in errmsg()) and clears it; ops after a failure may be skipped: a
 * device queue's way (CUDA reports a kernel's fault at the next synchronisation), kept because an op that
 * returned a status would have to wait for its work. The forward pass syncs at the end of every block and
 * wherever the host reads a result (route does so itself), and turns a failure into its own sl_status +
 * sl_error there (be_sync); nothing above the forward pass sees errmsg(). Only alloc and reserve allocate;
 * no op allocates.
 *
 * Exactness (docs/QUANT.md, kernels.h): every op computes each output from its own row, token and head
 * in an order fixed by the shapes, never by n, the split over threads or the batch, so a token in a batch
 * equals the token alone bitwise, results are identical for any thread count, and streamed equals
 * resident. The CPU backend keeps the arithmetic of kernels.h exactly; another backend's f32 path must stay
 * within 1e-4 relative of it (issue 13 §2), and be bitwise repeatable on its own.
 *
 * Layouts: x [n][ld] is n rows of ld floats; "head h" of a row starts at h * head_stride floats. Shapes
 * follow PyTorch: W [rows = out][cols = in], y = W x.
 */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "family/config.h"
#include "kernels/kernels.h"
#include "sluice.h"
#include "util/tensor.h"
#include "util/threadpool.h"

typedef struct be_backend be_backend;

/* alloc flags */
enum {
    BE_BUF_DEVICE = 0, /* the backend's own memory, what ops compute on (CPU: the heap) */
    BE_BUF_PINNED = 1, /* host memory the backend copies from fastest (CUDA: cudaHostAlloc) and I/O engines
                          read into with O_DIRECT: 4096-aligned, its pages touched at allocation so no read
                          pays a page fault (CPU: anonymous memory on transparent huge pages, stream/cache.c's
                          expert slots) */
};
/* copy directions */
enum {
    BE_H2D = 0,
    BE_D2H = 1,
    BE_D2D = 2,
    BE_D2H_ASYNC = 3, /* BE_D2H queued after the compute ops so far, not waited for: dst (pinned memory) holds the
                         bytes once a fence from mark() taken after it has passed (backends with mark: CUDA);
                         where copies are synchronous (the CPU) it is BE_D2H */
};

/* Expert FFN kinds (config.h tn_expert_kind) */
enum { BE_FFN_SWIGLU = 0, BE_FFN_GPTOSS = 1, BE_FFN_SWIGLU_CLAMP = 2, BE_FFN_GEGLU = 3, BE_FFN_SWIGLU_FUSED = 4,
       BE_FFN_SWIGLU_CLIP = 5 };

/* Full (softmax) attention of one micro-batch with its KV cache (attention op). q/k already have their
 * biases, q/k norms and RoPE. The op first stores the n new K/V rows at positions pos0 .. pos0+n-1 (row
 * p % cap of the caches), then for every (token t, head h): scores q . k_p * scale against positions
 * p0 .. pos (pos = pos0 + t; p0 = pos - window + 1 for a sliding layer, pos - pos % chunk for a chunked one,
 * else 0), softmax in f32 with its
 * sum in double and, with sinks, sinks[h] as one more logit (in the max and the denominator, its value
 * dropped: modeling_gpt_oss.py eager_attention_forward), the weighted sum of V rows in increasing position,
 * and, gated, times sigmoid(gate) element-wise. KV head of query head h: h / (n_heads / n_kv_heads). */
/* Rows a backend decodes at a time from a KV cache that is not f32: the attention op's per-thread scratch
 * (reserve) holds BE_KV_TILE * head_dim floats of them besides the scores (model/forward.c slot_floats). */
#define BE_KV_TILE 64
typedef struct be_attn {
    const float *q; /* [n][ldq]; head h at h * qstride: query [hd], then (gated) gate [hd] */
    size_t ldq;
    int qstride, gated;
    const float *k, *v; /* new rows [n][ldkv] / [n][ldv], KV head g at g * hd / g * vd */
    size_t ldkv, ldv;    /* ldv 0: ldkv */
    int v_dim;           /* vd, a value head's size (MiMo-V2-Flash: below hd); 0: hd. out's heads are vd apart */
    /* [cap] rows each of n_kv_heads heads, keys stored as kv_type and values as kv_type_v (quant/kv.h: K head g at
     * g * kv_head_bytes(kv_type, hd), V head g at g * kv_head_bytes(kv_type_v, vd)); the op encodes the new rows
     * (kv_encode_head) and computes on the decoded values (kv_decode_heads), the new rows' included, so the
     * result is the f32 op's on the cache's values */
    void *k_cache, *v_cache;
    sl_kv_type kv_type, kv_type_v;
    int cap;
    int n, pos0, n_heads, n_kv_heads, head_dim;
    int window;          /* > 0: a sliding layer of this many positions (the query's own included) */
    int chunk;           /* > 0 (window 0): a chunked layer, keys of the query's chunk of this many positions */
    const float *sinks;  /* [n_heads] sink logits, or NULL */
    float scale;
    float *out;          /* [n][ldo]; head h's output at h * vd */
    size_t ldo;
    /* optional (DeepSeek-V4; one KV head): keys that are also values after the cache's, rows [*][head_dim]
     * (compressed entries); token t at pos sees entries 0 .. (pos + 1) / extra_rate - 1, all of them, or with
     * extra_idx only its extra_k indices that are >= 0 (ascending); scored, weighted and summed after the
     * cache's keys, in that order. NULL: none */
    const float *extra;
    int extra_rate;
    const int *extra_idx; /* [n][extra_k] */
    int extra_k;
} be_attn;

/* DeepSeek-V4's hyper-connection weights of n tokens (hc_mix op; model/hc.c has the algebra): mix holds the
 * products of fn with the RMS-normed flattened streams; out in place: pre (hc) = sigmoid(m * scale[0] + base) +
 * eps, post (hc) = 2 sigmoid(m * scale[1] + base), comb (hc x hc, row j = input stream) = softmax over each row
 * of m * scale[2] + base, + eps, its columns normalised, then iters - 1 times its rows and its columns (Sinkhorn,
 * "+ eps" in every denominator); head (hc_head): pre only, from scale[0]. y = sum_j pre_j x_j (streams j of H). */
typedef struct be_hc {
    int n, hc, H, iters, head;
    float eps;
    const float *x;     /* [n][hc * H] */
    float *mix;         /* [n][ldm] */
    size_t ldm;
    const float *base, *scale;
    float *y;           /* [n][H] */
} be_hc;

/* A compressor's entries (compress op; model/dsv4.c): windows w0 .. w0 + n_win - 1 of rate positions, position p's
 * projections in ring row p % cap as [kv (c d) | gate (c d)] (c = 2 with overlap, else 1). Entry w, per feature i
 * < d: a softmax over its slots of gate + ape[slot] weighting kv, the slots being (overlap) the previous window's
 * first halves [kv[i], gate[i] + ape[s][i]] (none for w = 0) then this window's second halves [kv[d+i], gate[d+i]
 * + ape[s][d+i]], else this window's [kv[i], gate[i] + ape[s][i]]; then RMSNorm (norm_w, eps), then RoPE on
 * adjacent pairs of the last rot dims at position w * rate; into out + w * ldo. */
typedef struct be_cmp {
    const float *ring;
    int cap;
    size_t ldr;
    int d, overlap, rate, w0, n_win;
    const float *ape;     /* [rate][c d] */
    const float *norm_w;
    float eps;
    int rot;
    const float *inv_freq; /* HOST [rot / 2] */
    float attn_factor;
    float *out;
    size_t ldo;
} be_cmp;

/* An indexer's choice of keys (index_topk op; DeepSeek-V4's lightning indexer, the DSA indexers): token t (at
 * pos0 + t) sees keys 0 .. (pos + 1) / rate - 1; their score sum_h (w[t][h] w_scale) (relu(q[t][h] . k) scale)
 * (heads in order, f32); idx[t] = the topk best (ties to the lower index; all of them when fewer), ascending,
 * -1 after. */
typedef struct be_index {
    const float *q;     /* [n][ldq], head h at h * d */
    size_t ldq;
    const float *w;     /* [n][ldw] */
    size_t ldw;
    const float *keys;  /* [*][ldk] */
    size_t ldk;
    int n, pos0, n_heads, d, rate, topk;
    float scale, w_scale;
    int *idx;           /* [n][topk] */
} be_index;

/* Multi-head latent attention of one micro-batch with its compressed cache (mla op; src/model/mla.c has
 * the algebra). Stores ckv's n rows (ldc floats each: [c (r) | k_pe (dr)] normed and roped, then whatever
 * else the row holds) at cache rows pos0 .. pos0+n-1;
 * builds the absorbed queries q_abs[t][h] = [W_uk_h^T q_nope (r) | q_pe (dr)] (W_uk_h = rows h*(dn+dv) ..
 * +dn of kv_b, each row taken as f32 once and added in row order); then per (t, h) scores q_abs . cache_p
 * * scale over positions 0 .. pos0+t (with sel: only the positions of token t's row of sel), softmax (f32, sum in
 * double), and lat[t][h] = the weighted sum of the cached c rows in increasing position. */
typedef struct be_mla {
    const float *q; /* [n][ldq], head h at h * (dn + dr): [q_nope (dn) | q_pe (dr)] */
    size_t ldq;
    const float *ckv; /* [n][ldc] */
    float *cache;     /* [n_ctx][ldc] */
    int ldc;          /* floats of a cache row, >= r + dr */
    /* NULL, or DSA's choice (dsa_select): token t attends to positions sel[t * sel_ld + i], i < min(sel_k, pos0+t+1),
     * ascending */
    const int32_t *sel;
    int sel_ld, sel_k;
    const tn_mat *kv_b; /* [n_heads * (dn + dv)][r] */
    int n, pos0, n_heads, r, dr, dn, dv;
    float scale;
    float *q_abs; /* [n][n_heads][r + dr] out (scratch for the caller) */
    float *lat;   /* [n][n_heads][r] out; mla_out's input */
    float *out;   /* mla_out's output [n][ldo]: head h's dv values at h * dv (mla ignores it) */
    size_t ldo;
} be_mla;

/* DeepSeek sparse attention's indexer (dsa_select op; src/model/mla.c, after transformers'
 * models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Indexer): stores the n new index keys (k [n][ldk], dim
 * floats each, normed and roped) at cache rows pos0 .. pos0+n-1 (offset koff of rows of ldc floats); then for
 * every token t at pos = pos0+t the score of each position p <= pos,
 *   s_p = sum_h (w[t][h] * wscale) * relu(scale * q[t][h] . key_p)   (heads in order, f32; the dot in double),
 * and sel[t * sel_ld ..] = the min(topk, pos+1) positions of the highest scores, ascending (a tie at the cut goes
 * to the lower position). */
typedef struct be_dsa {
    const float *q;   /* [n][ldq]: head h at h * dim */
    size_t ldq;
    const float *w;   /* [n][ldw]: the heads' weights (weights_proj x) */
    size_t ldw;
    const float *k;   /* [n][ldk] */
    size_t ldk;
    float *cache;     /* [n_ctx][ldc]: the key of position p at p * ldc + koff */
    int ldc, koff;
    int n, pos0, heads, dim, topk;
    float scale, wscale;
    int32_t *sel;     /* [n][sel_ld] out */
    int sel_ld;
} be_dsa;

/* One Gated DeltaNet layer's micro-batch (docs/MATH.md, Gated DeltaNet; src/model/deltanet.c); the five
 * dn_* ops read and write the fields their comments name. cq = 2*nk*dk + nv*dv; value head h reads key
 * head h / (nv / nk). */
typedef struct be_dn {
    int n, nk, nv, dk, dv, conv_k;
    /* dn_conv: causal depthwise conv1d + SiLU over [conv_in_state (K-1 rows, oldest first); conv_in] into
     * conv_out, the new state (the last K-1 pre-conv rows) into conv_out_state */
    const float *conv_in;        /* [n][cq] pre-conv q | k | v */
    const float *conv_w;         /* [cq][K] */
    const float *conv_parts[3];  /* or (conv_w NULL) q's, k's, v's kernels [nk*dk | nk*dk | nv*dv][K] (Kimi) */
    const float *conv_in_state;  /* [K-1][cq] */
    float *conv_out_state;       /* [K-1][cq] */
    float *conv_out;             /* [n][cq]; dn_gates normalises its q, k in place */
    /* dn_gates: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias) into gates; q L2-normalised times
     * dk^-1/2, k L2-normalised (sum of squares in double, + 1e-6) */
    const float *ba;             /* [n][2nv]: b (nv) then a (nv); grouped: per key head [b (r) | a (r)] */
    int ba_grouped;              /* qwen3_next's in_proj_ba layout */
    const float *A_log, *dt_bias; /* [nv] */
    float *gates;                /* [n][2nv]: beta (nv) then g (nv) */
    /* dn_step (token recurrence: S <- exp(g) S; m = S^T k; d = beta (v - m); S += k d^T; o = S^T q) and
     * dn_chunk (docs/MATH.md, Chunked form: the whole micro-batch, n <= 64, as one chunk; ~1e-6 of dn_step): the
     * state ssm_in -> ssm_out, outputs into out */
    const float *ssm_in;         /* [nv][dk][dv] entering state */
    float *ssm_out;              /* [nv][dk][dv] leaving state */
    float *out;                  /* [n][ldo], value head h at h * dv */
    size_t ldo;
    /* Kimi Delta Attention (kda; the kda_gates op instead of dn_gates): ba [n][nv + nv*dk] holds b then the forget
     * gate's f per channel; gates [n][nv + nv*dk] gets beta = sigmoid(b) then g = -exp(A_log[h]) softplus(f +
     * dt_bias[h*dk + i]) per channel (dt_bias [nv*dk]); dn_step decays S's row i by exp(g_i), not one exp(g) per
     * head; dn_norm gates with sigmoid(z), not silu(z). kda_lower < 0 (Bailing hybrid's bounded gate): g =
     * kda_lower * sigmoid(exp(A_log[h]) (f + dt_bias[h*dk + i])) instead */
    int kda;
    float kda_lower;
    /* dn_norm: per value head, out = rmsnorm(out) (plain weight norm_w [dv], eps) * silu(z) */
    const float *z;              /* [n][nv*dv] */
    const float *norm_w;
    float eps;
} be_dn;

/* One LFM2 short-convolution micro-batch (short_conv op; modeling_lfm2_moe.py Lfm2MoeShortConv): bcx rows are
 * in_proj's [B | C | x] (ch each); per channel c, u = B * x (written over x), y_t = sum_j w[c][j] u_{t-K+1+j} with
 * u of the positions before the batch from state_in (K-1 rows, oldest first), out = C * y; state_out the last K-1
 * rows of u. */
typedef struct be_sconv {
    int n, ch, k;
    float *bcx;              /* [n][ldb] */
    size_t ldb;
    const float *w;          /* [ch][k] */
    const float *state_in;   /* [k-1][ch] */
    float *state_out;        /* [k-1][ch] */
    float *out;              /* [n][ldo] */
    size_t ldo;
} be_sconv;

/* One Mamba2 micro-batch (mamba2 op; modeling_granitemoehybrid.py GraniteMoeHybridMambaLayer, its torch path): in
 * rows [gate (nh hd) | x B C (ch = nh hd + 2 G N) | dt (nh)]; x B C through the causal depthwise conv (K taps, bias)
 * and SiLU into conv_out (state: the last K-1 pre-conv rows); per head h (group h / (nh / G)): dt = softplus(dt +
 * dt_bias), S = exp(dt * -exp(A_log)) S + dt x B^T, y = S C + D x; then y * silu(gate), RMS-normed per group of
 * nh hd / G with norm_w, into out. S [nh][hd][N] from ssm_in to ssm_out. */
typedef struct be_mamba {
    int n, nh, hd, g, ns, k;
    const float *in;         /* [n][ldi] */
    size_t ldi;
    const float *conv_w, *conv_b; /* [ch][k], [ch] */
    const float *conv_in_state;   /* [k-1][ch] */
    float *conv_out_state;        /* [k-1][ch] */
    float *conv_out;              /* [n][ch] scratch */
    const float *A_log, *dt_bias, *D; /* [nh] */
    const float *ssm_in;          /* [nh][hd][ns] */
    float *ssm_out;
    const float *norm_w;          /* [nh hd] */
    float eps;
    float *out;                   /* [n][ldo] */
    size_t ldo;
} be_mamba;

/* Routing of n rows (route op): cfg->router's rule (config.h; moe.c's comment has each) or cfg's uniform
 * routing, per row. top_e/top_w [n][k] (HOST) get the chosen experts sorted by expert index and their
 * weights. hint: instead, the plain top-k of the logits in the order taken (-1 past the last finite
 * one) for the next layer's prefetch; top_w is not touched (may be NULL). logits are clobbered. */
typedef struct be_route {
    const fam_config *cfg;
    int layer, n, hint;
    float *logits;       /* [n][E] */
    const float *bias;   /* [E] e_score_correction_bias, or NULL */
    /* SL_ROUTER_SQRTSOFTPLUS on a hash layer: the rows' token ids (HOST [n]) and the layer's tid2eid [V][k]
     * (expert ids as floats); NULL otherwise */
    const int32_t *tokens;
    const float *tid2eid;
    const float *expert_scale; /* [E] the chosen experts' weights times these, last (Gemma 4), or NULL */
    int *top_e;          /* HOST [n][k] */
    float *top_w;        /* HOST [n][k] */
} be_route;

/* One FFN over x's rows (ffn op): BE_FFN_SWIGLU y = down(silu(gate x) * up x); BE_FFN_GEGLU y = down(gelu_tanh(gate
 * x) * up x), gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma 4); BE_FFN_SWIGLU_FUSED
 * gu = gate_up x [n][2I] (g scratch), y = down(silu(gu[:I]) * gu[I:]) (Llama 4); BE_FFN_GPTOSS
 * (modeling_gpt_oss.py GptOssExperts) gu = gate_up x + gate_up_bias, rows interleaved (gate even, up odd),
 * gate clamped above at limit, up to [-limit, limit], act = (up + 1) * gate * sigmoid(1.702 gate), y =
 * down act + down_bias; BE_FFN_SWIGLU_CLIP (modeling_bailing_hybrid.py BailingHybridExperts._apply_gate) y =
 * down(min(silu(gate x), limit) * clamp(up x, +-limit)). down's input is an activation of its own (mid_buf, int8
 * as x's rule: kernels.h). */
typedef struct be_ffn {
    int kind;
    float limit;          /* BE_FFN_GPTOSS's swiglu_limit, the clamp's, the clip's */
    const tn_expert *w;   /* its parts: gate, up, down, or gate_up, down and the two biases */
    kern_act *x;          /* [n][H] input, n = x->n_tok <= 64 */
    int inter;            /* I */
    float *g, *u;         /* [n][inter] scratch each (GPTOSS: g [n][2I]) */
    void *mid_buf;        /* kern_act_bytes(n, inter) bytes for down's input */
    int int8;             /* down's input takes the int8 kernels (q8/q4 down) */
    float *y;             /* [n][ldy] */
    size_t ldy;
} be_ffn;

/* The MoE block's sum (combine op), per row t < n, in this order: out = ((0 + w[t][0] y[t][0]) + w[t][1]
 * y[t][1]) + ... (slots in expert order, route's), or out kept as it is when w is NULL; then, with a shared
 * expert, out += sigmoid(sh_gate[t]) * sh_y[t] (gate 1 when sh_gate is NULL). */
typedef struct be_combine {
    int n, k, H;
    const float *w;       /* HOST [n][k], or NULL */
    const float *w_dev;   /* or backend memory [n][k] (moe_resident's) */
    const float *y;       /* [n][k][H] routed outputs by slot */
    const float *sh_y;    /* [n][H], or NULL: no shared expert */
    const float *sh_gate; /* [n] the shared gate's logits, or NULL */
    float *out;           /* [n][H] */
} be_combine;

/* One batch of a layer-major MoE block's routed experts (moe_batch op): the (token, slot) pairs of top_e whose expert
 * is one of es[0 .. m) (a run of the layer's ascending list), each over its token's row of h. */
typedef struct be_moe_batch {
    int n, k, E, H, I;    /* rows, experts a row, experts of the layer, hidden, moe_inter */
    const float *h;       /* [n][H] the block's normed input */
    const int *top_e;     /* HOST [n][k] the layer's choice, ascending in each row (route's); -1: no expert to run */
    const float *top_w;   /* HOST [n][k] its weights */
    const int *es;        /* HOST [m] the batch's experts, ascending */
    const tn_expert *ex;  /* HOST [m] their parts, in backend memory (the device tier's slots) */
    int m;
    int first, last;      /* the layer's first batch (nothing of the layer queued yet); its last */
    float *out;           /* [n][H]: the last batch writes the slots' weighted sum, combine's order */
    float limit;          /* 0: SwiGLU experts (gate, up, down); > 0: gpt-oss's (BE_FFN_GPTOSS, its swiglu_limit) */
} be_moe_batch;

/* Several resident SwiGLU experts of a MoE block over their rows (ffn_experts op): pairs start[i] .. start[i + 1]
 * of tok / slot are expert i's (token, slot) pairs, each over its token's row of h. */
typedef struct be_experts {
    int n, k, H, I;        /* rows of h, experts a row, hidden, moe_inter */
    int m;                 /* experts */
    const tn_expert *ex;   /* HOST [m] their parts, in backend memory, in ascending expert order */
    const int *start;      /* HOST [m + 1] */
    const int *tok, *slot; /* HOST [start[m]] */
    const float *top_w;    /* HOST [n][k] the weights (out's) */
    const float *h;        /* [n][H] */
    int int8;              /* the int8-activation kernels for the input rows and the down inputs (else not taken) */
    float *out;            /* [n][H] += top_w[tok][slot] * y of each pair, a row's pairs in increasing pair order; */
    float *cells;          /* or (out NULL) y of each pair into row tok * k + slot of cells [..][H] */
} be_experts;

struct be_backend {
    const char *name; /* "cpu", "cuda" */
    int is_host;      /* backend memory is host memory */
    void *ctx;
    unsigned kv_types; /* the KV cache types (sluice.h sl_kv_type) its attention op takes: bit 1u << t; 0 means
                          SL_KV_F32 only. A model opened with another is refused, naming the type */
    int kv_split;      /* 1: its attention op takes keys and values of different types (be_attn kv_type_v) */

    /* ---- buffers ---- */
    /* n bytes of memory of the given kind (BE_BUF_*), or NULL. Not zeroed. */
    void *(*alloc)(be_backend *be, size_t bytes, int flags);
    /* Frees what alloc returned with the same bytes and flags; NULL is a no-op. */
    void (*free)(be_backend *be, void *p, size_t bytes, int flags);
    /* Copies bytes (BE_H2D: src host, dst backend memory; BE_D2H; BE_D2D); ordered with the compute ops.
     * Pinned memory counts as host memory. */
    void (*copy)(be_backend *be, void *dst, const void *src, size_t bytes, int dir);
    /* p[0 .. bytes) = 0 (backend memory). */
    void (*zero)(be_backend *be, void *p, size_t bytes);
    /* Waits for the queued work; SL_OK, or the first failure since the last sync (cleared; its message stays
     * in errmsg() until the next failure). be_sync brings it across the layer boundary as an sl_error. */
    sl_status (*sync)(be_backend *be);
    /* Optional (NULL: sync): the first failure recorded so far (cleared, as sync), without waiting for the
     * queued work, whose own failures show at the next sync. The forward pass checks between the blocks of
     * a step and syncs once before it commits the step's state, so a failure still leaves the sequence as
     * it was. */
    sl_status (*check)(be_backend *be);
    /* Optional (NULL: none): a one-token step recorded once and replayed (a CUDA graph). step_begin(key, pos):
     * 1 when the ops up to step_end are recorded or skipped rather than run (key: names the buffers the step
     * reads, the workspace's and the sequence's, never reused for others; pos: its token's position), 0 when
     * they run as usual. step_end(ok) runs the step; returns 0, or 1 when nothing of it ran (it could not be
     * recorded, or ok was 0): the caller runs the step again without step_begin. Host results (route) cannot
     * be read inside a recorded step. */
    int (*step_begin)(be_backend *be, uint64_t key, int pos);
    int (*step_end)(be_backend *be, int ok);
    const char *(*errmsg)(be_backend *be);
    /* Makes room for the ops' per-thread scratch of up to slot_floats floats (attention scores over a
     * context, the DeltaNet chunk matrices, one dequantised row); idempotent. SL_OK or SL_ENOMEM. */
    sl_status (*reserve)(be_backend *be, size_t slot_floats);
    void (*destroy)(be_backend *be);

    /* ---- copies that overlap the compute ops (optional: NULL where copies are synchronous, the CPU) ----
     * A fence (> 0) names a point on one of the backend's queues; 0 is a fence already passed. */
    /* Queues a host -> backend copy on a copy queue of its own: it starts once the compute ops queued before
     * fence `after` (from mark(), or 0) are done, and every compute op queued after this call waits for it.
     * src (pinned memory reads fastest) must stay unchanged until the returned fence has passed. Returns
     * that fence, or 0 with the failure recorded for sync(). */
    uint64_t (*copy_async)(be_backend *be, void *dst, const void *src, size_t bytes, uint64_t after);
    /* A fence after the compute ops queued so far; 0 with the failure recorded for sync(). */
    uint64_t (*mark)(be_backend *be);
    /* 1 once fence f has passed, else 0; wait: first block until it has. A failure is recorded for sync()
     * and counts as passed. */
    int (*fence_done)(be_backend *be, uint64_t f, int wait);

    /* ---- dense ops ---- */
    /* x[t] (t < n) = row tokens[t] (HOST) of table as f32, any dtype. */
    void (*embed)(be_backend *be, const tn_mat *table, const int32_t *tokens, int n, float *x, size_t ldx);
    /* y[t*ldy + r] = (W x_t)[r] for every row r of w and token t < x->n_tok, x in its int8 form when x->int8
     * and w is q8/q4 (kernels.h kern_matmul_act), else the exact kernels. Indexed by w->dtype; NULL: the
     * backend lacks that type (be_check_mat refuses such a model at open). */
    void (*matmul[DT_COUNT])(be_backend *be, const tn_mat *w, kern_act *x, float *y, size_t ldy);
    /* The n products of mm in one hand-off (q/k/v; gate and up): bitwise each matmul alone. */
    void (*matmul_multi)(be_backend *be, const kern_mm *mm, int n);
    /* dst := rows idx[0..n) (HOST) of src's int8 form, x_rows their floats [n][src->cols] (kernels.h
     * kern_act_gather); buf: kern_act_bytes(n, cols) bytes of backend memory. */
    void (*act_gather)(be_backend *be, kern_act *dst, void *buf, kern_act *src, const int *idx, int n,
                       const float *x_rows);
    /* Per token t < n_tok and head h < n_heads, the dim floats at x + t*ld + h*head_stride: y (the same
     * layout, may alias x) = (w_off + w) * x / sqrt(mean(x^2) + eps), the mean accumulated in double. */
    void (*rmsnorm)(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int n_heads,
                    size_t head_stride, int dim, const float *w, float w_off, float eps);
    /* NeoX rotate-half RoPE in place on the first rot floats of each head (layout as rmsnorm), token t at
     * position pos0 + t: angle = pos * inv_freq[i] (f32; inv_freq HOST [rot/2], family/rope.h), cos and sin
     * times attn_factor. interleave 1: the pairs (x_2i, x_2i+1) are de-interleaved into halves first
     * (transformers' apply_rotary_pos_emb_interleave); 2: the pairs rotate in place (DeepSeek-V4's
     * apply_rotary_pos_emb); 3: as 2 with -sin, the inverse rotation. A backend without hc_mix (V4) sees 0 and 1
     * only. */
    void (*rope)(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
                 const float *inv_freq, float attn_factor, int pos0, int interleave);
    /* optional (NULL: rope a run of positions at a time): rope with token t at position pos[t] (HOST [n_tok]), each
     * token bitwise rope of it alone at its position (a decode batch's sequences in one op; interleave 0 or 1) */
    void (*rope_at)(be_backend *be, float *x, int n_tok, size_t ld, int n_heads, size_t head_stride, int rot,
                    const float *inv_freq, float attn_factor, const int *pos, int interleave);
    /* optional (NULL: none; DSA models need it): LayerNorm of n_tok rows x [n_tok][ld] into y (same layout, may
     * alias x): y = (x - mean) / sqrt(var + eps) * w + b over dim floats, mean and (biased) variance in double. */
    void (*layernorm)(be_backend *be, const float *x, float *y, int n_tok, size_t ld, int dim, const float *w,
                      const float *b, float eps);
    /* x[i] += y[i], i < n. */
    void (*add)(be_backend *be, float *x, const float *y, size_t n);
    /* optional (NULL: the families that need it are refused): x[i] *= s, i < n; or, sv not NULL, x[i] *= sv[0] (sv
     * in backend memory: a loaded weight) */
    void (*scale)(be_backend *be, float *x, size_t n, float s, const float *sv);
    /* optional (as scale): x[i] = tanh(x[i] / cap) * cap, i < n (a logit softcap) */
    void (*softcap)(be_backend *be, float *x, size_t n, float cap);
    /* optional (as scale): x[t*ld + i] *= s[t], t < n_rows, i < cols; s HOST [n_rows] */
    void (*row_scale)(be_backend *be, float *x, size_t ld, int n_rows, int cols, const float *s);
    /* optional (as scale; Bailing hybrid's gated MLA): x[t*ld + h*hs + i] *= sigmoid(g[t*ldg + h]) (f32), t < n_rows,
     * h < heads, i < dim */
    void (*head_gate)(be_backend *be, float *x, size_t ld, size_t hs, int dim, const float *g, size_t ldg, int n_rows,
                      int heads);
    /* x[t*ld + i] += b[i], t < n_rows, i < cols. */
    void (*add_bias)(be_backend *be, float *x, size_t ld, const float *b, int n_rows, int cols);
    /* dst row (didx ? didx[i] : i) := src row (sidx ? sidx[i] : i), i < n, cols floats each; didx, sidx
     * HOST or NULL; rows of dst and src do not overlap. */
    void (*copy_rows)(be_backend *be, float *dst, size_t ldd, const int *didx, const float *src, size_t lds,
                      const int *sidx, int n, int cols);
    /* optional (NULL: none), a hint: the next parallel op reads these n byte ranges of backend memory first
     * (the start of a weight, a KV cache); the backend may bring them into its caches while the host prepares
     * that op (CPU: the pool's waiting workers prefetch them, threadpool.h pool_hint). No result depends on
     * it: it reads nothing into any result and changes no byte. */
    void (*hint)(be_backend *be, const void *const *p, const size_t *bytes, int n);

    /* ---- mixers ---- */
    void (*attention)(be_backend *be, const be_attn *a);
    /* optional (NULL: attention per item): attention of the n items a[0 .. n) (disjoint caches and outputs; a decode
     * batch's sequences), each item's cache rows and output bitwise attention(be, &a[i]) alone */
    void (*attention_items)(be_backend *be, const be_attn *a, int n);
    void (*mla)(be_backend *be, const be_mla *a);
    /* optional (NULL: a matmul a head, src/model/mla.c): MLA's output of every head and token in one op, out[t*ldo +
     * h*dv + v] = sum_c W_uv_h[v][c] lat[t][h][c], W_uv_h = rows h*(dn+dv)+dn .. +dv of kv_b, on f32 latents (the
     * exact kernels' arithmetic, as matmul with x->int8 0). Each value depends only on its token, head and row,
     * never on n or the other tokens (a token in a batch is bitwise the token alone). Reads kv_b, lat, out, ldo, n,
     * n_heads, r, dn, dv. 1 done, 0 not taken (nothing queued: a kv_b it has no kernel for). CPU (cpu_mla.c): bitwise
     * the exact matmul of each head's rows; CUDA (cuda_mla_out.cu): one launch. */
    int (*mla_out)(be_backend *be, const be_mla *a);
    void (*dsa_select)(be_backend *be, const be_dsa *d); /* optional (NULL: none; DSA models need it) */
    void (*dn_conv)(be_backend *be, const be_dn *d);
    void (*dn_gates)(be_backend *be, const be_dn *d);
    void (*dn_step)(be_backend *be, const be_dn *d);
    void (*dn_chunk)(be_backend *be, const be_dn *d);
    void (*dn_norm)(be_backend *be, const be_dn *d);
    void (*kda_gates)(be_backend *be, const be_dn *d); /* optional: Kimi Delta Attention (be_dn kda) */
    /* DeepSeek-V4 (optional: NULL where the backend lacks them, and such models are refused at open) */
    void (*hc_mix)(be_backend *be, const be_hc *h);
    /* x[t] (hc streams of H) := post_k out[t] + sum_j comb[j][k] x_j for stream k (mix: hc_mix's output [n][ldm]) */
    void (*hc_post)(be_backend *be, float *x, const float *out, const float *mix, size_t ldm, int n, int hc, int H);
    void (*compress)(be_backend *be, const be_cmp *c);
    void (*index_topk)(be_backend *be, const be_index *x);
    void (*short_conv)(be_backend *be, const be_sconv *s); /* optional (NULL: LFM2 refused) */
    void (*mamba2)(be_backend *be, const be_mamba *m);     /* optional (NULL: Granite hybrid refused) */

    /* ---- MoE ---- */
    /* Fills r->top_e / top_w on the host; returns as sync() does (it syncs to read them). */
    sl_status (*route)(be_backend *be, const be_route *r);
    void (*ffn)(be_backend *be, const be_ffn *f);
    /* n SwiGLU experts over one token, every f[i].x the same one-token activation: gate and up of all in
     * one hand-off, then every down, bitwise each ffn alone. f[i].g must be f[0].g + i * inter (the down
     * inputs form one activation of n rows, in f[0].mid_buf, kern_act_bytes(n, inter) bytes). */
    void (*ffn_multi)(be_backend *be, const be_ffn *f, int n);
    /* optional (NULL: none): f's expert with its parts in HOST memory (a RAM cache slot: tn_expert.host), over
     * f->x (a HOST kern_act) on pool, the host's threads, into HOST f->y with HOST scratch g, u, mid_buf;
     * bitwise what ffn gives for the same expert in backend memory (the hybrid step, docs/CUDA.md). Nothing is
     * queued. SL_OK, or SL_EUNSUPPORTED (nothing done) for an expert it cannot compute so. CPU: its ffn. CUDA
     * (backend.c): kernels_dev.c's kern_ffn_dev, the device's arithmetic, for q8/q4 SwiGLU experts on int8
     * activations. */
    sl_status (*ffn_host)(be_backend *be, pool_t *pool, const be_ffn *f);
    /* optional (NULL: ffn_host one by one): the n experts f[i] as ffn_host each, in a few hand-offs of pool for all
     * (the hybrid step's layer of host experts, moe_hybrid.c); each bitwise ffn_host alone. SL_OK, or
     * SL_EUNSUPPORTED with nothing done. CUDA (backend.c): kernels_dev.c's kern_ffn_dev_multi. */
    sl_status (*ffn_host_multi)(be_backend *be, pool_t *pool, const be_ffn *f, int n);
    /* optional (NULL: no device memory of its own): the device's free and total bytes now. */
    void (*mem_info)(be_backend *be, uint64_t *free_bytes, uint64_t *total_bytes);
    /* optional: r's one token routed and its k experts (every one of the layer resident: xs->get) run on
     * the device, as ffn_multi on route()'s choice would (f: the first's args; slot s: g, u + s * inter, y
     * + s * ldy); *w_dev: the weights in backend memory. 1 done, 0 not taken (nothing queued), or < 0. */
    int (*moe_resident)(be_backend *be, const be_route *r, const tn_expert_src *xs, const be_ffn *f,
                        const float **w_dev);
    /* optional: the routed experts of a layer-major MoE block on the device, with no host round trip: r's n
     * rows (r->logits [n][E]) routed, each expert of the layer (every one resident: xs->get; SwiGLU or gpt-oss's
     * as r->cfg->expert_kind says, q8/q4, int8 activations) over the rows that chose it, and out [n][H] = the k slots' weighted sum in slot order
     * (combine's, shared expert not included). h [n][H]: the block's normed input. Bitwise route() + an ffn per
     * expert + combine_rows over ascending experts. 1 done, 0 not taken (nothing queued), or < 0. */
    int (*moe_wide)(be_backend *be, const be_route *r, const tn_expert_src *xs, const float *h, int inter, float *out);
    /* optional (NULL: none): a layer-major block's experts streamed through the device a batch at a time (the
     * device tier's slots, held by the caller until the call returns): each batch's pairs run as moe_wide's grouped
     * FFN into their (token, slot) cells, and the last batch's call sums every cell in slot order into q->out, as
     * moe_wide does (the same kernels, so bitwise moe_wide, and route() + an ffn per expert + combine_rows over
     * ascending experts). 1 done; 0 not taken (only when q->first: nothing queued, the caller runs the layer's
     * experts itself), or < 0 failed. The caller calls it for every batch of the layer once the first is taken. */
    int (*moe_batch)(be_backend *be, const be_moe_batch *q);
    /* optional (NULL: an ffn per expert): q's experts in a few hand-offs for all of them, each expert's rows by the
     * kernels ffn would run (so each output bitwise an ffn per expert, then combine_rows over the pairs in order,
     * or the cells). 1 done, 0 not taken (nothing written). CPU: cpu_experts.c. */
    int (*ffn_experts)(be_backend *be, const be_experts *q);
    void (*combine)(be_backend *be, const be_combine *c);
    /* Layer-major combine of one expert: out[tok[j]] += top_w[tok[j]*k + slot[j]] * y[j], j < cnt, in
     * increasing j (tok, slot, top_w HOST; out [..][H], y [cnt][H]). */
    void (*combine_rows)(be_backend *be, float *out, int H, int k, const int *tok, const int *slot,
                         const float *top_w, const float *y, int cnt);
};

/* Opens a backend of kind (sluice.h sl_backend_kind) into *out. SL_BACKEND_CPU: today's kernels
 * (kern_default_ops) on pool (borrowed; outlives the backend). SL_BACKEND_CUDA: SL_EUNSUPPORTED with "built
 * without CUDA ..." in a build without it, "no usable CUDA device ..." where there is none. SL_OK, or an error
 * with err filled and *out NULL. */
sl_status be_open(int kind, pool_t *pool, be_backend **out, sl_error *err);
void be_close(be_backend *be); /* NULL: no-op */
/* 1 when be_open(kind) would find what it needs: the CPU always; CUDA in a build with it and a usable device. */
int be_usable(int kind);
/* 1 when be's attention op takes KV caches of type t (its kv_types; 0 there means f32 only), else 0: the one
 * statement of it, which sl_model_open's refusal or f32 fallback (sl_model_params.kv_fallback) follows. */
int be_kv_takes(const be_backend *be, sl_kv_type t);
/* The CPU backend on a given kernel table (tests). */
be_backend *be_cpu_new(const kern_ops *ops, pool_t *pool);
/* Tests: the CPU attention's split of one token (backend/cpu/cpu_mix.c attn_split; the same bits either way): -1
 * where it applies (the default), 0 never, 1 always where it can; returns the previous mode. Not thread-safe: set it
 * while nothing runs. */
int be_cpu_attn_split(int mode);

/* y = W x through the table's entry for w's dtype; w was checked (be_check_mat) when the model opened. */
static inline void be_matmul(be_backend *be, const tn_mat *w, kern_act *x, float *y, size_t ldy) {
    be->matmul[w->dtype](be, w, x, y, ldy);
}
/* SL_OK when the backend has a matmul for m's dtype, else SL_EUNSUPPORTED. */
sl_status be_check_mat(const be_backend *be, const tn_mat *m);
/* The sticky error across the layer boundary: be->sync(be); on a failure err = "<name> backend: <errmsg>"
 * with sync's status. */
sl_status be_sync(be_backend *be, sl_error *err);
/* be->check's status (be->sync where it has none) as an sl_error: the failures so far, without waiting. */
sl_status be_check(be_backend *be, sl_error *err);

#endif
