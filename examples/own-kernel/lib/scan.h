/* scan.h - the code being tuned: where the first zero byte of a buffer is. */
#ifndef SCAN_H
#define SCAN_H
#include <stddef.h>

/* The index of the first zero byte of p[0..n), or n if there is none. */
size_t first_zero(const unsigned char *p, size_t n);

#endif
