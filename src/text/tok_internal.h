/*
 * tok_internal.h — the private layout of struct tern_tokenizer, shared by the
 * tok_*.c files that implement the "text" tokenizer API of include/tern.h:
 *
 *   tok_map.c      string -> id and (id, id) -> merge hash maps, UTF-8 helpers
 *   tok_json.c     fast scanner for the two huge tokenizer.json arrays
 *                  (model.vocab, model.merges); the rest goes through jansson
 *   tok_load.c     tern_tokenizer_open: components, added tokens, config
 *   tok_gguf.c     tern_tokenizer_from_gguf: the same tokenizer from GGUF metadata
 *   tok_norm.c     normalizers
 *   tok_pretok.c   pre-tokenizers (Split/ByteLevel regexes through PCRE2 JIT)
 *   tok_bpe.c      the BPE model: merge loop with a binary heap, word cache
 *   tok_encode.c   added-token matching, the encode pipeline, post-processors
 *   tok_decode.c   decoders, tern_detokenize, the streaming detokenizer
 *
 * The pipeline follows Hugging Face `tokenizers` (the oracle): added tokens
 * are split off first (non-normalized ones on the raw text, normalized ones
 * after normalization), then each remaining piece is pre-tokenized and fed to
 * the model, then the post-processor adds special tokens.
 *
 * Depends on base/, PCRE2 (8-bit), utf8proc, jansson.
 */
#ifndef TERN_TOK_INTERNAL_H
#define TERN_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/base.h"

/* ------------------------------------------------------------ maps */

/* Ids beyond this are rejected at load (real vocabularies stay under 1M). */
#define TOK_MAX_ID (1 << 24)

/* Token strings by id plus an open-addressing index string -> id. Ids with
 * no string (holes) have off == UINT32_MAX. */
struct tok_vocab {
    int32_t n;           /* ids 0..n-1 */
    int32_t cap_ids;
    uint32_t *off, *len; /* [n] the token's bytes in strs */
    char *strs;
    size_t strs_len, strs_cap;
    uint64_t *slots; /* [mask + 1] hash tag << 32 | (id + 1); 0 = empty */
    uint32_t mask;
    int32_t n_keys;
};

enum tern_status tok_vocab_reserve(struct tok_vocab *v, int32_t n_ids, size_t n_bytes);
/* Sets the string of `id` (growing the id range) and indexes it. A string
 * already indexed under another id keeps its first id in the index. */
enum tern_status tok_vocab_set(struct tok_vocab *v, int32_t id, const char *s, size_t len);
int32_t tok_vocab_find(const struct tok_vocab *v, const char *s, size_t len);
/* Extends the id range to n_ids (new ids are holes). */
enum tern_status tok_vocab_grow(struct tok_vocab *v, int32_t n_ids);
void tok_vocab_deinit(struct tok_vocab *v);
static inline const char *tok_vocab_str(const struct tok_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n || v->off[id] == UINT32_MAX) return NULL;
    *len = v->len[id];
    return v->strs + v->off[id];
}

/* (left id, right id) -> (rank, merged id). */
struct tok_merge_slot {
    uint64_t key; /* left << 32 | right, UINT64_MAX = empty */
    int32_t rank, new_id;
};

struct tok_merges {
    struct tok_merge_slot *slots; /* [mask + 1] */
    uint32_t mask;
    int32_t n;
};

enum tern_status tok_merges_reserve(struct tok_merges *m, size_t n);
enum tern_status tok_merges_add(struct tok_merges *m, int32_t a, int32_t b, int32_t rank,
                                int32_t new_id);
static inline bool tok_merges_get(const struct tok_merges *m, int32_t a, int32_t b, int32_t *rank,
                                  int32_t *new_id)
{
    if (!m->slots) return false;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        const struct tok_merge_slot *x = &m->slots[i];
        if (x->key == k) {
            *rank = x->rank;
            *new_id = x->new_id;
            return true;
        }
        if (x->key == UINT64_MAX) return false;
    }
}
void tok_merges_deinit(struct tok_merges *m);

uint64_t tok_hash_bytes(const char *s, size_t n);

/* ------------------------------------------------------------ UTF-8 */

