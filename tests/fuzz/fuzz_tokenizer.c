/*
 * fuzz_tokenizer.c — libFuzzer target for the tokenizer (src/text/tok_*.c).
 *
 * The first input byte picks a mode; the rest is the payload:
 *   0  byte-level BPE (NFC, Split regex + ByteLevel, added tokens with
 *      lstrip/rstrip/single_word, TemplateProcessing, ByteLevel decoder)
 *   1  SentencePiece-style BPE with byte fallback and fused unk (Digits +
 *      Metaspace + Split pre-tokenizers, Replace/ByteFallback/Fuse/Strip)
 *   2  Mistral-style (Prepend + Replace normalizers, no pre-tokenizer)
 *   3  the payload is a tokenizer.json: it must load or fail cleanly, and a
 *      loaded one must encode and decode a fixed text
 * For modes 0-2 the payload (arbitrary bytes, invalid UTF-8 included) is
 * encoded with and without special tokens; every id must be in range; the
 * ids must decode; the streaming detokenizer's pieces must concatenate to the
 * whole decode. The small tokenizers are built with jansson into a temporary
 * directory on the first call.
 */
#include "tern.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dirs[4][64];

static void byte_char(int b, char *out)
{
    int cp = b, n = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static json_t *added(int id, const char *content, bool special, bool lstrip, bool rstrip,
                     bool single_word)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "special",
                     special, "lstrip", lstrip, "rstrip", rstrip, "single_word", single_word,
                     "normalized", !special);
}

static void add_merges(json_t *vocab, json_t *merges, const char *const (*m)[2], int n)
{
    for (int i = 0; i < n; i++) {
        char both[64];
        snprintf(both, sizeof both, "%s%s", m[i][0], m[i][1]);
        if (!json_object_get(vocab, both))
            json_object_set_new(vocab, both, json_integer((json_int_t)json_object_size(vocab)));
        json_array_append_new(merges, json_pack("[s, s]", m[i][0], m[i][1]));
    }
}

static json_t *template_bos(const char *bos, int id)
{
    return json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}", "type",
                     "TemplateProcessing", "single", "SpecialToken", "id", bos, "type_id", 0,
                     "Sequence", "id", "A", "type_id", 0, "special_tokens", bos, "id", bos, "ids",
                     id, "tokens", bos);
}

static json_t *bytelevel_json(void)
{
    static const char *const m[][2] = {{"\xC4\xA0", "t"}, {"h", "e"}, {"\xC4\xA0t", "he"},
                                       {"i", "n"},        {"a", "n"}, {"an", "d"},
                                       {"\xC4\xA0", "\xC4\xA0"}, {"1", "2"}};
    json_t *vocab = json_object(), *merges = json_array();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_char(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    add_merges(vocab, merges, m, (int)(sizeof m / sizeof m[0]));
    int n = (int)json_object_size(vocab);
    return json_pack(
        "{s:{s:s, s:o, s:o, s:b}, s:[o, o, o], s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, "
        "{s:s, s:b, s:b}]}, s:o, s:{s:s}}",
        "model", "type", "BPE", "vocab", vocab, "merges", merges, "ignore_merges", 1,
        "added_tokens", added(n, "<|s|>", true, false, false, false),
        added(n + 1, "<x>", false, true, true, false), added(n + 2, "word", false, false, false, true),
        "normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence", "pretokenizers", "type",
        "Split", "pattern", "Regex",
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        "behavior", "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
        "use_regex", 0, "post_processor", template_bos("<|s|>", n), "decoder", "type", "ByteLevel");
}

static json_t *sp_vocab(json_t **merges)
{
    static const char *const m[][2] = {{"\xE2\x96\x81", "t"}, {"h", "e"}, {"\xE2\x96\x81t", "he"},
                                       {"i", "n"}, {"\xE2\x96\x81", "\xE2\x96\x81"}, {"e", "x"}};
    json_t *vocab = json_object();
    json_object_set_new(vocab, "<unk>", json_integer(0));
    json_object_set_new(vocab, "<s>", json_integer(1));
    json_object_set_new(vocab, "</s>", json_integer(2));
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        json_object_set_new(vocab, s, json_integer(3 + b));
    }
    json_object_set_new(vocab, "\xE2\x96\x81", json_integer(259));
    for (int c = 0; c < 26; c++) {
        char s[2] = {(char)('a' + c), 0};
        json_object_set_new(vocab, s, json_integer(260 + c));
    }
    json_object_set_new(vocab, "1", json_integer(286));
    *merges = json_array();
    add_merges(vocab, *merges, m, (int)(sizeof m / sizeof m[0]));
    return vocab;
}

static json_t *sp_decoder(void)
{
    return json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type",
                     "Sequence", "decoders", "type", "Replace", "pattern", "String", "\xE2\x96\x81",
                     "content", " ", "type", "ByteFallback", "type", "Fuse", "type", "Strip",
                     "content", " ", "start", 1, "stop", 0);
}

