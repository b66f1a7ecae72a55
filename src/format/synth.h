/*
 * synth.h — the config `sluice synth` builds for a shape (internal; sl_synth in sluice.h writes the file).
 */
#ifndef SL_SYNTH_H
#define SL_SYNTH_H

#include "family/config.h"
#include "sluice.h"

/* The config of shape `name` (one of sl_synth_shapes(); a family's arch_shape) with `layers` layers (0: the
 * released count). SL_EINVAL for an unknown shape or too many layers. */
sl_status synth_config(const char *name, int layers, fam_config *out, sl_error *err);

#define SYNTH_GROUP 64 /* sl_synth's group of q8 / q4 / q3 columns */

/* sl_synth_threads with q8 / q4 groups of 32, 64 (its) or 128 columns. */
sl_status synth_write(const char *name, int layers, sl_quant quant, int group, uint64_t seed, int n_threads,
                      const char *out_path, sl_progress_fn progress, void *user, sl_error *err);

#endif
