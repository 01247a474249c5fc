/*
 * fuzz_gguf.c — libFuzzer target: arbitrary bytes as a whole GGUF file
 * image.
 *
 * Runs the checks tern_gguf_open makes (tern_gguf_parse), then, when they
 * pass, walks everything the handle hands out: every key by lookup, every
 * value through the typed getters and array accessors (nested arrays too),
 * every byte of every tensor, and every row of a tensor whose type has a
 * dequantizer through tern_ggml_dequant_row and tern_ggml_dot_row, so that
 * an accepted header whose lengths or offsets escape the image shows up under
 * ASan. Then the tokenizer and chat template the metadata describes, when it
 * describes one: a fixed text through tokenize and detokenize. Errors must be
 * one line.
 */
#include "io/gguf.h"
#include "text/tok_gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_message(void)
{
    if (strchr(tern_last_error(), '\n')) abort();
}

static volatile uint64_t sink;

static void walk_value(const struct tern_gguf_value *v)
{
    if (v->type == TERN_GGUF_STRING) {
        for (uint64_t j = 0; j < v->n; j++) sink += v->data[j];
        return;
    }
    if (v->type != TERN_GGUF_ARRAY) return;
    for (uint64_t j = 0; j < v->n; j++) {
        size_t len;
        switch (v->elem_type) {
        case TERN_GGUF_STRING: {
            const char *s = tern_gguf_arr_str(v, j, &len);
            for (size_t k = 0; k < len; k++) sink += (uint8_t)s[k];
            break;
        }
        case TERN_GGUF_ARRAY:
            walk_value(tern_gguf_arr_arr(v, j));
            break;
        case TERN_GGUF_FLOAT32:
        case TERN_GGUF_FLOAT64:
            sink += (uint64_t)(tern_gguf_arr_float(v, j) != 0);
            break;
        case TERN_GGUF_BOOL:
            sink += tern_gguf_arr_bool(v, j);
            break;
        default:
            sink += (uint64_t)tern_gguf_arr_int(v, j);
            break;
        }
    }
}

static void walk_tensor(const struct tern_gguf_tensor *t)
{
    const uint8_t *p = t->data;
    for (uint64_t j = 0; j < t->n_bytes; j++) sink += p[j];
    const struct tern_ggml_traits *tr = tern_ggml_type_traits(t->type);
    if (!tr || !tr->dequant || t->ne[0] > 4096 || t->n_bytes == 0) return;
    float *row = malloc((size_t)t->ne[0] * sizeof *row + 1);
    float *x = calloc((size_t)t->ne[0] + 1, sizeof *x);
    uint64_t row_bytes = 0;
    if (row && x && tern_ggml_row_bytes(t->type, t->ne[0], &row_bytes)) {
        for (uint64_t off = 0; off + row_bytes <= t->n_bytes; off += row_bytes) {
            float d;
            if (!tern_ggml_dequant_row(t->type, p + off, row, t->ne[0])) abort();
            if (!tern_ggml_dot_row(t->type, p + off, x, t->ne[0], &d)) abort();
        }
    }
    free(row);
    free(x);
}

static void walk_tokenizer(const struct tern_gguf *g)
{
    struct tern_tokenizer *tok = NULL;
    if (tern_tokenizer_from_gguf(g, &tok) == TERN_OK) {
        static const char text[] = "Hello world 123 <|s|> \xe2\x96\x81 caf\xc3\xa9 \xff";
        int32_t *ids;
        size_t n, len;
        char *back;
        if (tern_tokenize(tok, text, sizeof text - 1, true, &ids, &n) == TERN_OK) {
            if (tern_detokenize(tok, ids, n, false, &back, &len) == TERN_OK)
                tern_free_buf(back);
            else
                check_message();
            tern_free_buf(ids);
        } else {
            check_message();
        }
        tern_tokenizer_close(tok);
    } else {
        check_message();
    }
    struct tern_chat_template *t = NULL;
    if (tern_chat_template_from_gguf(g, NULL, &t) == TERN_OK)
        tern_chat_template_destroy(t);
    else
        check_message();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* copy so that the image ends exactly at the end of an allocation */
    uint8_t *img = malloc(size ? size : 1);
    if (!img) return 0;
    if (size) memcpy(img, data, size);
    struct tern_gguf *g = NULL;
    if (tern_gguf_parse(img, size, "fuzz.gguf", &g) == TERN_OK) {
        for (size_t i = 0; i < tern_gguf_n_kv(g); i++) {
            const struct tern_gguf_kv *kv = tern_gguf_kv_at(g, i);
            if (tern_gguf_find(g, kv->key) != &kv->v) abort();
            walk_value(&kv->v);
            int64_t n;
            double f;
            bool b;
            const char *s;
            if (tern_gguf_get_int(g, kv->key, &n)) check_message();
            if (tern_gguf_get_float(g, kv->key, &f)) check_message();
            if (tern_gguf_get_bool(g, kv->key, &b)) check_message();
            if (tern_gguf_get_str(g, kv->key, &s, NULL)) check_message();
        }
        for (size_t i = 0; i < tern_gguf_n_tensors(g); i++) {
            const struct tern_gguf_tensor *t = tern_gguf_tensor_at(g, i);
            if (tern_gguf_find_tensor(g, t->name) != t) abort();
            walk_tensor(t);
        }
        walk_tokenizer(g);
        tern_gguf_close(g);
    } else {
        if (g) abort();
        check_message();
    }
    free(img);
    return 0;
}
