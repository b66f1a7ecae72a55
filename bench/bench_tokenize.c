/*
 * bench_tokenize.c — encode speed of the tokenizer on one core: MB/s over a file (or a built-in mixed
 * corpus), cold (empty BPE cache) and warm (second pass).
 * Usage: build/bench_tokenize TOKENIZER.json|MODEL.sluice [TEXT_FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "util/clock.h"

static const char *SAMPLE =
    "The quick brown fox jumps over the lazy dog. It's 2024-06-01 and we've 12,345 items at $6.78 each.\n"
    "def main(argv):\n\tfor i in range(10):\n\t\tprint(i, argv[i])\n\n    return 0\n"
    "Привет, мир! 你好，世界。 مرحبا بالعالم. Café résumé naïve 👍🏽 👨‍👩‍👧‍👦\n";

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s TOKENIZER.json|MODEL.sluice [TEXT_FILE]\n", argv[0]); return 2; }
    sl_tokenizer *t = NULL;
    sl_error err = {0};
    double t0 = clk_now_s();
    if (sl_tokenizer_load(argv[1], &t, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double load = clk_now_s() - t0;
    char *text = NULL;
    size_t len = 0;
    if (argc > 2) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) { perror(argv[2]); return 1; }
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc(len + 1);
        if (!text || fread(text, 1, len, f) != len) { fprintf(stderr, "%s: read failed\n", argv[2]); return 1; }
        fclose(f);
    } else { /* ~16 MB of the sample with a varying number so the BPE cache does not see only repeats */
        size_t cap = 16u << 20;
        text = malloc(cap + 4096);
        while (len < cap) len += (size_t)sprintf(text + len, "%s%zu ", SAMPLE, len * 2654435761u % 1000003);
    }
    printf("tokenizer: %s (%d ids), loaded in %.3f s; text: %.1f MB\n", argv[1], sl_tokenizer_n_vocab(t), load, len / 1e6);
    for (int pass = 0; pass < 2; pass++) {
        int32_t *ids = NULL;
        int n = 0;
        double a = clk_now_s();
        if (sl_tokenize(t, text, len, 0, &ids, &n, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double dt = clk_now_s() - a;
        printf("%s pass: %d tokens in %.3f s = %.1f MB/s, %.2f M tokens/s\n", pass ? "warm" : "cold", n, dt,
               len / 1e6 / dt, n / 1e6 / dt);
        free(ids);
    }
    free(text);
    sl_tokenizer_free(t);
    return 0;
}
