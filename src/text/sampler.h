/* sampler.h — the sampler's candidate selection (src/text/sampler.c), for its tests. */
#ifndef SLUICE_TEXT_SAMPLER_H
#define SLUICE_TEXT_SAMPLER_H
#include <stdint.h>

typedef struct { float logit; int32_t id; } sampler_cand;

/* The k best valid logits of x[V] (k <= 0: all of them; NaN and -inf never valid) by logit, then the lower id,
 * sorted into c; their count (fewer than k when fewer are valid). scan 1 (k > 0): one pass over x with a sorted window
 * of k entries, so c needs room for k only (sl_sampler_sample's path for top_k <= 256; the server's top logprobs);
 * otherwise every valid logit is copied into c[V], then selected. The same result. */
int sampler_top_k(const float *x, int V, int k, sampler_cand *c, int scan);

#endif
