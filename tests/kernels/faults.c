/* faults.c - a page-fault kernel (tests/test_events.py, bench/events_power.py): each call
 * maps `pages` new anonymous pages, writes one byte in each (one minor fault a page) and
 * unmaps them.  Built with -DMORE_PERCENT=P it touches P% more pages than its k_work
 * reports, so its page-faults per unit are exactly 1 + P/100 of the honest build's. */
#include "cpulab.h"

#include <stdlib.h>
#include <sys/mman.h>

#ifndef MORE_PERCENT
#define MORE_PERCENT 0
#endif

const char k_unit[] = "iterations"; /* one page touched */

struct ctx {
    size_t pages;   /* reported as the work */
    size_t touched; /* touched per call */
};

void *k_setup(void)
{
    struct ctx *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    c->pages = (size_t)k_param_int("pages", 256);
    c->touched = c->pages + c->pages * MORE_PERCENT / 100;
    return c;
}

uint64_t k_run(void *p, uint64_t reps)
{
    const struct ctx *c = p;
    uint64_t sum = 0;
    for (uint64_t r = 0; r < reps; r++) {
        size_t n = c->touched * 4096;
        volatile char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return 0;
        for (size_t i = 0; i < n; i += 4096)
            m[i] = (char)(i >> 12);
        sum += (uint64_t)m[0]; /* the same in every build: the automatic check passes */
        munmap((void *)m, n);
    }
    return sum;
}

double k_work(const void *p, uint64_t reps)
{
    const struct ctx *c = p;
    return (double)c->pages * (double)reps;
}
