/*
 * tok_gguf.h — a tokenizer and chat template from a GGUF file's metadata
 * (tokenizer.ggml.* and tokenizer.chat_template), built into the same
 * struct tern_tokenizer that tokenizer.json gives, so that encoding,
 * decoding and streaming are the ones every other model uses.
 *
 * Depends on io/gguf.h, io/gguf_arch.h, include/tern.h.
 */
#ifndef TERN_TEXT_TOK_GGUF_H
#define TERN_TEXT_TOK_GGUF_H

#include "io/gguf.h"

/* Builds the tokenizer a GGUF describes. Supported tokenizer.ggml.model:
 *
 *   gpt2   byte-level BPE over tokens + merges; tokenizer.ggml.pre picks the
 *          pre-tokenizer tern uses for the Hugging Face tokenizer it came from:
 *          llama-bpe / llama3 / llama-v3 (Llama 3 regex, merges ignored for
 *          whole-vocabulary words), qwen2 / deepseek-r1-qwen (NFC, Qwen2 regex),
 *          smollm (each digit alone, then GPT-2's regex), gpt2 / gpt-2 /
 *          default / absent (GPT-2's regex)
 *   llama  SentencePiece BPE: tokens + scores, ' ' -> U+2581 with a leading
 *          U+2581 (unless tokenizer.ggml.add_space_prefix is false), pieces
 *          merged best score first (leftmost among equals), byte fallback to
 *          <0xXX> tokens, unknown characters fused into one unk
 *
 * Token types: CONTROL and UNKNOWN tokens become special added tokens,
 * USER_DEFINED ones non-special added tokens (both matched on the raw text
 * before anything else, as Hugging Face does); UNUSED ids are holes that
 * decode to nothing. Special ids and add_bos / add_eos as tern_gguf_tok_ids.
 * Anything else is TERN_E_UNSUPPORTED naming the key and its value. */
enum tern_status tern_tokenizer_from_gguf(const struct tern_gguf *g, struct tern_tokenizer **out);

/* The chat template of a GGUF: tokenizer.chat_template, or, for a name other
 * than NULL / "default", tokenizer.chat_template.<name>. TERN_E_NOT_FOUND
 * when the file has none. */
enum tern_status tern_chat_template_from_gguf(const struct tern_gguf *g, const char *name,
                                              struct tern_chat_template **out);

#endif /* TERN_TEXT_TOK_GGUF_H */
