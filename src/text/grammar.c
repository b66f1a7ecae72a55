/*
 * grammar.c — byte grammars, their pushdown recogniser and the logit mask (grammar.h).
 *
 * A compiled grammar is one array of elements: each alternative of each rule is a run of elements
 * (a byte set, or a reference to a rule) closed by an END element; rule_alt lists where each rule's
 * alternatives start. A parse is a stack of element positions, its top the next element to match;
 * references push the position after them (unless that is an END: a tail call, so right recursion
 * keeps the stack flat) and then each alternative of the rule, so the stacks of a set always have a
 * byte set on top, or are empty (the whole sentence matched).
 *
 * Sets of stacks are int32 runs in one arena: [count, (len, positions...) * count], deduplicated as
 * they are built. The mask walks the vocabulary in sorted order, keeping the set after each prefix
 * length of the previous token, so a token is advanced only over the bytes after its common prefix
 * with the one before it.
 *
 * Sections: building; compiling; sets of stacks; running; the vocabulary and the mask.
 */
#include "text/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util/err.h"

enum { E_SET = 0, E_REF = 1, E_END = 2 };

typedef struct gel {
    int32_t type, v; /* v: the set's index (E_SET), the rule (E_REF) */
} gel;

/* ---- building ---------------------------------------------------------------------------------- */

typedef struct gseq {
    gel *p;
    int n, cap;
} gseq;

typedef struct grule {
    gseq *alts;
    int n, cap;
} grule;

struct gr_builder {
    grule *r;
    int n, cap;
    uint32_t (*sets)[8];
    int n_sets, cap_sets;
    int failed;
};

/* Grows *p (of *cap elements of size sz) to hold n; 0 or -1. */
static int grow(void **p, int *cap, int n, size_t sz) {
    if (n <= *cap) return 0;
    int c = *cap ? *cap : 4;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

gr_builder *gr_builder_new(void) { return calloc(1, sizeof(gr_builder)); }

void gr_builder_free(gr_builder *b) {
    if (!b) return;
    for (int i = 0; i < b->n; i++) {
        for (int k = 0; k < b->r[i].n; k++) free(b->r[i].alts[k].p);
        free(b->r[i].alts);
    }
    free(b->r);
    free(b->sets);
    free(b);
}

int gr_rule(gr_builder *b) {
    if (grow((void **)&b->r, &b->cap, b->n + 1, sizeof *b->r)) {
        b->failed = 1;
        return -1;
    }
    memset(&b->r[b->n], 0, sizeof b->r[b->n]);
    return b->n++;
}

void gr_alt(gr_builder *b, int r) {
    if (r < 0 || r >= b->n) { b->failed = 1; return; }
    grule *g = &b->r[r];
    if (grow((void **)&g->alts, &g->cap, g->n + 1, sizeof *g->alts)) { b->failed = 1; return; }
    memset(&g->alts[g->n++], 0, sizeof *g->alts);
}

static void put(gr_builder *b, int r, gel e) {
    if (r < 0 || r >= b->n) { b->failed = 1; return; }
    if (!b->r[r].n) gr_alt(b, r);
    if (b->failed) return;
    gseq *s = &b->r[r].alts[b->r[r].n - 1];
    if (grow((void **)&s->p, &s->cap, s->n + 1, sizeof *s->p)) { b->failed = 1; return; }
    s->p[s->n++] = e;
}

void gr_set(gr_builder *b, int r, const uint32_t bits[8]) {
    int k = 0;
    while (k < b->n_sets && memcmp(b->sets[k], bits, sizeof b->sets[k])) k++;
    if (k == b->n_sets) {
        if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) { b->failed = 1; return; }
        memcpy(b->sets[b->n_sets++], bits, sizeof b->sets[0]);
    }
    put(b, r, (gel){E_SET, k});
}

void gr_range(gr_builder *b, int r, uint8_t lo, uint8_t hi) {
    uint32_t bits[8] = {0};
    for (int c = lo; c <= hi; c++) bits[c >> 5] |= 1u << (c & 31);
    gr_set(b, r, bits);
}

void gr_litn(gr_builder *b, int r, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) gr_range(b, r, (uint8_t)s[i], (uint8_t)s[i]);
}

void gr_lit(gr_builder *b, int r, const char *s) { gr_litn(b, r, s, strlen(s)); }

void gr_ref(gr_builder *b, int r, int ref) {
    if (ref < 0) { b->failed = 1; return; }
    put(b, r, (gel){E_REF, ref});
}

