/* scan.c - two implementations of first_zero; the plan builds each as a variant.
 *
 * bytes: one byte at a time.
 * words (-DSCAN_WORDS): eight bytes at a time, with the test for a zero byte in a word
 *   (x - 0x01..01) & ~x & 0x80..80, which is nonzero exactly when some byte of x is zero;
 *   the bytes of the word that has one are then looked at one by one.
 */
#include "scan.h"

#include <stdint.h>
#include <string.h>

#ifdef SCAN_WORDS
size_t first_zero(const unsigned char *p, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8); /* an unaligned load, where the buffer allows none */
        if ((x - ones) & ~x & highs)
            break;
    }
    for (; i < n; i++)
        if (p[i] == 0)
            return i;
    return n;
}
#else
size_t first_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] == 0)
            return i;
    return n;
}
#endif
