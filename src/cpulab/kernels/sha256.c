/* sha256.c - SHA-256 (FIPS 180-4) of an in-memory buffer, portable C.
 *
 * Parameters: size (bytes hashed per repetition, default 16384).
 * Unit: bytes.  Verified against the FIPS 180-4 example vectors and the
 * one-million-'a' vector before anything is timed.
 */
#include "cpulab.h"
#include "sha256_core.h"

#include <stdlib.h>
#include <string.h>

const char k_unit[] = "bytes";

struct ctx {
    size_t size;
    uint8_t *buf;
};

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->buf = sha256_message(&c->size);
    if (!c->buf)
        return NULL;
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
    uint8_t digest[32];
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        c->buf[0] ^= (uint8_t)r; /* a new message each time: nothing to hoist */
        sha256(c->buf, c->size, digest);
        uint64_t w;
        memcpy(&w, digest, sizeof w);
        h = k_mix(h, w);
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)c->size * (double)reps;
}
