/* fp_fft.h - the radix-2 FFT (fft.c) and the FFT known-answer checks (fft.c and
 * fft_fftw.c), in float (suffix _f32) and double (suffix _f64): fp_fft_body.h is
 * written once and included twice.
 *
 * The checks compare against a direct DFT computed in long double.  Its roots of
 * unity w^t = exp(-2 pi i t / m) come from two tables of about sqrt(m) entries each
 * (w^t = w^(hi*L) * w^lo), so a bin costs 2 complex long-double multiplies per input
 * point, and a few bins of a 2^20-point transform can be checked in milliseconds.
 */
#ifndef FP_FFT_H
#define FP_FFT_H

#include "fp_common.h"

/* The transform's functions: fft_fftw.c uses only the checks, hence "unused". */
#define FP_FFT_API static __attribute__((unused))

#define FP_PI_L 3.141592653589793238462643383279502884L

struct fp_roots {
    size_t m, lo_bits;
    long double *hr, *hi, *lr, *li; /* w^(i*L) for i < m/L; w^i for i < L; L = 2^lo_bits */
};

static void fp_roots_free(struct fp_roots *w)
{
    free(w->hr);
    free(w->hi);
    free(w->lr);
    free(w->li);
    memset(w, 0, sizeof *w);
}

/* m a power of two; 0 on success. */
static int fp_roots_init(struct fp_roots *w, size_t m)
{
    memset(w, 0, sizeof *w);
    w->m = m;
    w->lo_bits = (fp_log2(m) + 1) / 2;
    size_t L = (size_t)1 << w->lo_bits, H = m / L;
    w->hr = malloc(H * sizeof(long double));
    w->hi = malloc(H * sizeof(long double));
    w->lr = malloc(L * sizeof(long double));
    w->li = malloc(L * sizeof(long double));
    if (!w->hr || !w->hi || !w->lr || !w->li) {
        fp_roots_free(w);
        return -1;
    }
    for (size_t i = 0; i < H; i++) {
        long double a = -2 * FP_PI_L * (long double)(i * L) / (long double)m;
        w->hr[i] = cosl(a);
        w->hi[i] = sinl(a);
    }
    for (size_t i = 0; i < L; i++) {
        long double a = -2 * FP_PI_L * (long double)i / (long double)m;
        w->lr[i] = cosl(a);
        w->li[i] = sinl(a);
    }
    return 0;
}

/* w^t (t < m) in long double: the product of its two tabled factors. */
static inline void fp_root(const struct fp_roots *w, size_t t, long double *cr, long double *ci)
{
    const size_t mask = ((size_t)1 << w->lo_bits) - 1;
    long double ar = w->hr[t >> w->lo_bits], ai = w->hi[t >> w->lo_bits];
    long double br = w->lr[t & mask], bi = w->li[t & mask];
    *cr = ar * br - ai * bi;
    *ci = ar * bi + ai * br;
}

/* X_k = sum_j x_j w^(jk) in long double, for x in float (elem == 4) or double arrays. */
static void fp_dft_bin(const struct fp_roots *w, size_t k, const void *xr, const void *xi, size_t elem,
                       long double *Xr, long double *Xi)
{
    const size_t m = w->m;
    long double sr = 0, si = 0;
    for (size_t j = 0; j < m; j++) {
        long double cr, ci;
        fp_root(w, (j * k) & (m - 1), &cr, &ci); /* (j k) mod m; wraps harmlessly in size_t */
        long double vr = elem == sizeof(float) ? (long double)((const float *)xr)[j] : (long double)((const double *)xr)[j];
        long double vi = elem == sizeof(float) ? (long double)((const float *)xi)[j] : (long double)((const double *)xi)[j];
        sr += vr * cr - vi * ci;
        si += vr * ci + vi * cr;
    }
    *Xr = sr;
    *Xi = si;
}

#define FT float
#define FT_EPS FLT_EPSILON
#define FN(name) name##_f32
#include "fp_fft_body.h"
#undef FT
#undef FT_EPS
#undef FN

#define FT double
#define FT_EPS DBL_EPSILON
#define FN(name) name##_f64
#include "fp_fft_body.h"
#undef FT
#undef FT_EPS
#undef FN

#endif
