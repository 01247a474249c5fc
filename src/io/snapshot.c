/*
 * snapshot.c — a Hugging Face snapshot directory's weights: one
 * model.safetensors, or model.safetensors.index.json whose weight_map
 * ({"tensor name": "shard file name"}) spreads tensors over shards.
 *
 * The snapshot keeps one table of tensors sorted by name; each row points at
 * (file, header entry) and carries a "used" flag that tern_snapshot_get sets,
 * so the model loader can report weights it never asked for.
 *
 * Depends on base/, tensor/, io/safetensors.c, io/config.c (JSON documents).
 */
#include "io/config.h"
#include "io/io_internal.h"
#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>

struct snap_tensor {
    const char *name; /* borrowed from the file's header */
    size_t file_idx;
    size_t entry_idx;
    bool used;
};

struct tern_snapshot {
    char *dir;
    struct tern_st_file **files;
    size_t n_files;
    struct snap_tensor *tensors; /* sorted by name */
    size_t n_tensors;
};

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const struct snap_tensor *)a)->name, ((const struct snap_tensor *)b)->name);
}

static enum tern_status open_single(struct tern_snapshot *s, const char *path)
{
    s->files = tern_calloc(1, sizeof *s->files);
    if (!s->files) return TERN_E_NO_MEMORY;
    TERN_TRY(tern_st_file_open(path, &s->files[0]));
    s->n_files = 1;
    const struct tern_st_header *h = tern_st_file_header(s->files[0]);
    s->tensors = tern_calloc(h->n_entries ? h->n_entries : 1, sizeof *s->tensors);
    if (!s->tensors) return TERN_E_NO_MEMORY;
    for (size_t i = 0; i < h->n_entries; i++)
        s->tensors[i] = (struct snap_tensor){h->entries[i].name, 0, i, false};
    s->n_tensors = h->n_entries; /* already sorted by name */
    return TERN_OK;
}

/* A shard name must be a plain file name inside the snapshot directory. */
static bool shard_name_ok(const char *n)
{
    return n[0] && strcmp(n, ".") != 0 && strcmp(n, "..") != 0 && !strchr(n, '/') &&
           !strchr(n, '\\');
}

/* Index of shard `name` in `names` (appending it when new). */
static enum tern_status shard_idx(const char ***names, size_t *n, size_t *cap, const char *name,
                                  size_t *idx)
{
    for (size_t i = *n; i-- > 0;) {
        if (strcmp((*names)[i], name) == 0) {
            *idx = i;
            return TERN_OK;
        }
    }
    TERN_TRY(tern_grow((void **)names, cap, *n + 1, sizeof **names));
    (*names)[*n] = name;
    *idx = (*n)++;
    return TERN_OK;
}

/* Checks the weight_map's entries, collects the distinct shard names and
 * opens each shard once. */
static enum tern_status open_shards(struct tern_snapshot *s, const struct tern_json_doc *idx,
                                    const json_t *wmap)
{
    const char **names = NULL;
    size_t n = 0, cap = 0, k;
    enum tern_status st = TERN_OK;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wmap, key, v)
    {
        if (!key[0]) {
            st = tern_io_error(TERN_E_FORMAT, "%s: weight_map has an empty tensor name ''",
                               idx->path);
            goto done;
        }
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            st = tern_io_error(
                TERN_E_FORMAT, "%s: weight_map['%s'] must be a shard file name, got %s", idx->path,
                key, json_is_string(v) ? json_string_value(v) : tern_json_type_name(v));
            goto done;
        }
        if ((st = shard_idx(&names, &n, &cap, json_string_value(v), &k)) != TERN_OK) goto done;
    }
    if (!(s->files = tern_calloc(n ? n : 1, sizeof *s->files))) {
        st = TERN_E_NO_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char *path = tern_path_join(s->dir, names[i]);
        if (!path) {
            st = TERN_E_NO_MEMORY;
            goto done;
        }
        if (!tern_file_exists(path))
            st = tern_io_error(TERN_E_NOT_FOUND, "%s: shard '%s' named in weight_map is missing",
                               idx->path, names[i]);
        else
            st = tern_st_file_open(path, &s->files[i]);
        tern_free(path);
        if (st != TERN_OK) goto done;
        s->n_files++;
    }
done:
    tern_free(names);
    return st;
}

/* Every shard tensor the index names must name this shard. */
static enum tern_status check_shard_tensors(const struct tern_snapshot *s,
                                            const struct tern_json_doc *idx, const json_t *wmap)
{
    for (size_t f = 0; f < s->n_files; f++) {
        const char *path = tern_st_file_path(s->files[f]);
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const struct tern_st_header *h = tern_st_file_header(s->files[f]);
        for (size_t i = 0; i < h->n_entries; i++) {
            const json_t *v = json_object_get(wmap, h->entries[i].name);
            if (!v) {
                tern_log(TERN_LOG_DEBUG, "%s: tensor '%s' is not in %s; ignored", path,
                         h->entries[i].name, idx->path);
                continue;
            }
            if (strcmp(json_string_value(v), base) != 0)
                return tern_io_error(TERN_E_FORMAT,
                                     "%s: tensor '%s' is in this shard but %s assigns it to '%s'",
                                     path, h->entries[i].name, idx->path, json_string_value(v));
        }
    }
    return TERN_OK;
}

