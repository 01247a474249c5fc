/*
 * gguf_arch.c — GGUF metadata as tern understands it (gguf_arch.h).
 *
 * Depends on base/, io/gguf.h, io/config.h, io_internal.h, jansson.
 */
#include "io/gguf_arch.h"
#include "io/io_internal.h"

#include <string.h>

/* ---------------------------------------------------------------- special tokens */

/* Reads one id key into *id (keeping the default when absent), dropping an
 * id outside [0, n). */
static enum tern_status tok_id(const struct tern_gguf *g, const char *key, int32_t n, int32_t *id)
{
    int64_t v;
    TERN_TRY(tern_gguf_get_int_opt(g, key, *id, &v));
    if (v < -1 || v >= n) {
        tern_log(TERN_LOG_WARN,
                 "%s: key '%s' is %lld, outside the vocabulary of %d tokens: ignored",
                 tern_gguf_path(g), key, (long long)v, n);
        v = -1;
    }
    *id = (int32_t)v;
    return TERN_OK;
}

/* The first control token spelled as one of the usual end-of-turn markers. */
static int32_t find_eot(const struct tern_gguf *g, const struct tern_gguf_value *toks, int32_t eos)
{
    static const char *const names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"};
    const struct tern_gguf_value *types = NULL;
    if (tern_gguf_get_arr(g, "tokenizer.ggml.token_type", TERN_GGUF_INT32, &types) != TERN_OK) {
        tern_error_clear();
        return -1;
    }
    for (uint64_t i = 0; i < toks->n && i < types->n; i++) {
        if (tern_gguf_arr_int(types, i) != TERN_GGUF_TOKEN_CONTROL || (int32_t)i == eos) continue;
        size_t len;
        const char *s = tern_gguf_arr_str(toks, i, &len);
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (len == strlen(names[k]) && !memcmp(s, names[k], len)) return (int32_t)i;
    }
    return -1;
}

enum tern_status tern_gguf_tok_ids(const struct tern_gguf *g, struct tern_gguf_tok_ids *out)
{
    memset(out, 0xff, sizeof *out);
    out->add_bos = out->add_eos = false;
    const struct tern_gguf_value *toks;
    TERN_TRY(tern_gguf_get_arr(g, "tokenizer.ggml.tokens", TERN_GGUF_STRING, &toks));
    if (toks->n > INT32_MAX)
        return tern_io_error(TERN_E_FORMAT, "%s: key 'tokenizer.ggml.tokens' has %llu tokens",
                             tern_gguf_path(g), (unsigned long long)toks->n);
    int32_t n = out->n_tokens = (int32_t)toks->n;
    const char *model = "", *pre = "";
    TERN_TRY(tern_gguf_get_str_opt(g, "tokenizer.ggml.model", "", &model));
    TERN_TRY(tern_gguf_get_str_opt(g, "tokenizer.ggml.pre", "", &pre));
    if (!strcmp(model, "llama")) {
        out->bos = 1 < n ? 1 : -1;
        out->eos = 2 < n ? 2 : -1;
        out->unk = 0 < n ? 0 : -1;
        out->add_bos = true;
    }
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3"))
        out->add_bos = true;
    TERN_TRY(tok_id(g, "tokenizer.ggml.bos_token_id", n, &out->bos));
    TERN_TRY(tok_id(g, "tokenizer.ggml.eos_token_id", n, &out->eos));
    TERN_TRY(tok_id(g, "tokenizer.ggml.eot_token_id", n, &out->eot));
    TERN_TRY(tok_id(g, "tokenizer.ggml.eom_token_id", n, &out->eom));
    TERN_TRY(tok_id(g, "tokenizer.ggml.unknown_token_id", n, &out->unk));
    TERN_TRY(tok_id(g, "tokenizer.ggml.padding_token_id", n, &out->pad));
    TERN_TRY(
        tok_id(g, "tokenizer.ggml.seperator_token_id", n, &out->sep)); /* sic, llama.cpp's key */
    TERN_TRY(
        tern_gguf_get_bool_opt(g, "tokenizer.ggml.add_bos_token", out->add_bos, &out->add_bos));
    TERN_TRY(
        tern_gguf_get_bool_opt(g, "tokenizer.ggml.add_eos_token", out->add_eos, &out->add_eos));
    if (!tern_gguf_find(g, "tokenizer.ggml.eot_token_id")) out->eot = find_eot(g, toks, out->eos);
    return TERN_OK;
}
