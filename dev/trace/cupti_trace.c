/*
 * cupti_trace.c — a CUPTI injection library that writes every kernel's GPU
 * start / end (ns), grid and name to a CSV, CUDA graphs' kernel nodes
 * included: the real decode step on a time line where Nsight Systems is not
 * installed (the GPU machine has ncu and CUPTI, not nsys). Dev tool, not part
 * of the library; scripts/gpu-profile.sh (TRACE=1) builds it on the device:
 *   gcc -O2 -shared -fPIC -I$CUDA/extras/CUPTI/include -DKREC=CUpti_ActivityKernelN \
 *       dev/trace/cupti_trace.c -L$CUDA/extras/CUPTI/lib64 -lcupti -o libtrace.so
 * and runs a program with CUDA_INJECTION64_PATH=libtrace.so TRACE_OUT=file.csv.
 * scripts/step-timeline.py turns the CSV into a per-kernel table of a step.
 */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef KREC
#define KREC CUpti_ActivityKernel9
#endif

static FILE *g_out;

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *size = 8u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                   size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const KREC *k = (const KREC *)rec;
        if (g_out)
            fprintf(g_out, "%llu,%llu,%d,%d,%d,%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->gridX, k->gridY, k->gridZ, k->name);
    }
    free(buf);
}

static void at_exit(void)
{
    cuptiActivityFlushAll(1);
    if (g_out) fclose(g_out);
    g_out = NULL;
}

int InitializeInjection(void)
{
    const char *path = getenv("TRACE_OUT");
    g_out = fopen(path ? path : "trace.csv", "w");
    if (!g_out) return 0;
    fprintf(g_out, "start,end,gx,gy,gz,name\n");
    if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: CUPTI setup failed\n");
        return 0;
    }
    atexit(at_exit);
    return 1;
}
