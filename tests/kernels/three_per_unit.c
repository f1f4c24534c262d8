/* three_per_unit.c - a kernel whose timed work is a known number of instructions, for
 * the instruction count (measure/instructions.py): per rep, a loop of 4096 trips, each
 * exactly three instructions (add, dec, jnz), so 3 instructions per unit of work plus a
 * few per rep for the C loop around it.  Its set-up and known-answer test run thousands
 * of other instructions, which the count must leave out. */
#include "cpulab.h"

const char k_unit[] = "trips";

#define TRIPS 4096

static uint64_t trips(uint64_t x, uint64_t n)
{
#if defined(__x86_64__)
    __asm__ volatile("1:\n\tadd $3, %0\n\tdec %1\n\tjnz 1b" : "+r"(x), "+r"(n) : : "cc");
#else
    for (; n; n--)
        x += 3;
#endif
    return x;
}

void *k_setup(void)
{
    static uint64_t x;
    for (int i = 0; i < 100000; i++) /* work outside k_run that must not be counted */
        x = x * 31 + (uint64_t)i;
    k_note("lanes", 1);
    return &x;
}

int k_verify(void *ctx)
{
    (void)ctx;
    if (trips(0, 5) != 15) {
        k_fail("the loop does not add 3 per trip");
        return 1;
    }
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    uint64_t x = *(uint64_t *)ctx;
    for (uint64_t r = 0; r < reps; r++)
        x = trips(x, TRIPS);
    return x;
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)TRIPS * (double)reps;
}
