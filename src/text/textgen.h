/*
 * textgen.h — the text side of generating one sequence, token by token: streaming detokenization, the
 * end-of-generation check, stop strings (the tail of the text that could still begin one is held back),
 * and max_tokens. sl_generate() drives one with a session; the server's scheduler drives one per
 * request from its batched steps. Internal to the library.
 */
#ifndef SL_TEXTGEN_H
#define SL_TEXTGEN_H

#include "sluice.h"
#include "text/tokenizer.h"

typedef struct textgen {
    const sl_tokenizer *tok;
    sl_detok *d;
    tok_buf hold;             /* text not yet final */
    size_t shift;             /* bytes at its front handed out by the last call */
    const char *const *stop;  /* borrowed */
    int n_stop;
    int max_tokens;           /* <= 0: no limit (thinking included, unless answer_only) */
    int answer_only;          /* max_tokens counts the answer's tokens only (n_generated - n_thinking) */
    int n_generated;
    /* Thinking (textgen_think): stop strings apply to the answer, not to a <think> block opening the
     * text. phase: TG_ANSWER (stop strings apply from hold[scan_from]), TG_MAYBE (a <think>
     * may still open the text: everything is held), TG_THINK (inside the block), TG_AFTER (after
     * </think>, before the answer's first non-space byte). mark: where the next tag search begins. */
    int phase;
    size_t scan_from, mark;
    int n_thinking;           /* tokens generated before the answer began (the block and its tags) */
    int n_maybe;              /* tokens taken in TG_MAYBE (thinking if a <think> opens the text) */
} textgen;

enum { TG_ANSWER = 0, TG_MAYBE, TG_THINK, TG_AFTER };

/* tok may be NULL (a model without a tokenizer): ids only, no text and no end-of-generation token. */
sl_status textgen_init(textgen *g, const sl_tokenizer *tok, const sl_gen_params *p);
void textgen_free(textgen *g);
/* Sets how the text may open (right after textgen_init): 0 no thinking (the default: stop strings
 * apply from the first byte), 1 the text may open with a <think>...</think> block, 2 it starts inside
 * one (the prompt ended with <think>). Stop strings are then looked for from the answer's first
 * non-space byte after </think> on, and n_thinking counts the tokens before it (max_tokens counts
 * all, unless g->answer_only is set after this call); the block's text is handed out as it comes (only a possible </think> held back). */
void textgen_think(textgen *g, int mode);

/* Takes a sampled token. *text / *len: the text that became final with it (valid until the next call).
 * Returns 1 when generation ends here (*why says why; on SL_STOP_EOG / SL_STOP_LENGTH the rest of the
 * held text is included, on SL_STOP_STRING the text up to the stop string), 0 to go on, -1 when out of
 * memory. `room` is 0 when the context has no position left for this token to be evaluated into. */
int textgen_push(textgen *g, int32_t id, int room, const char **text, size_t *len, sl_stop_reason *why);
/* Ends generation early (a callback, a cancel): the text still held back (up to a stop string in it);
 * NULL when out of memory. */
const char *textgen_flush(textgen *g, size_t *len);

#endif