int gr_optional(gr_builder *b, int x) {
    int r = gr_rule(b);
    gr_ref(b, r, x);
    gr_alt(b, r);
    return r;
}

int gr_repeat(gr_builder *b, int x, int min, int max) {
    /* tail: x tail | "" (unbounded), or x (x (x)?)?)? nested (max - min optional copies) */
    int tail = -1;
    if (max < 0) {
        tail = gr_rule(b);
        gr_ref(b, tail, x);
        gr_ref(b, tail, tail);
        gr_alt(b, tail);
    } else {
        for (int i = min; i < max; i++) {
            int t = gr_rule(b);
            gr_ref(b, t, x);
            if (tail >= 0) gr_ref(b, t, tail);
            gr_alt(b, t);
            tail = t;
        }
    }
    int r = gr_rule(b);
    for (int i = 0; i < min; i++) gr_ref(b, r, x);
    if (tail >= 0) gr_ref(b, r, tail);
    if (!b->failed && r >= 0 && !b->r[r].n) gr_alt(b, r); /* x{0,0}: the empty string */
    return b->failed ? -1 : r;
}

/* ---- compiling --------------------------------------------------------------------------------- */

struct gr_grammar {
    gel *e;
    int n_e;
    uint32_t (*sets)[8];
    int *alt;      /* where each alternative starts in e */
    int *rule_alt; /* [n_rules + 1]: rule r's alternatives are alt[rule_alt[r] .. rule_alt[r + 1]) */
    int n_rules, root;
};

void gr_grammar_free(gr_grammar *g) {
    if (!g) return;
    free(g->e);
    free(g->sets);
    free(g->alt);
    free(g->rule_alt);
    free(g);
}

