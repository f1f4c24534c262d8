/* A whole program with one hot loop and one cold function, for explain --program:
 * it spins in hot() for about 0.3 s of CPU time (or the seconds its argument gives) and
 * calls cold() once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static uint64_t hot(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + i;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) static uint64_t cold(uint64_t x)
{
    for (int i = 0; i < 50; i++)
        x ^= x >> 7 ^ (uint64_t)i;
    return x;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.3;
    uint64_t x = 1;
    while ((double)clock() / CLOCKS_PER_SEC < seconds)
        x = hot(x, 1000000);
    printf("%llx\n", (unsigned long long)cold(x));
    return 0;
}