/* Length of the valid UTF-8 character at s (1..4), or 0 if invalid. */
int tok_utf8_len(const unsigned char *s, size_t n);
/* Decodes a valid character (as checked by tok_utf8_len). */
int32_t tok_utf8_decode(const unsigned char *s, int len);
int tok_utf8_encode(int32_t cp, char *out);
/* Copies `len` bytes, replacing each maximal invalid subsequence with U+FFFD
 * (as Python's errors='replace' and Rust's from_utf8_lossy do). */
enum tern_status tok_utf8_sanitize(const char *s, size_t len, struct tern_str *out);
/* Bytes at the end of s that form an incomplete (but so far valid) character. */
size_t tok_utf8_incomplete_tail(const char *s, size_t len);
bool tok_cp_is_whitespace(int32_t cp);
bool tok_cp_is_alnum(int32_t cp);
bool tok_cp_is_numeric(int32_t cp);

/* ------------------------------------------------------------ patterns */

/* A Split/Replace pattern: a literal string or a compiled regex. */
struct tok_pattern {
    bool is_regex;
    char *str; /* literal (or regex source) */
    size_t len;
    pcre2_code *re;
};

/* Per-call regex scratch (pcre2 match data and JIT stack are not shareable). */
struct tok_rx {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
};

enum tern_status tok_rx_init(struct tok_rx *rx);
void tok_rx_deinit(struct tok_rx *rx);
/* Finds the next match at or after `from` (start and end in ms, me); false when none. */
bool tok_pattern_next(const struct tok_pattern *p, struct tok_rx *rx, const char *s, size_t len,
                      size_t from, size_t *ms, size_t *me);
enum tern_status tok_pattern_compile(struct tok_pattern *p, const char *what);
void tok_pattern_deinit(struct tok_pattern *p);

/* ------------------------------------------------------------ components */

enum tok_norm_type {
    TOK_NORM_NFC,
    TOK_NORM_NFKC,
    TOK_NORM_NFD,
    TOK_NORM_NFKD,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_STRIP,
    TOK_NORM_LOWERCASE,
};

struct tok_norm {
    enum tok_norm_type type;
    char *content; /* prepend / replacement text */
    size_t content_len;
    struct tok_pattern pat;
    bool left, right; /* Strip */
};

enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};

enum tok_pretok_type {
    TOK_PRE_SPLIT,
    TOK_PRE_BYTELEVEL,
    TOK_PRE_METASPACE,
    TOK_PRE_DIGITS,
};

enum tok_prepend_scheme { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

struct tok_pretok {
    enum tok_pretok_type type;
    struct tok_pattern pat; /* Split; ByteLevel's regex when use_regex */
    enum tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space, use_regex;   /* ByteLevel */
    char repl[8];                       /* Metaspace replacement (UTF-8) */
    size_t repl_len;
    enum tok_prepend_scheme prepend;    /* Metaspace */
    bool split;                         /* Metaspace */
    bool individual_digits;             /* Digits */
};

enum tok_dec_type {
    TOK_DEC_BYTELEVEL,
    TOK_DEC_METASPACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_REPLACE,
};

struct tok_dec {
    enum tok_dec_type type;
    char repl[8]; /* Metaspace replacement */
    size_t repl_len;
    bool prepend_never;
    char *content; /* Strip: the char; Replace: the replacement */
    size_t content_len;
    int start, stop; /* Strip */
    struct tok_pattern pat;
};

struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    char *match; /* what is matched: content, normalized when `normalized` */
    size_t match_len;
    bool special, lstrip, rstrip, normalized, single_word;
};

/* A byte trie over added-token strings, for leftmost-longest matching. */
struct tok_trie {
    int32_t *node_tok;   /* [n_nodes] index into tok->added, or -1 */
    uint64_t *edge_keys; /* (node << 8 | byte) + 1, 0 = empty */
    int32_t *edge_child;
    uint32_t edge_mask;
    int32_t n_nodes, n_edges;
    uint8_t first[32]; /* bitmap of first bytes */
};

/* ------------------------------------------------------------ the tokenizer */

