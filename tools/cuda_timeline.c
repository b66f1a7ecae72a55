/* tools/cuda_timeline.c: a kernel timeline of any CUDA program, for the GPU machine where Nsight Systems cannot make a
 * report (the device library's KINDS.md: nsys writes a .qdstrm it cannot convert). A CUDA injection library: the
 * driver loads it when CUDA_INJECTION64_PATH names it and calls InitializeInjection at cuInit; it enables CUPTI's
 * activity records for kernels, copies, sets and the runtime / driver API calls, and at exit writes one line a record
 * to $SLTL_OUT (default /tmp/sltl.txt):
 *   K start end stream corr grid block name       a kernel (ns, the GPU's timestamps)
 *   M start end stream corr bytes kind            a copy;  S ... a memset
 *   R start end cbid corr                         a runtime API call (host thread);  D ... a driver API call
 * tools/cuda_timeline.py reads it: per decode step, the kernels' busy time, the gaps between them and how far the
 * host's launches ran ahead of the GPU (a launch's API end against its kernel's start).
 * Built here: gcc -shared -fPIC -O2 -I/usr/local/cuda/include tools/cuda_timeline.c -o DIR/libsltl.so -L<cupti dir>
 * -lcupti -Wl,-rpath,'$ORIGIN' (tools/cuda_call.sh's bundle carries libcupti.so.13 beside it). Not part of sluice. */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_BYTES (8u << 20)

static FILE *out;
static unsigned long long n_rec, n_drop;

static void CUPTIAPI buf_req(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buf_done(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        n_rec++;
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
            fprintf(out, "K %llu %llu %u %u %dx%dx%d %dx%dx%d %s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->streamId, k->correlationId, k->gridX, k->gridY, k->gridZ,
                    k->blockX, k->blockY, k->blockZ, k->name ? k->name : "?");
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            fprintf(out, "M %llu %llu %u %u %llu %u\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    m->streamId, m->correlationId, (unsigned long long)m->bytes, (unsigned)m->copyKind);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            fprintf(out, "S %llu %llu %u %u %llu 0\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    m->streamId, m->correlationId, (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
            fprintf(out, "%c %llu %llu %u %u\n", r->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? 'R' : 'D',
                    (unsigned long long)a->start, (unsigned long long)a->end, (unsigned)a->cbid, a->correlationId);
            break;
        }
        default: break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) n_drop += dropped;
    free(buffer);
}

static void at_end(void) {
    cuptiActivityFlushAll(1);
    if (out) {
        fprintf(out, "# records %llu dropped %llu\n", n_rec, n_drop);
        fclose(out);
        out = NULL;
    }
}

int InitializeInjection(void) {
    const char *path = getenv("SLTL_OUT");
    out = fopen(path && *path ? path : "/tmp/sltl.txt", "w");
    if (!out) return 0;
    setvbuf(out, NULL, _IOFBF, 1 << 20);
    if (cuptiActivityRegisterCallbacks(buf_req, buf_done) != CUPTI_SUCCESS) return 0;
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    if (!getenv("SLTL_NO_API")) {
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
    }
    atexit(at_end);
    return 1;
}
