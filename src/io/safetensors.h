/*
 * safetensors.h — read-only access to .safetensors files and Hugging Face
 * snapshot directories.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON ({"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]},
 * "__metadata__": {...}}), then the data section; offsets are relative to the
 * data section. Files are mmapped; views point into the mapping. Every header
 * is validated fully (dtype known, shape * dtype size == byte span, offsets in
 * bounds and non-overlapping) before any tensor is handed out, and every
 * error names the file and the tensor.
 *
 * Alignment: the format does not promise any alignment of tensor data (the
 * data section starts at 8 + N, and N is only sometimes padded to 8), so a
 * view's `data` may be unaligned for its dtype. Read it with memcpy or
 * unaligned loads, or copy it into an owned buffer.
 *
 * Depends on base/, tensor/, jansson.
 */
#ifndef TERN_IO_SAFETENSORS_H
#define TERN_IO_SAFETENSORS_H

#include "tensor/tensor.h"

/* One parsed header entry. */
struct tern_st_entry {
    char *name;
    enum tern_dtype dtype;
    int n_dims;
    int64_t shape[TERN_MAX_DIMS];
    uint64_t begin, end; /* byte offsets within the data section */
};

/* A parsed header (no file attached): what the fuzz target exercises. */
struct tern_st_header {
    struct tern_st_entry *entries; /* sorted by name */
    size_t n_entries;
};

/* Parses the JSON header bytes of a file whose data section is data_len bytes
 * long. `what` names the file in error messages. */
enum tern_status tern_st_header_parse(const char *json, size_t json_len, uint64_t data_len,
                                      const char *what, struct tern_st_header *out);
void tern_st_header_deinit(struct tern_st_header *h);
/* Binary search by name; NULL when absent. */
const struct tern_st_entry *tern_st_header_find(const struct tern_st_header *h, const char *name);

/* Parses a whole file image held in memory (8-byte length, header, data):
 * the checks tern_st_file_open makes, without a file. On success the data
 * section starts at image + *data_start. */
enum tern_status tern_st_image_parse(const void *image, size_t len, const char *what,
                                     struct tern_st_header *out, size_t *data_start);
/* Fills a view of entry e whose data section starts at data_section (NULL
 * gives a view that only describes). */
void tern_st_entry_view(const struct tern_st_entry *e, const void *data_section,
                        struct tern_tensor_view *out);

/* ---- one mmapped file ---- */
struct tern_st_file;

enum tern_status tern_st_file_open(const char *path, struct tern_st_file **out);
void tern_st_file_close(struct tern_st_file *f);
const struct tern_st_header *tern_st_file_header(const struct tern_st_file *f);
const char *tern_st_file_path(const struct tern_st_file *f);
/* Fills a view of entry i (data points into the mapping). */
void tern_st_file_view(const struct tern_st_file *f, size_t i, struct tern_tensor_view *out);

/* ---- a snapshot: config.json + one or more safetensors files ---- */
struct tern_snapshot;

/* Opens a snapshot directory: model.safetensors, or (when that is absent)
 * model.safetensors.index.json and its shards (each shard opened once, every
 * tensor of the index present in its shard, no tensor of a shard assigned to
 * another shard by the index; tensors of a shard that the index does not name
 * are ignored, as transformers does). Only the weights are read here:
 * config.json is the caller's (tern_json_doc_load on tern_snapshot_dir).
 * TERN_E_NOT_FOUND when the directory holds neither file. */
enum tern_status tern_snapshot_open(const char *dir, struct tern_snapshot **out);
void tern_snapshot_close(struct tern_snapshot *s);

const char *tern_snapshot_dir(const struct tern_snapshot *s);
/* Looks up a tensor by name. Marks it used. TERN_E_NOT_FOUND (message names
 * the tensor and the directory) when absent. */
enum tern_status tern_snapshot_get(struct tern_snapshot *s, const char *name,
                                   struct tern_tensor_view *out);
/* True when the tensor exists (does not mark it used). */
bool tern_snapshot_has(const struct tern_snapshot *s, const char *name);
/* Every tensor, in name order: for inspection and quantization. */
size_t tern_snapshot_n_tensors(const struct tern_snapshot *s);
void tern_snapshot_tensor_at(const struct tern_snapshot *s, size_t i, struct tern_tensor_view *out);
/* Names of tensors never fetched with tern_snapshot_get (NULL-terminated
 * array of borrowed names; caller frees the array with tern_free). */
const char **tern_snapshot_unused(const struct tern_snapshot *s, size_t *n_unused);

#endif /* TERN_IO_SAFETENSORS_H */