static json_t *sp_json(bool mistral)
{
    json_t *merges, *vocab = sp_vocab(&merges);
    json_t *model = json_pack("{s:s, s:o, s:o, s:s, s:b, s:b}", "type", "BPE", "vocab", vocab,
                              "merges", merges, "unk_token", "<unk>", "fuse_unk", 1,
                              "byte_fallback", 1);
    json_t *norm = mistral ? json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type",
                                       "Sequence", "normalizers", "type", "Prepend", "prepend",
                                       "\xE2\x96\x81", "type", "Replace", "pattern", "String", " ",
                                       "content", "\xE2\x96\x81")
                           : json_null();
    json_t *pre = mistral ? json_null()
                          : json_pack("{s:s, s:[{s:s, s:b}, {s:s, s:s, s:s, s:b}, "
                                      "{s:s, s:{s:s}, s:s, s:b}]}",
                                      "type", "Sequence", "pretokenizers", "type", "Digits",
                                      "individual_digits", 1, "type", "Metaspace", "replacement",
                                      "\xE2\x96\x81", "prepend_scheme", "first", "split", 1, "type",
                                      "Split", "pattern", "String", "x", "behavior", "MergedWithNext",
                                      "invert", 0);
    return json_pack("{s:o, s:[o, o], s:o, s:o, s:o, s:o}", "model", model, "added_tokens",
                     added(0, "<unk>", true, false, false, false),
                     added(1, "<s>", true, false, false, false), "normalizer", norm,
                     "pre_tokenizer", pre, "post_processor", template_bos("<s>", 1), "decoder",
                     sp_decoder());
}

static void cleanup(void)
{
    char path[128];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/tokenizer.json", g_dirs[i]);
        unlink(path);
        rmdir(g_dirs[i]);
    }
}

static void setup(void)
{
    atexit(cleanup);
    json_t *docs[3] = {bytelevel_json(), sp_json(false), sp_json(true)};
    for (int i = 0; i < 4; i++) {
        snprintf(g_dirs[i], sizeof g_dirs[i], "/tmp/tern-fuzz-tok-XXXXXX");
        if (!mkdtemp(g_dirs[i])) abort();
        if (i == 3) break;
        char path[128];
        snprintf(path, sizeof path, "%s/tokenizer.json", g_dirs[i]);
        if (json_dump_file(docs[i], path, 0)) abort();
        json_decref(docs[i]);
    }
}

/* strict: the stream must reproduce the whole decode (true for the built-in
 * tokenizers; a fuzzed decoder chain may use Strip stop / Replace regexes,
 * whose stream output is only checked for not crashing). */
static void check(const struct tern_tokenizer *tok, const char *text, size_t len, bool strict)
{
    int32_t n_vocab = tern_tokenizer_vocab_size(tok);
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids;
        size_t n;
        if (tern_tokenize(tok, text, len, sp, &ids, &n)) abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= n_vocab) abort();
        char *out;
        size_t out_len;
        if (tern_detokenize(tok, ids, n, false, &out, &out_len)) abort();
        struct tern_detok_stream *s;
        if (tern_detok_stream_create(tok, false, &s)) abort();
        char *cat = malloc(out_len + 64);
        size_t cat_len = 0;
        const char *p;
        size_t pl;
        for (size_t i = 0; i <= n; i++) {
            if (i < n ? tern_detok_stream_push(s, ids[i], &p, &pl) : tern_detok_stream_flush(s, &p, &pl))
                abort();
            if (cat_len + pl > out_len) { /* more text than the whole decode */
                if (strict) abort();
                continue;
            }
            memcpy(cat + cat_len, p, pl);
            cat_len += pl;
        }
        if (strict && (cat_len != out_len || memcmp(cat, out, out_len))) abort();
        free(cat);
        tern_detok_stream_destroy(s);
        tern_free_buf(out);
        tern_free_buf(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tern_tokenizer *toks[3];
    if (!toks[0]) {
        tern_log_set_level(TERN_LOG_NONE);
        setup();
        for (int i = 0; i < 3; i++)
            if (tern_tokenizer_open(g_dirs[i], &toks[i])) {
                fprintf(stderr, "fuzz_tokenizer: %s\n", tern_last_error());
                abort();
            }
    }
    if (size == 0) return 0;
    int mode = data[0] % 4;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (mode < 3) {
        check(toks[mode], text, len, true);
        return 0;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_dirs[3]);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(text, 1, len, f);
    fclose(f);
    struct tern_tokenizer *tok;
    if (tern_tokenizer_open(g_dirs[3], &tok) == TERN_OK) {
        static const char text3[] = "Hello world, the 123 \xC3\xA9t\xC3\xA9 <|s|> \xF0\x9F\x98\x80";
        check(tok, text3, sizeof text3 - 1, false);
        tern_tokenizer_close(tok);
    }
    return 0;
}
