/* hotcold.c - a kernel with one deliberately hot loop and one cold function, for the
 * sampled profile: per rep, hot_loop runs 20000 dependent multiply-adds and
 * cold_function 50 (1/400 of the work). */
#include "cpulab.h"

#include <stdlib.h>

const char k_unit[] = "iterations";

__attribute__((noinline)) static uint64_t hot_loop(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + i;
        __asm__ volatile("" : "+r"(x)); /* one dependent chain: the compiler keeps the loop */
    }
    return x;
}

__attribute__((noinline)) static uint64_t cold_function(uint64_t x)
{
    for (int i = 0; i < 50; i++)
        x ^= x >> 7 ^ (uint64_t)i;
    return x;
}

void *k_setup(void)
{
    static int dummy;
    return &dummy;
}

int k_verify(void *ctx)
{
    (void)ctx;
    /* x_{i+1} = x_i * a + i from x_0 = 1, three steps: 1 -> a -> a^2 + 1 -> (a^2 + 1) a + 2 */
    const uint64_t a = 6364136223846793005ull;
    if (hot_loop(1, 3) != (a * a + 1) * a + 2) {
        k_fail("hot_loop does not compute its recurrence");
        return 1;
    }
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    (void)ctx;
    uint64_t h = 1;
    for (uint64_t r = 0; r < reps; r++)
        h = cold_function(hot_loop(h, 20000));
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return 20050.0 * (double)reps;
}
