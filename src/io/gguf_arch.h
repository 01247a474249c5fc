/*
 * gguf_arch.h — what a GGUF file's metadata means to tern: its special token
 * ids, the Hugging Face config.json it stands for, and the Hugging Face names
 * of its tensors. The design note on how src/model binds a GGUF is at the top
 * of gguf_arch.c.
 *
 * Depends on base/, tensor/, io/gguf.h, io/config.h (the synthesized config
 * is a struct tern_json_doc), jansson.
 */
#ifndef TERN_IO_GGUF_ARCH_H
#define TERN_IO_GGUF_ARCH_H

#include "io/config.h"
#include "io/gguf.h"

/* ggml's token types (tokenizer.ggml.token_type). */
enum tern_gguf_token_type {
    TERN_GGUF_TOKEN_UNDEFINED = 0,
    TERN_GGUF_TOKEN_NORMAL = 1,
    TERN_GGUF_TOKEN_UNKNOWN = 2,
    TERN_GGUF_TOKEN_CONTROL = 3,
    TERN_GGUF_TOKEN_USER_DEFINED = 4,
    TERN_GGUF_TOKEN_UNUSED = 5,
    TERN_GGUF_TOKEN_BYTE = 6,
};

/* The special tokens of a GGUF vocabulary, -1 where there is none. */
struct tern_gguf_tok_ids {
    int32_t n_tokens; /* tokenizer.ggml.tokens */
    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos;
};

/* Reads tokenizer.ggml.{bos,eos,eot,eom,unknown,padding,seperator}_token_id
 * and add_bos_token / add_eos_token, with llama.cpp's defaults where a key is
 * absent: SentencePiece vocabularies ("llama") bos 1, eos 2, unk 0 and
 * add_bos true; GPT-2 style ("gpt2") none, and add_bos only for the
 * llama-bpe / llama3 pre-tokenizer. An id outside the vocabulary is dropped
 * with a warning, as llama.cpp does. Without an eot key, a control token
 * spelled <|eot_id|>, <|im_end|>, <|end|> or <end_of_turn> other than eos is
 * taken as eot. TERN_E_NOT_FOUND when the file has no tokenizer.ggml.tokens. */
enum tern_status tern_gguf_tok_ids(const struct tern_gguf *g, struct tern_gguf_tok_ids *out);

#endif /* TERN_IO_GGUF_ARCH_H */
