/*
 * store.h — the model store of the command line (store.c: layout and rules; cmd_store.c: ls, rm, show).
 */
#ifndef SL_CLI_STORE_H
#define SL_CLI_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* A model name: "ORG/NAME" and its tag (pack mode in lower case, GGUF quantization in upper case; ""
 * when none was given). */
typedef struct store_ref {
    char repo[256], tag[64];
} store_ref;

/* One model of the store. */
typedef struct store_entry {
    char repo[256], tag[64];
    char path[4600], meta[4600]; /* TAG.sluice and TAG.json */
    uint64_t bytes;              /* of the container */
    time_t used;                 /* last use: TAG.json's modification time */
} store_entry;

/* Parses "ORG/NAME[:TAG]" (letters, digits, '-', '_', '.'); 0, or -1 when spec is not one. */
int store_parse(const char *spec, store_ref *r);
/* 1 when spec names a model of the store rather than a file: ORG/NAME[:TAG], not an existing path, not
 * ending in .sluice or .gguf. */
int store_is_name(const char *spec);
/* The store's folder ($SLUICE_HOME, $XDG_CACHE_HOME/sluice, ~/.cache/sluice) into out; 0, or -1 when
 * none of the variables is set. */
int store_root(char *out, size_t n);
/* ROOT/models/ORG/NAME into out. */
void store_model_dir(const char *root, const char *repo, char *out, size_t n);
/* The models in one model folder (dir, of repo): *out malloc'ed (NULL when none); returns the count. */
int store_scan_dir(const char *dir, const char *repo, store_entry **out);
/* Every model of the store, sorted by name then tag: *out malloc'ed; returns the count (0 when the store is
 * empty or absent). */
int store_scan_all(const char *root, store_entry **out);
/* A name without its ORG, NAME[:TAG] (Ollama's short names), against the store's models' NAMEs, ignoring case:
 * returns how many repositories of the store it matches; when one, ORG/NAME[:TAG] into full. */
int store_short_name(const char *root, const char *spec, char *full, size_t n);
/* word, a NAME[:TAG] without its ORG that is not a file: the ORG/NAME[:TAG] of the store it stands for into full
 * (store_short_name), 0; or 1 after printing that several or none match (with store_suggest's names; files: the
 * command also opens files, so the message says that no file is called so either). */
int store_resolve_word(const char *cmd, const char *root, const char *word, int files, char *full, size_t n);
/* The models of the store (up to 4, "ORG/NAME:TAG, ...") whose ORG/NAME holds the NAME of spec (ignoring case
 * and any ORG/ or :TAG), into out; "" when none. */
void store_suggest(const char *root, const char *spec, char *out, size_t n);
/* Marks a model used now (its record's modification time). */
void store_touch(const char *meta);
/* snprintf into a path buffer: 0, or -1 when it did not fit (out then holds "", which names no file). */
int store_pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* rm -r path; 0, or -1 (errno). */
int store_remove_tree(const char *path);

#endif