/* Builds the tensor table from the weight_map (files already open). */
static enum tern_status fill_from_index(struct tern_snapshot *s, const struct tern_json_doc *idx,
                                        const json_t *wmap)
{
    size_t n = json_object_size(wmap);
    if (!(s->tensors = tern_calloc(n ? n : 1, sizeof *s->tensors))) return TERN_E_NO_MEMORY;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wmap, key, v)
    {
        const char *shard = json_string_value(v);
        size_t f = 0;
        for (; f < s->n_files; f++) {
            const char *p = tern_st_file_path(s->files[f]);
            const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
            if (strcmp(base, shard) == 0) break;
        }
        TERN_ASSERT(f < s->n_files);
        const struct tern_st_header *h = tern_st_file_header(s->files[f]);
        const struct tern_st_entry *e = tern_st_header_find(h, key);
        if (!e)
            return tern_io_error(TERN_E_FORMAT,
                                 "%s: tensor '%s' that %s assigns to this shard is absent",
                                 tern_st_file_path(s->files[f]), key, idx->path);
        s->tensors[s->n_tensors++] =
            (struct snap_tensor){e->name, f, (size_t)(e - h->entries), false};
    }
    qsort(s->tensors, s->n_tensors, sizeof *s->tensors, cmp_tensor);
    return TERN_OK;
}

static enum tern_status open_index(struct tern_snapshot *s, const char *path)
{
    struct tern_json_doc idx;
    TERN_TRY(tern_json_doc_load(path, &idx));
    enum tern_status st = TERN_OK;
    const json_t *wmap = json_object_get(idx.root, "weight_map");
    if (!wmap)
        st = tern_io_error(TERN_E_FORMAT, "%s: key 'weight_map' is missing", path);
    else if (!json_is_object(wmap))
        st = tern_io_error(TERN_E_FORMAT, "%s: key 'weight_map' must be an object, got %s", path,
                           tern_json_type_name(wmap));
    if (st == TERN_OK) st = open_shards(s, &idx, wmap);
    if (st == TERN_OK) st = check_shard_tensors(s, &idx, wmap);
    if (st == TERN_OK) st = fill_from_index(s, &idx, wmap);
    tern_json_doc_deinit(&idx);
    return st;
}

enum tern_status tern_snapshot_open(const char *dir, struct tern_snapshot **out)
{
    *out = NULL;
    struct tern_snapshot *s = tern_calloc(1, sizeof *s);
    if (!s) return TERN_E_NO_MEMORY;
    char *single = NULL, *index = NULL;
    enum tern_status st = TERN_E_NO_MEMORY;
    if (!(s->dir = tern_strdup(dir))) goto fail;
    if (!(single = tern_path_join(dir, "model.safetensors"))) goto fail;
    if (!(index = tern_path_join(dir, "model.safetensors.index.json"))) goto fail;
    if (tern_file_exists(single))
        st = open_single(s, single);
    else if (tern_file_exists(index))
        st = open_index(s, index);
    else
        st = tern_io_error(TERN_E_NOT_FOUND,
                           "%s: no model.safetensors or model.safetensors.index.json", dir);
    if (st != TERN_OK) goto fail;
    tern_free(single);
    tern_free(index);
    *out = s;
    return TERN_OK;
fail:
    tern_free(single);
    tern_free(index);
    tern_snapshot_close(s);
    return st;
}

void tern_snapshot_close(struct tern_snapshot *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_files; i++) tern_st_file_close(s->files[i]);
    tern_free(s->files);
    tern_free(s->tensors);
    tern_free(s->dir);
    tern_free(s);
}

const char *tern_snapshot_dir(const struct tern_snapshot *s)
{
    return s->dir;
}

static struct snap_tensor *find(const struct tern_snapshot *s, const char *name)
{
    struct snap_tensor key = {.name = name};
    if (!s->n_tensors) return NULL;
    return bsearch(&key, s->tensors, s->n_tensors, sizeof key, cmp_tensor);
}

static void view_of(const struct tern_snapshot *s, const struct snap_tensor *t,
                    struct tern_tensor_view *out)
{
    tern_st_file_view(s->files[t->file_idx], t->entry_idx, out);
}

enum tern_status tern_snapshot_get(struct tern_snapshot *s, const char *name,
                                   struct tern_tensor_view *out)
{
    struct snap_tensor *t = find(s, name);
    if (!t) {
        memset(out, 0, sizeof *out);
        return tern_io_error(TERN_E_NOT_FOUND, "%s: tensor '%s' not found", s->dir, name);
    }
    t->used = true;
    view_of(s, t, out);
    return TERN_OK;
}

bool tern_snapshot_has(const struct tern_snapshot *s, const char *name)
{
    return find(s, name) != NULL;
}

size_t tern_snapshot_n_tensors(const struct tern_snapshot *s)
{
    return s->n_tensors;
}

void tern_snapshot_tensor_at(const struct tern_snapshot *s, size_t i, struct tern_tensor_view *out)
{
    TERN_ASSERT(i < s->n_tensors);
    view_of(s, &s->tensors[i], out);
}

const char **tern_snapshot_unused(const struct tern_snapshot *s, size_t *n_unused)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_tensors; i++) n += !s->tensors[i].used;
    if (n_unused) *n_unused = 0;
    const char **names = tern_calloc(n + 1, sizeof *names);
    if (!names) return NULL;
    n = 0;
    for (size_t i = 0; i < s->n_tensors; i++)
        if (!s->tensors[i].used) names[n++] = s->tensors[i].name;
    if (n_unused) *n_unused = n;
    return names;
}
