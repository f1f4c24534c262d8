/* misbehave.c - a test kernel that fails on purpose, to test how failures are kept.
 * Param mode: ok (a cheap sum), crash (SIGSEGV in k_run), hang (never returns),
 * wrong (fails its known-answer test), nosetup (k_setup fails), skip (k_skip),
 * garbage (prints non-JSON and exits).
 */
#include "cpulab.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char k_unit[] = "iterations";

static const char *mode;

void *k_setup(void)
{
    static int ctx;
    mode = k_param_str("mode", "ok");
    if (strcmp(mode, "nosetup") == 0) {
        k_fail("setup refused on purpose");
        return NULL;
    }
    if (strcmp(mode, "skip") == 0) {
        k_skip("skipped on purpose");
        return NULL;
    }
    if (strcmp(mode, "garbage") == 0) {
        puts("this is not json");
        exit(1);
    }
    return &ctx;
}

int k_verify(void *ctx)
{
    (void)ctx;
    if (strcmp(mode, "wrong") == 0) {
        k_fail("known answer 42 != 41");
        return 1;
    }
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    (void)ctx;
    if (strcmp(mode, "crash") == 0)
        raise(SIGSEGV);
    if (strcmp(mode, "hang") == 0)
        for (;;)
            pause();
    uint64_t h = 0;
    for (uint64_t i = 0; i < reps * 1000; i++)
        h = k_mix(h, i);
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)reps * 1000;
}
