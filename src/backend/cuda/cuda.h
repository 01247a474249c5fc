/*
 * cuda.h — the CUDA backend's entry points beyond the op table: creation,
 * device count, and CUDA-graph capture of a sequence of ops. No CUDA headers
 * here: callers outside src/backend/cuda/ may include it. Depends on
 * backend/backend.h.
 *
 * Graphs: every op of this backend is capturable (no host sync, no
 * allocation, no host copies, all on the backend's stream). A caller that
 * has uploaded a batch into fixed buffers can
 *     tern_cuda_graph_begin(be);  ...ops...;  tern_cuda_graph_end(be, &g);
 * and later tern_cuda_graph_launch(be, g) after refreshing those buffers.
 * Launch shapes are frozen at capture (grid sizes come from the host batch
 * maxima), so capture one graph per (n_tokens, n_seqs, max_seq_len bucket);
 * src/model/forward.c keeps such a cache for decode batches.
 */
#ifndef TERN_BACKEND_CUDA_H
#define TERN_BACKEND_CUDA_H

#include "backend/backend.h"

enum tern_status tern_backend_cuda_create(const struct tern_backend_params *params,
                                          struct tern_backend **out);
/* Number of visible CUDA devices (0 when none or the driver is missing). */
int tern_backend_cuda_device_count(void);

/* The same calls as the op table's graph_* hooks (backend.h). */
/* Starts capturing the backend's stream; ops are recorded, not run. */
enum tern_status tern_cuda_graph_begin(struct tern_backend *be);
/* Ends the capture and instantiates it into *out (tern_cuda_graph_free). */
enum tern_status tern_cuda_graph_end(struct tern_backend *be, struct tern_graph **out);
/* Enqueues a captured graph on the backend's stream (no sync). */
enum tern_status tern_cuda_graph_launch(struct tern_backend *be, struct tern_graph *g);
void tern_cuda_graph_free(struct tern_graph *g);

#endif /* TERN_BACKEND_CUDA_H */
