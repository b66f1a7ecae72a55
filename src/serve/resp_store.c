/*
 * resp_store.c — the Responses kept for previous_response_id (http.h): each answered response's
 * conversation (the input items it was given, after its predecessors', and its output items), as JSON
 * text under its id, in memory, the least recently used dropped beyond a byte bound. A request naming
 * one continues that conversation: its items go before the request's input (gen.c resp_splice), and
 * the prefix cache finds the evaluated state of what they render to.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http.h"

typedef struct kept {
    char *id, *items;
    size_t bytes;
    uint64_t used;
    struct kept *next;
} kept;

struct resp_store {
    pthread_mutex_t mu;
    kept *list;
    size_t bytes, max_bytes;
    uint64_t clock;
};

resp_store *resp_store_new(size_t max_bytes) {
    resp_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->max_bytes = max_bytes;
    return s;
}

static void kept_free(kept *k) {
    free(k->id);
    free(k->items);
    free(k);
}

void resp_store_free(resp_store *s) {
    if (!s) return;
    while (s->list) {
        kept *k = s->list;
        s->list = k->next;
        kept_free(k);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Drops the least recently used entries until the store holds at most max_bytes (mu held). */
static void evict(resp_store *s) {
    while (s->bytes > s->max_bytes && s->list) {
        kept **lru = &s->list;
        for (kept **p = &s->list; *p; p = &(*p)->next)
            if ((*p)->used < (*lru)->used) lru = p;
        kept *k = *lru;
        *lru = k->next;
        s->bytes -= k->bytes;
        kept_free(k);
    }
}

int resp_store_put(resp_store *s, const char *id, const char *items) {
    kept *k = calloc(1, sizeof *k);
    if (!k || !(k->id = strdup(id)) || !(k->items = strdup(items))) {
        if (k) kept_free(k);
        return -1;
    }
    k->bytes = strlen(id) + strlen(items) + sizeof *k;
    pthread_mutex_lock(&s->mu);
    k->used = ++s->clock;
    k->next = s->list;
    s->list = k;
    s->bytes += k->bytes;
    evict(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

char *resp_store_get(resp_store *s, const char *id) {
    char *out = NULL;
    pthread_mutex_lock(&s->mu);
    for (kept *k = s->list; k; k = k->next)
        if (!strcmp(k->id, id)) {
            k->used = ++s->clock;
            out = strdup(k->items);
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return out;
}
