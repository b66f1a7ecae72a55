/* config.c — helpers over sl_config; see config.h. */
#include "model/config.h"

#include <string.h>

int cfg_n_moe_layers(const sl_config *c) {
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) n += c->layer_moe[l] ? 1 : 0;
    return n;
}

int cfg_moe_slot(const sl_config *c, int layer) {
    if (layer < 0 || layer >= c->n_layers || !c->layer_moe[layer]) return -1;
    int s = 0;
    for (int l = 0; l < layer; l++) s += c->layer_moe[l] ? 1 : 0;
    return s;
}

static const char *const arch_names[] = {"none", "qwen3_moe", "qwen3_next", "qwen3_5_moe"};

const char *cfg_arch_name(sl_arch a) {
    return (a >= SL_ARCH_QWEN3_MOE && a <= SL_ARCH_QWEN3_5_MOE) ? arch_names[a] : "none";
}

sl_arch cfg_arch_from_name(const char *name) {
    for (int a = SL_ARCH_QWEN3_MOE; a <= SL_ARCH_QWEN3_5_MOE; a++)
        if (!strcmp(name, arch_names[a])) return (sl_arch)a;
    return SL_ARCH_NONE;
}
