/* tensors.c — see tensors.h. */
#include "model/tensors.h"

#include <stdio.h>
#include <stdlib.h>

const char *const arch_expert_part_names[3] = {"gate_proj", "up_proj", "down_proj"};

typedef struct {
    arch_tensor *v;
    int n, cap, oom;
} list;

static void add(list *l, const char *name, int64_t r, int64_t c, int matrix) {
    if (l->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        arch_tensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) { l->oom = 1; return; }
        l->v = v;
        l->cap = cap;
    }
    arch_tensor *t = &l->v[l->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = c > 0 ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = c > 0 ? c : 0;
    t->matrix = matrix;
}

int arch_backbone_tensors(const sl_config *c, arch_tensor **out) {
    list l = {0};
    char nm[96];
    int64_t H = c->hidden, hd = c->head_dim;
    add(&l, "embed_tokens", c->vocab, H, 1);
    for (int i = 0; i < c->n_layers; i++) {
#define ADD(suffix, r, col, m) (snprintf(nm, sizeof nm, "layers.%d.%s", i, suffix), add(&l, nm, r, col, m))
        ADD("input_layernorm", H, 0, 0);
        if (c->layer_linear[i]) {
            int64_t nk = c->lin_nk, nv = c->lin_nv, dk = c->lin_dk, dv = c->lin_dv;
            int64_t cq = 2 * nk * dk + nv * dv;
            if (c->split_lin_proj) {
                ADD("linear_attn.in_proj_qkv", cq, H, 1);
                ADD("linear_attn.in_proj_z", nv * dv, H, 1);
                ADD("linear_attn.in_proj_b", nv, H, 1);
                ADD("linear_attn.in_proj_a", nv, H, 1);
            } else {
                ADD("linear_attn.in_proj_qkvz", 2 * nk * dk + 2 * nv * dv, H, 1);
                ADD("linear_attn.in_proj_ba", 2 * nv, H, 1);
            }
            ADD("linear_attn.conv1d", cq, c->conv_k, 0);
            ADD("linear_attn.dt_bias", nv, 0, 0);
            ADD("linear_attn.A_log", nv, 0, 0);
            ADD("linear_attn.norm", dv, 0, 0);
            ADD("linear_attn.out_proj", H, nv * dv, 1);
        } else {
            ADD("self_attn.q_proj", (c->gated_attn ? 2 : 1) * c->n_heads * hd, H, 1);
            ADD("self_attn.k_proj", c->n_kv_heads * hd, H, 1);
            ADD("self_attn.v_proj", c->n_kv_heads * hd, H, 1);
            ADD("self_attn.o_proj", H, c->n_heads * hd, 1);
            ADD("self_attn.q_norm", hd, 0, 0);
            ADD("self_attn.k_norm", hd, 0, 0);
        }
        ADD("post_attention_layernorm", H, 0, 0);
        if (c->layer_moe[i]) {
            ADD("mlp.gate", c->n_experts, H, 1);
            if (c->shared_inter > 0) {
                ADD("mlp.shared_expert.gate_proj", c->shared_inter, H, 1);
                ADD("mlp.shared_expert.up_proj", c->shared_inter, H, 1);
                ADD("mlp.shared_expert.down_proj", H, c->shared_inter, 1);
                ADD("mlp.shared_expert_gate", 1, H, 1);
            }
        } else {
            ADD("mlp.gate_proj", c->dense_inter, H, 1);
            ADD("mlp.up_proj", c->dense_inter, H, 1);
            ADD("mlp.down_proj", H, c->dense_inter, 1);
        }
#undef ADD
    }
    add(&l, "norm", H, 0, 0);
    if (!c->tie_embeddings) add(&l, "lm_head", c->vocab, H, 1);
    if (l.oom) {
        free(l.v);
        return -1;
    }
    *out = l.v;
    return l.n;
}

void arch_expert_shape(const sl_config *c, int part, int64_t shape[2]) {
    if (part == 2) {
        shape[0] = c->hidden;
        shape[1] = c->moe_inter;
    } else {
        shape[0] = c->moe_inter;
        shape[1] = c->hidden;
    }
}
