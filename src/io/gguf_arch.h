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

/* ---- the model a GGUF holds, in Hugging Face terms ---- */

/* The config.json a GGUF stands for, synthesized from general.architecture's
 * keys (llama, qwen2, qwen3):
 *
 *   ARCH.block_count                        num_hidden_layers
 *   ARCH.embedding_length                   hidden_size
 *   ARCH.feed_forward_length                intermediate_size
 *   ARCH.attention.head_count               num_attention_heads
 *   ARCH.attention.head_count_kv            num_key_value_heads (default: heads)
 *   ARCH.attention.key_length / value_length head_dim (they must agree)
 *   ARCH.attention.layer_norm_rms_epsilon   rms_norm_eps
 *   ARCH.rope.freq_base                     rope_theta (default 10000)
 *   ARCH.rope.dimension_count               partial_rotary_factor (dims / head_dim)
 *   ARCH.rope.scaling.{type,factor,original_context_length}
 *                                           rope_scaling {rope_type linear / yarn, ...}
 *   ARCH.context_length                     max_position_embeddings
 *   ARCH.vocab_size / the tokens / token_embd rows   vocab_size
 *   no output.weight                        tie_word_embeddings
 *   tokenizer.ggml.bos / eos, eot, eom ids  bos_token_id, eos_token_id [list]
 *
 * plus architectures / model_type. The document's path reads "FILE (GGUF
 * metadata as config.json)", so that the config getters' messages name the
 * file. TERN_E_UNSUPPORTED for another architecture, for rope_freqs.weight
 * (llama.cpp's per-dimension rope factors, which tern's rope does not take
 * yet) and for key_length != value_length. */
enum tern_status tern_gguf_hf_config(const struct tern_gguf *g, struct tern_json_doc *out);

/* The Hugging Face name of a GGUF tensor (token_embd.weight ->
 * model.embed_tokens.weight, blk.N.attn_q.weight ->
 * model.layers.N.self_attn.q_proj.weight, ...; .bias as .weight), written
 * into buf. False for a name with no Hugging Face counterpart
 * (rope_freqs.weight, other architectures' tensors) or one that does not fit. */
bool tern_gguf_hf_name(const char *gguf_name, char *buf, size_t cap);

/* The reverse: the GGUF name of a Hugging Face tensor name
 * (model.layers.N.mlp.up_proj.weight -> blk.N.ffn_up.weight), for messages
 * about tensors a file lacks. False when there is none or it does not fit. */
bool tern_gguf_name_from_hf(const char *hf_name, char *buf, size_t cap);

/* llama.cpp's converter permutes the rows of q and k (weights and biases) of
 * the llama architecture within each head, so that its rope can rotate
 * adjacent pairs: Hugging Face row h * head_dim + i (i < head_dim) is GGUF row
 * h * head_dim + 2 * (i % (head_dim / 2)) + i / (head_dim / 2). This returns
 * the GGUF row of Hugging Face row `hf_row`. */
int64_t tern_gguf_rope_src_row(int64_t hf_row, int64_t head_dim);
/* Copies n_rows rows of row_bytes each from src (GGUF order) to dst (Hugging
 * Face order). Rows hold whole quantization blocks, so this is right for every
 * tensor type. n_rows must be a multiple of head_dim (an even number). */
void tern_gguf_rows_unpermute(const void *src, void *dst, int64_t n_rows, size_t row_bytes,
                              int64_t head_dim);

/* One tensor of a GGUF under its Hugging Face name. */
struct tern_gguf_weight {
    char *hf_name; /* owned */
    const struct tern_gguf_tensor *t;
    int n_dims;
    int64_t shape[TERN_GGUF_MAX_DIMS]; /* Hugging Face order, outermost first (ne reversed) */
    int64_t rope_head_dim; /* > 0: rows in llama.cpp's q/k order (tern_gguf_rows_unpermute) */
};

/* A GGUF seen as a snapshot: the synthesized config and the tensors by
 * Hugging Face name. Tensors without one are listed in `unmapped`. */
struct tern_gguf_model {
    struct tern_gguf *g;              /* owned */
    struct tern_json_doc config;      /* tern_gguf_hf_config */
    struct tern_gguf_weight *weights; /* sorted by hf_name */
    size_t n_weights;
    const struct tern_gguf_tensor **unmapped;
    size_t n_unmapped;
};

/* Opens a GGUF file and builds the view; errors name the file. */
enum tern_status tern_gguf_model_open(const char *path, struct tern_gguf_model **out);
void tern_gguf_model_close(struct tern_gguf_model *m);
/* By Hugging Face name; NULL when absent. */
const struct tern_gguf_weight *tern_gguf_model_find(const struct tern_gguf_model *m,
                                                    const char *hf_name);

#endif /* TERN_IO_GGUF_ARCH_H */
