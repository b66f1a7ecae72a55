/*
 * synth.h — the config `sluice synth` builds for a shape (internal; sl_synth in sluice.h writes the file).
 */
#ifndef SL_SYNTH_H
#define SL_SYNTH_H

#include "model/config.h"
#include "sluice.h"

/* The config of shape `name` (one of sl_synth_shapes(); a family's arch_shape) with `layers` layers (0: the
 * released count). SL_EINVAL for an unknown shape or too many layers. */
sl_status synth_config(const char *name, int layers, sl_config *out, sl_error *err);

#endif
