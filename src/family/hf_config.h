/*
 * hf_config.h — a Hugging Face config.json read into an fam_config (family/hf_config.c): the model_type picks
 * the family (family/arch.h), the fields every family shares are read there, the family's own by its config
 * hook through the hfc_* reader (declared in family/arch.h).
 */
#ifndef SL_HF_CONFIG_H
#define SL_HF_CONFIG_H

#include "family/config.h"
#include "sluice.h"

/* Parses config.json text into *out. `path` names the file in messages. */
sl_status hf_parse_config(const char *text, const char *path, fam_config *out, sl_error *err);

#endif
