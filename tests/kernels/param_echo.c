/* param_echo.c - a test kernel that reads two parameters and notes what it got, to test
 * the harness's parameter parsing: i through k_param_int (default -1), x through
 * k_param_num (default -1.5).  It ignores whether they parsed: the harness must not.
 */
#include "cpulab.h"

const char k_unit[] = "iterations";

void *k_setup(void)
{
    static int ctx;
    k_note("i", (double)k_param_int("i", -1));
    k_note("x", k_param_num("x", -1.5));
    return &ctx;
}

int k_verify(void *ctx)
{
    (void)ctx;
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    (void)ctx;
    return reps;
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)reps;
}
