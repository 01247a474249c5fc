/*
 * sample.h — turning one row of logits into one token, on the CPU: logit
 * processors (penalties, bias), greedy or random sampling with temperature,
 * top-k, top-p and min-p, a counter-based RNG, and logprobs of the raw
 * distribution. This is the reference; on CUDA the engine runs the same
 * processing on the device (backend sample op, src/backend/cuda/
 * cuda_sample.cu) and downloads only ids and requested logprobs; rows it
 * cannot take (a logit_bias naming one token twice) come here.
 *
 * Order of processing, for one row x = logits[vocab] (the input is not
 * modified; work happens in the sampler's scratch):
 *
 *   logprobs    raw log_softmax(logits): the sampled token's logprob and the
 *               top_logprobs come from the model's own distribution, before
 *               any processing (OpenAI's and vLLM's default)
 *   1. penalties  repetition (HF RepetitionPenaltyLogitsProcessor, over
 *               prompt + generated): each distinct token t seen gets
 *               x[t] = x[t] > 0 ? x[t] / rp : x[t] * rp;
 *               then frequency and presence (OpenAI, over generated only):
 *               x[t] -= frequency * count[t] + presence * (count[t] > 0)
 *   2. logit_bias x[id] += bias
 *   3. temperature: temperature == 0 -> greedy: the argmax of x (lowest id on
 *               ties), steps 4-6 skipped; else x /= temperature
 *   4. top_k      keep the k largest (ties: lower id first); k <= 0 = off
 *   5. top_p      over the softmax of what is kept, sorted by probability:
 *               keep the shortest prefix whose mass reaches top_p (always at
 *               least one token); top_p >= 1 = off
 *   6. min_p      keep tokens with p >= min_p * p_max (p of what is kept);
 *               min_p <= 0 = off
 *   7. sample     draw u in [0, 1) from Philox4x32-10 keyed by the seed, at
 *               counter (step, stream): walk the kept tokens in increasing
 *               id order until the cumulative (unnormalised) probability
 *               exceeds u times the kept mass.
 *
 * Cost: top_k selects in O(vocab) then sorts k; top_p without top_k sorts
 * the whole row (O(vocab log vocab)); fine for a reference path.
 *
 * vLLM applies the same processors; it differs in placing min_p before
 * top_k/top_p and keeping every token tied with the k-th under top_k. We
 * follow the order above (the issue's) and break ties by token id so that
 * results are exact and reproducible.
 *
 * Reproducibility: the random draw depends only on (seed, stream, step):
 * the engine passes stream = the sequence's index within its request
 * (n > 1) and step = the number of tokens it has generated so far, so the
 * same seed gives the same tokens whatever else is in the batch and after a
 * preemption. A request without a seed gets one from the engine.
 *
 * Stop token ids are not decided here: the scheduler ends a sequence that
 * samples one (sched/sched.h).
 *
 * Depends on base/ only.
 */
#ifndef TERN_SAMPLE_H
#define TERN_SAMPLE_H

#include "base/base.h"

#define TERN_SAMPLE_MAX_TOP_LOGPROBS 20

struct tern_sampler;

/* Per-request settings. Arrays are borrowed for the duration of a call. */
struct tern_sample_params {
    float temperature;        /* 0 = greedy; >= 0 */
    int32_t top_k;            /* <= 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off */
    float presence_penalty;   /* [-2, 2] in OpenAI's API; 0 = off */
    float frequency_penalty;  /* [-2, 2] in OpenAI's API; 0 = off */
    const int32_t *bias_ids;  /* [n_bias] logit_bias keys */
    const float *bias_values; /* [n_bias] added to those logits */
    int32_t n_bias;
    uint64_t seed;
    bool logprobs;            /* report the sampled token's logprob */
    int32_t top_logprobs;     /* 0 .. TERN_SAMPLE_MAX_TOP_LOGPROBS alternatives */
};

/* The sequence being sampled (penalties and RNG position). */
struct tern_sample_ctx {
    const int32_t *tokens; /* [n_tokens] prompt then generated */
    int32_t n_prompt;
    int32_t n_tokens;
    uint32_t stream;       /* sequence index within its request (n > 1) */
    uint64_t step;         /* tokens generated so far: the RNG counter */
};

struct tern_sample_result {
    int32_t token;
    float logprob;        /* raw log_softmax of token (when params.logprobs or top_logprobs) */
    int32_t n_top;        /* == params.top_logprobs */
    int32_t top_ids[TERN_SAMPLE_MAX_TOP_LOGPROBS];      /* descending logprob, lower id on ties */
    float top_logprobs[TERN_SAMPLE_MAX_TOP_LOGPROBS];
};

/* The defaults: greedy off (temperature 1), every processor off, seed 0. */
struct tern_sample_params tern_sample_default_params(void);

/* Validates settings against the vocabulary (bias ids in range, finite
 * values, ranges above). TERN_E_INVALID_ARG naming the field; the engine
 * calls it at submit. */
enum tern_status tern_sample_params_check(const struct tern_sample_params *p, int32_t vocab);

/* Creates a sampler with scratch for rows of `vocab` logits. */
enum tern_status tern_sampler_create(int32_t vocab, struct tern_sampler **out);
void tern_sampler_destroy(struct tern_sampler *s);

/* Samples one token from logits[vocab] (not modified). No allocation.
 * Context tokens must be in [0, vocab) (others are ignored by penalties).
 * TERN_E_INVALID_ARG for invalid params (see tern_sample_params_check)
 * or a row with no finite logit. */
enum tern_status tern_sampler_sample(struct tern_sampler *s, const float *logits,
                                     const struct tern_sample_params *p,
                                     const struct tern_sample_ctx *ctx,
                                     struct tern_sample_result *out);

/* The probabilities the sampler would draw from, after all processors
 * ([vocab], zeros for removed tokens; a one-hot row for greedy). For tests
 * and debugging; same processing as tern_sampler_sample. */
enum tern_status tern_sampler_probs(struct tern_sampler *s, const float *logits,
                                    const struct tern_sample_params *p,
                                    const struct tern_sample_ctx *ctx, float *probs);

/* What frequency and presence penalties subtract from the logit of a
 * token generated count (> 0) times; the device path calls it too, so both
 * subtract the same float. */
float tern_sample_penalty_sub(const struct tern_sample_params *p, int32_t count);

/* Philox4x32-10 (Salmon et al. 2011, Random123): one block of 4 random
 * words for counter ctr under key. */
void tern_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A double in [0, 1) from (seed, stream, step), with 53 random bits. */
double tern_sample_uniform(uint64_t seed, uint32_t stream, uint64_t step);

#endif /* TERN_SAMPLE_H */