sl_status gr_compile(const gr_builder *b, int root, gr_grammar **out, sl_error *err) {
    *out = NULL;
    if (b->failed) return err_set(err, SL_ENOMEM, "grammar: out of memory while building");
    if (root < 0 || root >= b->n) return err_set(err, SL_EINVAL, "grammar: no root rule %d", root);
    int n_e = 0, n_alt = 0;
    for (int i = 0; i < b->n; i++) {
        if (!b->r[i].n) return err_set(err, SL_EINVAL, "grammar: rule %d has no alternative", i);
        n_alt += b->r[i].n;
        for (int k = 0; k < b->r[i].n; k++) {
            n_e += b->r[i].alts[k].n + 1;
            for (int j = 0; j < b->r[i].alts[k].n; j++)
                if (b->r[i].alts[k].p[j].type == E_REF && b->r[i].alts[k].p[j].v >= b->n)
                    return err_set(err, SL_EINVAL, "grammar: rule %d refers to rule %d, which does not exist", i,
                                   b->r[i].alts[k].p[j].v);
        }
    }
    gr_grammar *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, SL_ENOMEM, "out of memory");
    g->e = malloc((size_t)n_e * sizeof *g->e);
    g->sets = malloc((size_t)(b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
    g->alt = malloc((size_t)n_alt * sizeof *g->alt);
    g->rule_alt = malloc((size_t)(b->n + 1) * sizeof *g->rule_alt);
    if (!g->e || !g->sets || !g->alt || !g->rule_alt) {
        gr_grammar_free(g);
        return err_set(err, SL_ENOMEM, "out of memory");
    }
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    int at = 0, a = 0;
    for (int i = 0; i < b->n; i++) {
        g->rule_alt[i] = a;
        for (int k = 0; k < b->r[i].n; k++) {
            g->alt[a++] = at;
            if (b->r[i].alts[k].n) /* an empty alternative has no elements (p may be NULL) */
                memcpy(g->e + at, b->r[i].alts[k].p, (size_t)b->r[i].alts[k].n * sizeof *g->e);
            at += b->r[i].alts[k].n;
            g->e[at++] = (gel){E_END, 0};
        }
    }
    g->rule_alt[b->n] = a;
    g->n_e = n_e;
    g->n_rules = b->n;
    g->root = root;
    *out = g;
    return SL_OK;
}

/* ---- sets of stacks ---------------------------------------------------------------------------- */

/* gr_mask's results for the last few sets of stacks, least recently used first out: inside a long
 * string every token leaves the same set (the string's byte class on top), so the walk over the
 * vocabulary is done once for it, not once per token. The mask depends on nothing else. */
#define GR_MASK_CACHE 4

typedef struct mask_entry {
    const struct gr_vocab *v;
    int32_t *set; /* a copy of the set (NULL: empty entry) */
    size_t n;
    uint8_t *ok;  /* [n_vocab] */
    int allowed;
    uint64_t used;
} mask_entry;

struct gr_state {
    const gr_grammar *g;
    int32_t *cur;  /* the set after the accepted bytes */
    size_t n_cur;  /* its int32s */
    int32_t *a;    /* arena: sets being built */
    size_t top, cap;
    int32_t work[GR_MAX_DEPTH + 2];
    uint8_t *ok;   /* [n_vocab] scratch of gr_mask */
    size_t *doff;  /* [max_len + 1] the set after each prefix length (gr_mask) */
    int n_ok, n_doff;
    int oom, ended;
    mask_entry cache[GR_MASK_CACHE];
    uint64_t clock, hits;
};

/* Adds the stack work[0..len) to the set at off (the arena's last), unless it is there. 0 or -1. */
static int set_add(gr_state *st, size_t off, int len) {
    size_t q = off + 1;
    for (int32_t k = 0; k < st->a[off]; k++) {
        int32_t l = st->a[q];
        if (l == len && !memcmp(st->a + q + 1, st->work, (size_t)len * sizeof(int32_t))) return 0;
        q += 1 + (size_t)l;
    }
    if (st->top + 1 + (size_t)len > st->cap) {
        size_t c = st->cap ? 2 * st->cap : 4096;
        while (c < st->top + 1 + (size_t)len) c *= 2;
        int32_t *p = realloc(st->a, c * sizeof *p);
        if (!p) { st->oom = 1; return -1; }
        st->a = p;
        st->cap = c;
    }
    st->a[st->top] = len;
    memcpy(st->a + st->top + 1, st->work, (size_t)len * sizeof(int32_t));
    st->top += 1 + (size_t)len;
    st->a[off]++;
    return 0;
}

/* Adds every stack that work[0..len) leads to with a byte set (or nothing) on top, to the set at
 * off. Leaves work[0..len) as it found it. 0 or -1 (out of memory). */
static int expand(gr_state *st, size_t off, int len, int depth) {
    const gr_grammar *g = st->g;
    if (depth > 4 * GR_MAX_DEPTH) return 0; /* left recursion: this path refuses */
    if (len == 0) return set_add(st, off, 0);
    int32_t p = st->work[len - 1];
    if (g->e[p].type == E_SET) return set_add(st, off, len);
    if (g->e[p].type == E_END) return expand(st, off, len - 1, depth + 1);
    int r = g->e[p].v, base = len;
    if (g->e[p + 1].type == E_END) base = len - 1; /* a tail call: nothing to come back to */
    else st->work[len - 1] = p + 1;
    if (base >= GR_MAX_DEPTH) {
        st->work[len - 1] = p;
        return 0;
    }
    int rc = 0;
    for (int k = g->rule_alt[r]; k < g->rule_alt[r + 1] && !rc; k++) {
        st->work[base] = g->alt[k];
        rc = expand(st, off, base + 1, depth + 1);
    }
    st->work[len - 1] = p;
    return rc;
}

/* Starts a set at the arena's top; its offset. -1 when out of memory. */
static long set_begin(gr_state *st) {
    if (st->top + 1 > st->cap) {
        size_t c = st->cap ? 2 * st->cap : 4096;
        int32_t *p = realloc(st->a, c * sizeof *p);
        if (!p) { st->oom = 1; return -1; }
        st->a = p;
        st->cap = c;
    }
    st->a[st->top] = 0;
    return (long)st->top++;
}

/* The set after byte c from the set at from: a new set at the arena's top; its offset, or -1 (out of
 * memory). An empty set (count 0) when c continues no parse. */
static long advance(gr_state *st, size_t from, uint8_t c) {
    long out = set_begin(st);
    if (out < 0) return -1;
    const gr_grammar *g = st->g;
    size_t q = from + 1;
    int32_t n = st->a[from];
    for (int32_t k = 0; k < n; k++) {
        int32_t len = st->a[q];
        if (len > 0) {
            int32_t p = st->a[q + (size_t)len];
            const uint32_t *bits = g->sets[g->e[p].v];
            if (bits[c >> 5] >> (c & 31) & 1) {
                memcpy(st->work, st->a + q + 1, (size_t)len * sizeof(int32_t));
                st->work[len - 1] = p + 1;
                if (expand(st, (size_t)out, len, 0)) return -1;
            }
        }
        q += 1 + (size_t)len;
    }
    return out;
}

/* ---- running ----------------------------------------------------------------------------------- */

/* The set at off becomes the current one. 0 or -1. */
static int set_keep(gr_state *st, size_t off) {
    size_t n = st->top - off;
    int32_t *p = realloc(st->cur, n * sizeof *p);
    if (!p) { st->oom = 1; return -1; }
    memcpy(p, st->a + off, n * sizeof *p);
    st->cur = p;
    st->n_cur = n;
    return 0;
}

sl_status gr_state_new(const gr_grammar *g, gr_state **out) {
    *out = NULL;
    gr_state *st = calloc(1, sizeof *st);
    if (!st) return SL_ENOMEM;
    st->g = g;
    long off = set_begin(st);
    int rc = off < 0;
    for (int k = g->rule_alt[g->root]; k < g->rule_alt[g->root + 1] && !rc; k++) {
        st->work[0] = g->alt[k];
        rc = expand(st, (size_t)off, 1, 0);
    }
    if (rc || set_keep(st, (size_t)off)) {
        gr_state_free(st);
        return SL_ENOMEM;
    }
    *out = st;
    return SL_OK;
}

void gr_state_free(gr_state *st) {
    if (!st) return;
    free(st->cur);
    free(st->a);
    free(st->ok);
    free(st->doff);
    for (int i = 0; i < GR_MASK_CACHE; i++) {
        free(st->cache[i].set);
        free(st->cache[i].ok);
    }
    free(st);
}

/* Copies the current set to the arena's start; its offset (0), or -1. */
static long load_cur(gr_state *st) {
    if (st->cap < st->n_cur) {
        int32_t *p = realloc(st->a, (st->n_cur + 4096) * sizeof *p);
        if (!p) { st->oom = 1; return -1; }
        st->a = p;
        st->cap = st->n_cur + 4096;
    }
    memcpy(st->a, st->cur, st->n_cur * sizeof *st->a);
    st->top = st->n_cur;
    return 0;
}

int gr_accept(gr_state *st, const char *s, size_t n) {
    if (st->ended) return -1;
    long off = load_cur(st);
    for (size_t i = 0; i < n && off >= 0; i++) {
        off = advance(st, (size_t)off, (uint8_t)s[i]);
        if (off >= 0 && st->a[off] == 0) return -1;
    }
    if (off < 0) return -1;
    return set_keep(st, (size_t)off);
}

int gr_complete(const gr_state *st) {
    size_t q = 1;
    for (int32_t k = 0; k < st->cur[0]; k++) {
        if (st->cur[q] == 0) return 1;
        q += 1 + (size_t)st->cur[q];
    }
    return 0;
}

int gr_finished(const gr_state *st) {
    size_t q = 1;
    for (int32_t k = 0; k < st->cur[0]; k++) {
        if (st->cur[q] != 0) return 0;
        q += 1 + (size_t)st->cur[q];
    }
    return st->ended || st->cur[0] > 0;
}

int gr_state_oom(const gr_state *st) { return st->oom; }

/* ---- the vocabulary and the mask --------------------------------------------------------------- */

typedef struct vtok {
    const char *p;
    uint32_t len;
    int32_t id;
} vtok;

struct gr_vocab {
    vtok *t;      /* the tokens that may be allowed, sorted by their bytes */
    uint32_t *lcp; /* [i]: bytes t[i] shares with t[i - 1] */
    int32_t *at;   /* [V]: where an id is in t, or -1 */
    int n, V, max_len;
    int32_t *eog_own; /* the end-of-generation ids */
    int n_eog;
};

static int vtok_cmp(const void *a, const void *b) {
    const vtok *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* v's sorted order, common prefixes and id index, once its tokens are in. */
static void vocab_index(gr_vocab *v) {
    qsort(v->t, (size_t)v->n, sizeof *v->t, vtok_cmp);
    for (int32_t id = 0; id < v->V; id++) v->at[id] = -1;
    for (int i = 0; i < v->n; i++) {
        v->at[v->t[i].id] = i;
        uint32_t k = 0;
        if (i)
            while (k < v->t[i].len && k < v->t[i - 1].len && v->t[i].p[k] == v->t[i - 1].p[k]) k++;
        v->lcp[i] = k;
        if ((int)v->t[i].len > v->max_len) v->max_len = (int)v->t[i].len;
    }
}

static gr_vocab *vocab_alloc(int n_vocab) {
    gr_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->V = n_vocab;
    size_t n = (size_t)(n_vocab > 0 ? n_vocab : 1);
    v->t = malloc(n * sizeof *v->t);
    v->lcp = malloc(n * sizeof *v->lcp);
    v->at = malloc(n * sizeof *v->at);
    v->eog_own = malloc(n * sizeof *v->eog_own);
    if (!v->t || !v->lcp || !v->at || !v->eog_own) {
        gr_vocab_free(v);
        return NULL;
    }
    return v;
}

sl_status gr_vocab_new(const sl_tokenizer *tok, int n_vocab, gr_vocab **out, sl_error *err) {
    *out = NULL;
    gr_vocab *v = vocab_alloc(n_vocab);
    if (!v) return err_set(err, SL_ENOMEM, "out of memory");
    const int32_t *eog;
    int n_eog = tok_eog_ids(tok, &eog);
    for (int i = 0; i < n_eog && v->n_eog < n_vocab; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab) v->eog_own[v->n_eog++] = eog[i];
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len;
        const char *p = tok_piece(tok, id, &len);
        if (!p || !len || sl_tokenizer_is_special(tok, id) || sl_tokenizer_is_eog(tok, id)) continue;
        v->t[v->n++] = (vtok){p, (uint32_t)len, id};
    }
    vocab_index(v);
    *out = v;
    return SL_OK;
}

sl_status gr_vocab_from_pieces(const char *const *pieces, const size_t *lens, int n_vocab, const int32_t *eog,
                               int n_eog, gr_vocab **out) {
    *out = NULL;
    gr_vocab *v = vocab_alloc(n_vocab);
    if (!v) return SL_ENOMEM;
    for (int i = 0; i < n_eog && v->n_eog < n_vocab; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab) v->eog_own[v->n_eog++] = eog[i];
    for (int32_t id = 0; id < n_vocab; id++) {
        int is_eog = 0;
        for (int i = 0; i < v->n_eog; i++) is_eog |= v->eog_own[i] == id;
        if (!is_eog && pieces[id] && lens[id]) v->t[v->n++] = (vtok){pieces[id], (uint32_t)lens[id], id};
    }
    vocab_index(v);
    *out = v;
    return SL_OK;
}

void gr_vocab_free(gr_vocab *v) {
    if (!v) return;
    free(v->t);
    free(v->lcp);
    free(v->at);
    free(v->eog_own);
    free(v);
}

/* The bytes that leave the current set (loaded at the arena's start) as it is, into loop[256 / 32]:
 * inside a free string, every byte but the quote, the backslash and control bytes. A token made of
 * them only continues a parse (the set never changes, and it is not empty). 0 or -1. */
static int self_loops(gr_state *st, uint32_t loop[8]) {
    size_t n = st->n_cur;
    memset(loop, 0, 8 * sizeof *loop);
    if (st->a[0] == 0) return 0;
    for (int c = 0; c < 256; c++) {
        long off = advance(st, 0, (uint8_t)c);
        if (off < 0) return -1;
        if (st->top - (size_t)off == n && !memcmp(st->a + off, st->a, n * sizeof *st->a)) loop[c >> 5] |= 1u << (c & 31);
        st->top = n;
    }
    return 0;
}

/* 1 when every byte of t is in loop. */
static int all_in(const vtok *t, const uint32_t loop[8]) {
    for (uint32_t k = 0; k < t->len; k++) {
        uint8_t c = (uint8_t)t->p[k];
        if (!(loop[c >> 5] >> (c & 31) & 1)) return 0;
    }
    return 1;
}

/* st->ok[id] = 1 for every token of v whose bytes continue a parse; the count, or -1. Tokens of bytes
 * that leave the set as it is (self_loops) are allowed without advancing: inside a string that is
 * nearly the whole vocabulary, which the walk would otherwise advance byte by byte (Qwen3's 152k
 * tokens: ~90 ms; docs/SERVER.md). */
static int walk(gr_state *st, const gr_vocab *v) {
    int allowed = 0, valid = 0; /* doff[0 .. valid] hold the sets after t[i]'s prefixes */
    uint32_t loop[8];
    if (load_cur(st) < 0 || self_loops(st, loop) < 0) return -1;
    int any_loop = 0;
    for (int k = 0; k < 8; k++) any_loop |= loop[k] != 0;
    st->doff[0] = 0;
    for (int i = 0; i < v->n; i++) {
        const vtok *t = &v->t[i];
        if (any_loop && all_in(t, loop)) {
            /* doff stays the last walked token's: valid shrinks to what the tokens since share with it */
            if ((int)v->lcp[i] < valid) valid = (int)v->lcp[i];
            st->ok[t->id] = 1;
            allowed++;
            continue;
        }
        int d = (int)v->lcp[i] < valid ? (int)v->lcp[i] : valid;
        /* the arena ends where the set at depth d does */
        size_t q = st->doff[d] + 1;
        for (int32_t k = 0; k < st->a[st->doff[d]]; k++) q += 1 + (size_t)st->a[q];
        st->top = q;
        while (d < (int)t->len) {
            long off = advance(st, st->doff[d], (uint8_t)t->p[d]);
            if (off < 0) return -1;
            if (st->a[off] == 0) break;
            st->doff[++d] = (size_t)off;
        }
        valid = d;
        if (d == (int)t->len) {
            st->ok[t->id] = 1;
            allowed++;
            continue;
        }
        while (i + 1 < v->n && (int)v->lcp[i + 1] > d) i++; /* they share the refused prefix */
    }
    return allowed;
}

/* The cache entry of the current set, or NULL. */
static mask_entry *cache_find(gr_state *st, const gr_vocab *v) {
    for (int i = 0; i < GR_MASK_CACHE; i++) {
        mask_entry *e = &st->cache[i];
        if (e->set && e->v == v && e->n == st->n_cur && !memcmp(e->set, st->cur, st->n_cur * sizeof *st->cur)) {
            e->used = ++st->clock;
            return e;
        }
    }
    return NULL;
}

/* Keeps st->ok (allowed tokens) as the current set's entry, in the least recently used one. Out of
 * memory: nothing is kept (the cache is an optimisation). */
static void cache_put(gr_state *st, const gr_vocab *v, int allowed) {
    mask_entry *e = &st->cache[0];
    for (int i = 1; i < GR_MASK_CACHE; i++)
        if (st->cache[i].used < e->used) e = &st->cache[i];
    int32_t *set = realloc(e->set, st->n_cur * sizeof *set);
    if (set) e->set = set;
    uint8_t *ok = set ? realloc(e->ok, (size_t)v->V) : NULL;
    if (ok) e->ok = ok;
    if (!set || !ok) {
        e->used = 0;
        e->n = (size_t)-1; /* never matches */
        return;
    }
    memcpy(e->set, st->cur, st->n_cur * sizeof *set);
    e->v = v;
    e->n = st->n_cur;
    memcpy(e->ok, st->ok, (size_t)v->V);
    e->allowed = allowed;
    e->used = ++st->clock;
}

uint64_t gr_mask_hits(const gr_state *st) { return st->hits; }

int gr_mask(gr_state *st, const gr_vocab *v, float *logits) {
    mask_entry *hit = st->ended ? NULL : cache_find(st, v);
    if (hit) {
        st->hits++;
        for (int id = 0; id < v->V; id++)
            if (!hit->ok[id]) logits[id] = -INFINITY;
        return hit->allowed;
    }
    if (st->n_ok < v->V) {
        uint8_t *p = realloc(st->ok, (size_t)v->V);
        if (!p) { st->oom = 1; return -1; }
        st->ok = p;
        st->n_ok = v->V;
    }
    if (st->n_doff < v->max_len + 1) {
        size_t *p = realloc(st->doff, (size_t)(v->max_len + 1) * sizeof *p);
        if (!p) { st->oom = 1; return -1; }
        st->doff = p;
        st->n_doff = v->max_len + 1;
    }
    memset(st->ok, 0, (size_t)v->V);
    int allowed = st->ended ? 0 : walk(st, v);
    if (allowed < 0) return -1;
    if (allowed == 0 || gr_complete(st))
        for (int i = 0; i < v->n_eog; i++)
            if (v->eog_own[i] >= 0 && v->eog_own[i] < v->V && !st->ok[v->eog_own[i]]) st->ok[v->eog_own[i]] = 1, allowed++;
    if (!st->ended) cache_put(st, v, allowed);
    for (int id = 0; id < v->V; id++)
        if (!st->ok[id]) logits[id] = -INFINITY;
    return allowed;
}

int gr_accept_token(gr_state *st, const gr_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog_own[i] == id) {
            int ok = gr_complete(st);
            st->ended = 1;
            return ok ? 0 : -1;
        }
    if (id < 0 || id >= v->V || v->at[id] < 0) return -1;
    return gr_accept(st, v->t[v->at[id]].p, v->t[v->at[id]].len);
}
