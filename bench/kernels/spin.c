/* spin N: N iterations of a dependent multiply-add chain, then exit; the work scales with
 * N exactly, so `spin 1.03N` does 3% more than `spin N` (bench/time_power.py). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 0, x = 1;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ull + i;
    if (argc > 2)
        printf("%llu\n", (unsigned long long)x);
    return x == 42; /* uses x, so the loop stays */
}
