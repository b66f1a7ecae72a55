/*
 * rope.c — see rope.h. The arithmetic follows transformers' modeling_rope_utils.py operation by operation:
 * Python-side scalars (the correction range, the mscale) in double, tensor ops in float32, the scalar
 * operands of a tensor op rounded to float32 first, as torch does with a wrapped number.
 */
#include "family/rope.h"

#include <math.h>

double rope_yarn_mscale(double scale, double mscale) {
    if (scale <= 1) return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}

/* find_correction_dim: the dimension whose wavelength makes num_rot rotations in max_pos positions. */
static double correction_dim(double num_rot, int dim, double base, double max_pos) {
    return (dim * log(max_pos / (num_rot * 2 * M_PI))) / (2 * log(base));
}

/* _compute_llama3_parameters on the default table (f32 tensor ops, Python-side scalars in double): wavelengths
 * above old_context / low_freq_factor divided by the factor, below old_context / high_freq_factor kept, between a
 * blend by smooth = (old_context / wavelen - low) / (high - low). */
static void llama3(const fam_config *c, float *inv_freq, int half) {
    const double factor = c->rope_factor, low = c->rope_low_freq, high = c->rope_high_freq;
    const double old = c->rope_orig_max_pos, low_wl = old / low, high_wl = old / high;
    for (int i = 0; i < half; i++) {
        const float f = inv_freq[i], wavelen = (float)(2 * M_PI) / f;
        float v = wavelen > (float)low_wl ? f / (float)factor : f;
        const float smooth = ((float)old / wavelen - (float)low) / (float)(high - low);
        const float smoothed = (1.0f - smooth) * v / (float)factor + smooth * v;
        if (!(wavelen < (float)high_wl) && !(wavelen > (float)low_wl)) v = smoothed;
        inv_freq[i] = v;
    }
}

int rope_freqs(const fam_config *c, float *inv_freq, float *attn_factor) {
    const int dim = c->rot_dim, half = dim / 2 < SL_ROPE_MAX_FREQS ? dim / 2 : SL_ROPE_MAX_FREQS;
    const float base = (float)c->rope_theta;
    if (c->rope_type != SL_ROPE_YARN) {
        for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
        *attn_factor = 1.0f;
        if (c->rope_type == SL_ROPE_LLAMA3) llama3(c, inv_freq, half);
        return half;
    }
    /* factor: given, else max_position_embeddings / original_max_position_embeddings */
    double factor = c->rope_factor > 0 ? c->rope_factor : (double)c->max_pos / c->rope_orig_max_pos;
    double af = c->rope_attn_factor;
    if (!(af > 0)) {
        if (c->yarn_mscale != 0 && c->yarn_mscale_all_dim != 0)
            af = rope_yarn_mscale(factor, c->yarn_mscale) / rope_yarn_mscale(factor, c->yarn_mscale_all_dim);
        else
            af = rope_yarn_mscale(factor, 1);
    }
    double beta_fast = c->yarn_beta_fast != 0 ? c->yarn_beta_fast : 32, beta_slow = c->yarn_beta_slow != 0 ? c->yarn_beta_slow : 1;
    double lo = correction_dim(beta_fast, dim, c->rope_theta, c->rope_orig_max_pos);
    double hi = correction_dim(beta_slow, dim, c->rope_theta, c->rope_orig_max_pos);
    if (c->yarn_truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    if (lo < 0) lo = 0;
    if (hi > dim - 1) hi = dim - 1;
    if (lo == hi) hi += 0.001; /* linear_ramp_factor: prevent a singularity */
    const float flo = (float)lo, span = (float)(hi - lo), ffactor = (float)factor;
    for (int i = 0; i < half; i++) {
        float pos_freq = powf(base, (float)(2 * i) / (float)dim);
        float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (ffactor * pos_freq);
        float ramp = ((float)i - flo) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float ext_factor = 1.0f - ramp;
        float a = interpolation * (1.0f - ext_factor), b = extrapolation * ext_factor;
        inv_freq[i] = a + b;
    }
    *attn_factor = (float)af;
    return half;
}

int rope_freqs_at(const fam_config *c, int l, float *inv_freq, float *attn_factor) {
    const cfg_attn a = cfg_attn_at(c, l);
    if (!a.own) return rope_freqs(c, inv_freq, attn_factor);
    if (!c->full_rope_prop) { /* the default table over full_rot_dim, full_rope_theta (MiMo-V2-Flash's full layers) */
        fam_config f = *c;
        f.rot_dim = c->full_rot_dim;
        f.rope_theta = c->full_rope_theta;
        return rope_freqs(&f, inv_freq, attn_factor);
    }
    const int dim = a.head_dim, half = dim / 2 < SL_ROPE_MAX_FREQS ? dim / 2 : SL_ROPE_MAX_FREQS;
    const float base = (float)c->full_rope_theta;
    for (int i = 0; i < half; i++)
        inv_freq[i] = 2 * i < c->full_rot_dim ? 1.0f / powf(base, (float)(2 * i) / (float)dim) : 0.0f;
    *attn_factor = 1.0f;
    return half;
}
