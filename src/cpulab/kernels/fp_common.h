/* fp_common.h - what the floating-point kernels (dot.c, euclid.c, fft.c, fft_fftw.c)
 * share: the two parameters, deterministic inputs, and a compiler barrier.
 *
 * Parameters: n (vector length / FFT size; default 1024) and precision ("float" or
 * "double"; default "double").  Unit: flop, counted by the usual conventions
 * (dot 2N, euclid 3N, complex radix-2 FFT 5 N log2 N).
 */
#ifndef FP_COMMON_H
#define FP_COMMON_H

#include "cpulab.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum fp_prec { FP_FLOAT, FP_DOUBLE };

/* Largest n accepted: 2^26 elements (512 MiB of double complex data at most). */
#define FP_MAX_N ((int64_t)1 << 26)

/* Read n and precision; 0 on success, else k_fail() has said why.
 * pow2: n must be a power of two >= 2 (the FFTs). */
static inline int fp_params(size_t *n, enum fp_prec *prec, int pow2)
{
    int64_t v = k_param_int("n", 1024);
    const char *p = k_param_str("precision", "double");
    if (v < 1 || v > FP_MAX_N) {
        k_fail("n must be between 1 and %lld, got %lld", (long long)FP_MAX_N, (long long)v);
        return -1;
    }
    if (pow2 && (v < 2 || (v & (v - 1)) != 0)) {
        k_fail("n must be a power of two >= 2 for a radix-2 FFT, got %lld", (long long)v);
        return -1;
    }
    if (strcmp(p, "float") == 0)
        *prec = FP_FLOAT;
    else if (strcmp(p, "double") == 0)
        *prec = FP_DOUBLE;
    else {
        k_fail("precision must be 'float' or 'double', got '%s'", p);
        return -1;
    }
    *n = (size_t)v;
    return 0;
}

static inline unsigned fp_log2(size_t n)
{
    unsigned l = 0;
    while (((size_t)1 << l) < n)
        l++;
    return l;
}

/* Deterministic inputs in [-1, 1): a 64-bit LCG, top 24 bits.  Every value is a
 * multiple of 2^-23 below 1 in magnitude, so it is exact in float and double alike:
 * both precisions see the same numbers.  Centred in integers and scaled by a multiply
 * (both exact: the same numbers as subtracting and dividing in floating point), as a
 * division is slow where set-up pays for it per process: x87's fdiv, and armel's
 * soft-float division under qemu. */
static inline double fp_lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)((int32_t)(*s >> 40) - 8388608) * (1.0 / 8388608.0);
}

/* Tells the compiler that any memory may have changed (and been read): a loop over
 * reps must recompute a pure function of unchanged inputs each time instead of
 * hoisting it.  It emits no instruction; its only cost is that values cannot be kept
 * in registers across it (a few reloads of pointers per repetition). */
#define FP_BARRIER() __asm__ __volatile__("" ::: "memory")

/* The bits of a result, to fold into a checksum. */
static inline uint64_t fp_bits_d(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline uint64_t fp_bits_f(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* 64-byte aligned (cache lines and any vector width), zeroed, at a random cache line of
 * its page (k_alloc); freed with fp_free. */
static inline void *fp_alloc(size_t bytes)
{
    void *p = k_alloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

static inline void fp_free(void *p)
{
    k_free(p);
}

#endif
