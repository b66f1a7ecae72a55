/*
 * grammar.h — constrained decoding: a context-free grammar over bytes, recognised by a pushdown
 * automaton that keeps every possible parse (a set of stacks), and the mask it puts on a sampler's
 * logits so that the generated text always stays a prefix of a sentence of the grammar. The design is
 * llama.cpp's grammar sampler (src/llama-grammar.cpp: rules of alternatives of sequences, a set of
 * element stacks advanced one character at a time), here over bytes rather than code points (UTF-8 is
 * spelled out in the rules: text/json_schema.c), with the vocabulary walked as a sorted list of its
 * tokens' bytes so tokens that share a prefix share its work, and a token whose prefix is already
 * refused costs one comparison.
 *
 * A grammar is built rule by rule (gr_builder: each rule a list of alternatives, each a sequence of
 * byte sets and references to rules), compiled once (gr_grammar, immutable, shared by any number of
 * generations), and run by a gr_state per generation. Masking only sets refused logits to -inf and
 * depends on nothing but the state and the vocabulary, so a sequence in a batch samples exactly what
 * it samples alone.
 *
 * Rules must not be left-recursive (a rule that can reach itself without consuming a byte): such
 * paths are cut at GR_MAX_DEPTH stack entries, so they refuse rather than loop.
 */
#ifndef SL_TEXT_GRAMMAR_H
#define SL_TEXT_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define GR_MAX_DEPTH 256 /* stack entries of one parse */

/* ---- building ---------------------------------------------------------------------------------- */

typedef struct gr_builder gr_builder;

gr_builder *gr_builder_new(void); /* NULL when out of memory */
void gr_builder_free(gr_builder *b);
/* A new rule, empty (no alternative yet); its id, or -1 when out of memory. */
int gr_rule(gr_builder *b);
/* Appends to the last alternative of rule r (opening its first when it has none): one byte of the set
 * [lo, hi] (gr_range), any byte whose bit is set in bits[256 / 32] (gr_set), the bytes of s in order
 * (gr_lit, gr_litn), a reference to rule ref (gr_ref). gr_alt starts rule r's next alternative (an
 * alternative left empty matches the empty string). All record a failure (out of memory, a bad rule
 * id) that gr_compile reports; they cannot fail otherwise. */
void gr_range(gr_builder *b, int r, uint8_t lo, uint8_t hi);
void gr_set(gr_builder *b, int r, const uint32_t bits[8]);
void gr_lit(gr_builder *b, int r, const char *s);
void gr_litn(gr_builder *b, int r, const char *s, size_t n);
void gr_ref(gr_builder *b, int r, int ref);
void gr_alt(gr_builder *b, int r);
/* Helpers that make rules: x repeated min..max times (max < 0: unbounded), and x or nothing. They
 * return the new rule's id (-1 when out of memory). */
int gr_repeat(gr_builder *b, int x, int min, int max);
int gr_optional(gr_builder *b, int x);

/* ---- grammars ---------------------------------------------------------------------------------- */

typedef struct gr_grammar gr_grammar;

/* The grammar whose sentences are those of rule root. SL_ENOMEM, or SL_EINVAL when a rule is
 * referenced that has no alternative or a failure was recorded. The builder is left as it was. */
sl_status gr_compile(const gr_builder *b, int root, gr_grammar **out, sl_error *err);
void gr_grammar_free(gr_grammar *g);

/* ---- running ----------------------------------------------------------------------------------- */

/* Where a generation is in the grammar: the parses of the bytes accepted so far. */
typedef struct gr_state gr_state;

sl_status gr_state_new(const gr_grammar *g, gr_state **out); /* at the start; SL_ENOMEM */
void gr_state_free(gr_state *st);
/* Accepts n bytes: 0, or -1 when they do not continue any parse (st is then unchanged) or memory ran
 * out (gr_state_oom). */
int gr_accept(gr_state *st, const char *s, size_t n);
/* 1 when the bytes accepted so far are a whole sentence (the text may end here). */
int gr_complete(const gr_state *st);
/* 1 when nothing may follow (a whole sentence that no byte extends). */
int gr_finished(const gr_state *st);
int gr_state_oom(const gr_state *st);

/* ---- the vocabulary ---------------------------------------------------------------------------- */

/* A tokenizer's tokens, by their bytes (tok_piece), sorted; the end-of-generation ids apart. Special
 * tokens other than those, and tokens without bytes, are never allowed. */
typedef struct gr_vocab gr_vocab;

sl_status gr_vocab_new(const sl_tokenizer *tok, int n_vocab, gr_vocab **out, sl_error *err);
/* A vocabulary of n_vocab tokens given by their bytes (pieces[id], lens[id]; NULL or 0: never
 * allowed) and end-of-generation ids; the pieces must outlive it. SL_ENOMEM. */
sl_status gr_vocab_from_pieces(const char *const *pieces, const size_t *lens, int n_vocab, const int32_t *eog,
                               int n_eog, gr_vocab **out);
void gr_vocab_free(gr_vocab *v);
/* Sets logits[id] = -inf for every token of v that st refuses: a token is allowed when its bytes
 * continue a parse; an end-of-generation token when st is complete. When no token would be allowed
 * (a grammar that wants a byte no token has), the end-of-generation tokens are. Returns the number of
 * tokens allowed, or -1 when memory ran out (logits unchanged). */
int gr_mask(gr_state *st, const gr_vocab *v, float *logits);
/* How many gr_mask calls reused an earlier result: the mask of a set of stacks met again (every token
 * inside a long string leaves the same one) is kept, for the last 4 sets, and not walked again. */
uint64_t gr_mask_hits(const gr_state *st);
/* Accepts a sampled token (its bytes; an end-of-generation token ends the text). 0, or -1 when st
 * refuses it or memory ran out. */
int gr_accept_token(gr_state *st, const gr_vocab *v, int32_t id);

#endif
