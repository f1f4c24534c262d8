/* inflated.c - a throughput-bound bench kernel whose true rate is known relative to its
 * honest twin.
 *
 * Each repetition compresses 200 SHA-256 blocks (12800 bytes) and reports 12800 bytes of
 * work; with INFLATE_PERCENT=1.5 in the environment it compresses 203 blocks and still
 * reports 12800 bytes, so its true rate is exactly 200/203 of the honest one (less the
 * per-call overhead, a few cycles against ~200k).  The parameter `point` only names a
 * point of an experiment (every point does the same work).  bench/power.py measures
 * these as variants and counts how often cpulab calls the difference.
 */
#include "cpulab.h"
#include "../../src/cpulab/kernels/sha256_core.h" /* the same compression function as the sha256 workload */

#include <stdlib.h>

const char k_unit[] = "bytes";

#define BLOCKS 200
#define MAX_EXTRA 20 /* 10% */

struct ctx {
    uint8_t buf[(BLOCKS + MAX_EXTRA) * 64];
    uint64_t blocks; /* compressed per repetition */
};

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const char *pct = getenv("INFLATE_PERCENT");
    double extra = pct ? atof(pct) * BLOCKS / 100 : 0;
    if (extra < 0 || extra > MAX_EXTRA || extra != (double)(uint64_t)extra) {
        k_fail("INFLATE_PERCENT must be a multiple of 0.5 within 0..10");
        return NULL;
    }
    c->blocks = BLOCKS + (uint64_t)extra;
    k_note("point", (double)k_param_int("point", 0));
    for (size_t i = 0; i < sizeof c->buf; i++)
        c->buf[i] = (uint8_t)(i * 7);
    return c;
}

int k_verify(void *ctx)
{
    (void)ctx;
    return sha256_self_test();
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint32_t st[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (uint64_t r = 0; r < reps; r++) {
        st[0] ^= (uint32_t)r;
        sha256_blocks(st, c->buf, c->blocks);
    }
    return ((uint64_t)st[0] << 32) | st[7];
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)BLOCKS * 64 * (double)reps;
}
