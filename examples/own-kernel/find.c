/* find.c - cpulab's kernel around lib/scan.c: the first zero byte of a `size`-byte
 * buffer whose only zero is its last byte, so every byte is read.
 *
 * It has no k_verify: cpulab checks that each variant's first_zero answers as the
 * baseline's does (one k_run call's checksum, compared before anything is timed).
 */
#include "cpulab.h"
#include "scan.h"

#include <stdlib.h>

const char k_unit[] = "bytes";

struct ctx {
    unsigned char *buf;
    size_t n;
};

void *k_setup(void)
{
    struct ctx *c = malloc(sizeof *c);
    if (!c) {
        k_fail("out of memory");
        return NULL;
    }
    c->n = (size_t)k_param_int("size", 65536);
    c->buf = k_alloc(c->n);
    for (size_t i = 0; i < c->n; i++)
        c->buf[i] = (unsigned char)(1 + i % 255);
    c->buf[c->n - 1] = 0;
    k_note("working_set_bytes", (double)c->n);
    return c;
}

uint64_t k_run(void *p, uint64_t reps)
{
    struct ctx *c = p;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++)
        h = k_mix(h, first_zero(c->buf, c->n));
    return h;
}

double k_work(const void *p, uint64_t reps)
{
    return (double)reps * (double)((const struct ctx *)p)->n;
}
