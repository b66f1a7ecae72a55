/*
 * rope.h — RoPE frequencies of a config: the default table and YaRN (rope_type "yarn"), after transformers'
 * src/transformers/modeling_rope_utils.py (_compute_default_rope_parameters, _compute_yarn_parameters).
 *
 * The config's rope fields (config.h: rope_type, rope_factor, rope_orig_max_pos, yarn_beta_fast,
 * yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim, yarn_truncate, rope_attn_factor) come from config.json's
 * rope_parameters (transformers 5.x) or rope_scaling (4.x); family/hf_config.c reads them.
 */
#ifndef SL_ROPE_H
#define SL_ROPE_H

#include "family/config.h"

#define SL_ROPE_MAX_FREQS 512 /* rot_dim / 2 at most (forward.c checks rot_dim <= 1024) */

/* inv_freq [rot_dim / 2] and the factor cos and sin are multiplied by (transformers' attention_scaling: 1 for
 * the default table), both in float32 as transformers computes them. Returns the number of frequencies. */
int rope_freqs(const fam_config *c, float *inv_freq, float *attn_factor);
/* Layer l's table: rope_freqs, or for a layer with its own dims (config.h full_head_dim, Gemma 4's full layers)
 * the proportional one over full_head_dim (modeling_rope_utils.py _compute_proportional_rope_parameters): the
 * first full_rot_dim / 2 frequencies full_rope_theta^(-2i / full_head_dim), the rest of full_head_dim / 2 zero
 * (full_rope_prop); else the default table over full_rot_dim with full_rope_theta (MiMo-V2-Flash). */
int rope_freqs_at(const fam_config *c, int l, float *inv_freq, float *attn_factor);

/* YaRN's get_mscale(scale, mscale): 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1 (DeepSeek-V3 also
 * scales its softmax by it). */
double rope_yarn_mscale(double scale, double mscale);

#endif
