/* tensors.c — see tensors.h: a config's family table expanded over its layers. */
#include "family/tensors.h"

#include <stdio.h>
#include <stdlib.h>

#include "family/arch.h"


typedef struct {
    arch_tensor *v;
    int n, cap, oom;
} list;

static void add(list *l, const fam_config *c, const arch_tdef *d, int layer) {
    if (l->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        arch_tensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) { l->oom = 1; return; }
        l->v = v;
        l->cap = cap;
    }
    arch_tensor *t = &l->v[l->n++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "layers.%d.%s", layer, d->name);
    else snprintf(t->name, sizeof t->name, "%s", d->name);
    t->ndim = d->cols != AD_NONE ? 2 : 1;
    t->shape[0] = arch_dim_value(c, d->rows);
    t->shape[1] = d->cols != AD_NONE ? arch_dim_value(c, d->cols) : 0;
    t->matrix = d->kind == AK_MAT;
    t->layer = layer;
    t->field = d->field;
    t->router = d->role == AR_ROUTER;
}

static int is_global(const arch_tdef *d) { return d->when == AW_GLOBAL || d->when == AW_UNTIED; }

/* Container order: the model-wide tensors listed before the first layer tensor, then layer by layer
 * the layer tensors in table order, then the remaining model-wide tensors. */
int arch_backbone_tensors(const fam_config *c, arch_tensor **out) {
    const arch_desc *a = arch_get(c->arch);
    if (!a) return -1;
    list l = {0};
    int first = 0;
    while (first < a->n_tensors && is_global(&a->tensors[first])) {
        if (arch_applies(c, a->tensors[first].when, 0)) add(&l, c, &a->tensors[first], -1);
        first++;
    }
    for (int i = 0; i < c->n_layers; i++)
        for (int k = first; k < a->n_tensors; k++)
            if (!is_global(&a->tensors[k]) && arch_applies(c, a->tensors[k].when, i)) add(&l, c, &a->tensors[k], i);
    for (int k = first; k < a->n_tensors; k++)
        if (is_global(&a->tensors[k]) && arch_applies(c, a->tensors[k].when, 0)) add(&l, c, &a->tensors[k], -1);
    if (l.oom || !l.n) {
        free(l.v);
        return -1;
    }
    *out = l.v;
    return l.n;
}

void arch_expert_shape(const fam_config *c, int part, int64_t shape[2]) {
    const arch_pdef *p = arch_part(c, part);
    if (!p) {
        shape[0] = shape[1] = 0;
        return;
    }
    shape[0] = arch_dim_value(c, p->rows);
    shape[1] = arch_dim_value(c, p->cols);
}

const char *arch_expert_part_name(const fam_config *c, int part) {
    const arch_pdef *p = arch_part(c, part);
    return p ? p->name : "?";
}

int arch_expert_part_is_vec(const fam_config *c, int part) {
    const arch_pdef *p = arch_part(c, part);
    return p && p->kind == AK_VEC;
}
