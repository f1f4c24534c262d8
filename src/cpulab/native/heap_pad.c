/* heap_pad.c - a dynamic program's heap moved by a drawn amount, as part of the layout of
 * its round (compile/relink.py; kernels draw theirs in k_alloc).
 *
 * Loaded with LD_PRELOAD: before main, a block of CPULAB_HEAP_PAD bytes (a multiple of 16
 * below a page, drawn for the round) is taken from malloc and never freed, so that the
 * program's own allocations start that much further on: where its buffers sit against
 * each other within a page is drawn anew each round.  A static program ignores it.
 */
#include <stdlib.h>

static void *volatile pad_block; /* kept: an unused malloc could be optimised away */

__attribute__((constructor)) static void cpulab_heap_pad(void)
{
    const char *s = getenv("CPULAB_HEAP_PAD");
    size_t n = s ? strtoul(s, NULL, 10) : 0;
    if (n)
        pad_block = malloc(n);
}