struct tern_tokenizer {
    struct tok_vocab vocab;    /* every id: model vocab and added tokens */
    struct tok_vocab raw;      /* byte-level only: model tokens as raw bytes */
    struct tok_merges merges;
    int32_t n_model;           /* size of the model vocabulary id range */
    int32_t unk_id;            /* -1 if none */
    bool byte_fallback, fuse_unk, ignore_merges;
    bool byte_level;           /* the ByteLevel pre-tokenizer maps bytes to chars */
    int32_t byte_id[256];      /* byte-level: id of each byte's char; else <0xXX> tokens */
    int32_t ascii_id[128];     /* non byte-level: id of each ASCII char, -1 if none */
    int16_t char_byte[324];    /* ByteLevel decoding: char (< 324) -> byte, -1 if none */

    struct tok_norm *norms;
    int n_norms;
    struct tok_pretok *pretoks;
    int n_pretoks;
    struct tok_dec *decs;
    int n_decs;
    bool has_decoder;

    /* post-processor: ids before and after the sequence */
    int32_t *pp_pre, *pp_post;
    int n_pp_pre, n_pp_post;

    struct tok_added *added;
    int n_added;
    struct tok_trie trie_raw, trie_norm;
    int32_t *added_of_id; /* [vocab.n] index into added, or -1 */

    int32_t bos_id, eos_id;
    bool add_bos, add_eos; /* tokenizer_config add_bos_token / add_eos_token */

    /* decode: per id, the bytes a byte-level token stands for (NULL otherwise) */
    bool dec_bytelevel_only; /* the decoder is exactly ByteLevel */
};

/* ------------------------------------------------------------ internals */

/* GPT-2's pre-tokenizer regex (HF ByteLevel with use_regex). */
extern const char tok_gpt2_regex[];

/* After the vocabulary, components and merges are in place: the byte and
 * ASCII lookup tables (and, for byte-level vocabularies, the raw-bytes index
 * and the decoder flag). Before tok_build_added. */
enum tern_status tok_build_tables(struct tern_tokenizer *tok);
/* After the added tokens are in tok->added: their match strings
 * (normalized where they ask for it), the id -> added index and the tries. */
enum tern_status tok_build_added(struct tern_tokenizer *tok);

enum tern_status tok_json_scan_model(char *buf, size_t len, struct tern_tokenizer *tok,
                                     const char *path);
/* The raw text of a top-level member's value (*start NULL when absent);
 * TERN_E_FORMAT (no message) on malformed JSON. */
enum tern_status tok_json_top_value(const char *buf, size_t len, const char *key,
                                    const char **start, size_t *vlen);

enum tern_status tok_normalize(const struct tern_tokenizer *tok, struct tok_rx *rx, const char *s,
                               size_t len, struct tern_str *out);
enum tern_status tok_norm_apply(const struct tok_norm *n, struct tok_rx *rx, const char *s,
                                size_t len, struct tern_str *out);

/* Pre-tokenized pieces: byte ranges in a pool string. */
struct tok_piece {
    size_t off, len;
    bool at_start; /* begins at offset 0 of the original text */
};

struct tok_pieces {
    struct tok_piece *v;
    size_t n, cap;
};

struct tok_ctx; /* per-call scratch, tok_encode.c */

enum tern_status tok_pretokenize(const struct tern_tokenizer *tok, struct tok_rx *rx,
                                 struct tern_str *pool, struct tok_pieces *a,
                                 struct tok_pieces *b, struct tok_pieces **out);

/* BPE scratch and cache, per call. */
struct tok_bpe_scratch;
struct tok_bpe_scratch *tok_bpe_scratch_create(void);
void tok_bpe_scratch_destroy(struct tok_bpe_scratch *s);
/* Appends the ids of one pre-tokenized word to *ids. */
enum tern_status tok_bpe_word(const struct tern_tokenizer *tok, struct tok_bpe_scratch *s,
                              const char *w, size_t len, int32_t **ids, size_t *n_ids,
                              size_t *cap_ids);

/* Trie over added tokens. */
enum tern_status tok_trie_build(struct tok_trie *t, const struct tern_tokenizer *tok,
                                bool normalized);
void tok_trie_deinit(struct tok_trie *t);
/* Longest added token starting at s[i], as an index into tok->added (-1 if
 * none), its length in *mlen. */
int32_t tok_trie_longest(const struct tok_trie *t, const char *s, size_t len, size_t i,
                         size_t *mlen);


#endif /* TERN_TOK_INTERNAL_H */
