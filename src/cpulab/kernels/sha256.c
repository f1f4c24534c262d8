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
    int64_t size = k_param_int("size", 16384);
    if (size < 1) {
        k_fail("size must be at least 1 byte, got %lld", (long long)size);
        return NULL;
    }
    c->size = (size_t)size;
    c->buf = malloc(c->size);
    if (!c->buf) {
        k_fail("cannot allocate %zu bytes", c->size);
        return NULL;
    }
    /* Deterministic content: a 64-bit LCG, so every variant hashes the same bytes. */
    uint64_t x = 0x0123456789abcdefull;
    for (size_t i = 0; i < c->size; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        c->buf[i] = (uint8_t)(x >> 56);
    }
    k_note("working_set_bytes", (double)c->size);
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
