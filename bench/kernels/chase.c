/* chase.c - a latency-bound bench kernel whose true rate is known relative to its honest
 * twin.
 *
 * A dependent pointer chase through `size` bytes (one 64-byte line a node, in a random
 * cyclic order: every load waits for the one before).  Each repetition follows 10000
 * links and reports 10000 loads of work; with INFLATE_PERCENT=1.5 in the environment it
 * follows 10150 and still reports 10000, so its true rate is exactly 10000/10150 of the
 * honest one.  `point` only names a point of an experiment.
 */
#include "cpulab.h"

#include <stdlib.h>

const char k_unit[] = "loads";

#define LINKS 10000
#define LINE 64

struct ctx {
    void **nodes;
    uint64_t links; /* followed per repetition */
    size_t count;
};

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const char *pct = getenv("INFLATE_PERCENT");
    double extra = pct ? atof(pct) * LINKS / 100 : 0;
    if (extra < 0 || extra > LINKS / 10 || extra != (double)(uint64_t)extra) {
        k_fail("INFLATE_PERCENT must be a multiple of 0.01 within 0..10");
        return NULL;
    }
    c->links = LINKS + (uint64_t)extra;
    int64_t size = k_param_int("size", 256 * 1024);
    c->count = (size_t)size / LINE;
    if (c->count < 2) {
        k_fail("size below two lines");
        return NULL;
    }
    k_note("point", (double)k_param_int("point", 0));
    char *mem = aligned_alloc(4096, c->count * LINE);
    size_t *order = malloc(c->count * sizeof *order);
    if (!mem || !order)
        return NULL;
    for (size_t i = 0; i < c->count; i++)
        order[i] = i;
    srand(12345); /* the same cycle in every process: only placement and noise differ */
    for (size_t i = c->count - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < c->count; i++)
        *(void **)(mem + order[i] * LINE) = mem + order[(i + 1) % c->count] * LINE;
    free(order);
    c->nodes = (void **)mem;
    return c;
}

/* Known answer: following `count` links from any node comes back to it (one cycle). */
int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    void **p = c->nodes;
    for (size_t i = 0; i < c->count; i++)
        p = *p;
    return p != c->nodes;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    void **p = c->nodes;
    for (uint64_t r = 0; r < reps; r++)
        for (uint64_t i = 0; i < c->links; i++)
            p = *p;
    return (uint64_t)(uintptr_t)p;
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)LINKS * (double)reps;
}
