/* walk N: N dependent loads around one random cycle through every 64-byte line of 256 KiB
 * (in the L2 on every host met, within the first-level TLB's reach), then exit: a
 * latency-bound program whose work scales with N exactly, so `walk 1.01N` does 1% more
 * than `walk N` (bench/time_power.py --program walk). */
#include <stdint.h>
#include <stdlib.h>

#define LINES (256 * 1024 / 64)

struct line { struct line *next; char pad[64 - sizeof(struct line *)]; };

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 0, r = 88172645463325252ull;
    static struct line lines[LINES];
    static unsigned order[LINES];
    for (unsigned i = 0; i < LINES; i++)
        order[i] = i;
    for (unsigned i = LINES - 1; i > 0; i--) { /* Fisher-Yates, xorshift64: the same cycle every run */
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        unsigned j = (unsigned)(r % (i + 1)), t = order[i];
        order[i] = order[j]; order[j] = t;
    }
    for (unsigned i = 0; i < LINES; i++)
        lines[order[i]].next = &lines[order[(i + 1) % LINES]];
    struct line *p = &lines[order[0]];
    for (uint64_t i = 0; i < n; i++)
        p = p->next;
    return p == NULL; /* uses p, so the loop stays */
}
