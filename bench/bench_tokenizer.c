/*
 * bench_tokenizer.c — times tern_tokenizer_open and tern_tokenize on one
 * text file encoded as a single string (the unit tools/bench_tokenizer.py
 * also gives HF `tokenizers`). Prints one JSON line.
 *
 * usage: bench_tokenizer TOKENIZER_DIR CORPUS_FILE [REPEATS]
 * Built by tools/bench_tokenizer.py (cc -O2 over src/text/tok_*.c + src/base).
 */
#include "tern.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS_FILE [REPEATS]\n", argv[0]);
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 5;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) return 1;
    fclose(f);
    double t0 = now_s();
    struct tern_tokenizer *tok;
    if (tern_tokenizer_open(argv[1], &tok)) {
        fprintf(stderr, "%s\n", tern_last_error());
        return 1;
    }
    double load = now_s() - t0, best = 1e30;
    size_t n = 0;
    for (int r = 0; r < repeats; r++) {
        int32_t *ids;
        t0 = now_s();
        if (tern_tokenize(tok, text, (size_t)len, false, &ids, &n)) {
            fprintf(stderr, "%s\n", tern_last_error());
            return 1;
        }
        double t = now_s() - t0;
        if (t < best) best = t;
        tern_free_buf(ids);
    }
    printf("{\"load_s\": %.4f, \"encode_s\": %.4f, \"bytes\": %ld, \"tokens\": %zu}\n", load, best,
           len, n);
    tern_tokenizer_close(tok);
    free(text);
    return 0;
}
