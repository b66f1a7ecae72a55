/*
 * pull.h — the parts of sl_pull (sluice.h) that are worth testing on their own: repository paths that
 * are safe to write under a directory, and which files the default selection takes.
 */
#ifndef SL_PULL_H
#define SL_PULL_H

/* 1 if `path` (a repository file name from the hub) may be written under a directory: relative, no
 * empty, "." or ".." component, no backslash or control character. */
int pull_path_safe(const char *path);

/* 1 if the default selection (what sl_pack reads) takes the top-level file `path`; *.safetensors counts
 * here (sl_pull narrows it to the shards an index names). */
int pull_default_wanted(const char *path);

#endif
