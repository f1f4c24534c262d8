/* fft_fftw.c - the peer: the same complex FFT through FFTW 3 (fftw_plan_dft_1d,
 * in place, interleaved fftw_complex: FFTW's usual interface and its fastest SIMD
 * codelets), float (libfftw3f) or double (libfftw3).
 *
 * Parameters: n (FFT size, a power of two >= 2, default 1024), precision (float |
 * double, default double), as fft.c.  Unit: flop, 5 n log2 n per transform (the
 * convention, whatever FFTW really executes).  Needs libfftw3-dev; link with
 * -lfftw3 -lfftw3f.
 *
 * Planning: FFTW_MEASURE, with fftw_set_timelimit(0.5 s) so setup stays near half a
 * second even at 2^20 points (past the limit FFTW keeps the best plan found so far,
 * so at large n the plan may differ from run to run).  No wisdom is loaded or saved.
 *
 * Verified exactly as fft.c (fp_fft_body.h): direct long-double DFT at 2..256 and at n,
 * pure tone, Parseval, inverse; the check at n runs the timed plan itself.
 */
#include "fp_fft.h"

#include <fftw3.h>

const char k_unit[] = "flop";

#define PLAN_SECONDS 0.5
/* The sign of the exponent of every plan; -DCPULAB_BREAK_KAT (cpulab.h) flips it, making
 * each plan the unnormalised inverse transform, which the checks must refuse. */
#define DFT_SIGN (K_BROKEN ? FFTW_BACKWARD : FFTW_FORWARD)

struct ctx {
    size_t n;
    enum fp_prec prec;
    unsigned parity;  /* transforms done since the last rescale, mod 2 */
    fftw_plan pd;     /* one of these two, by precision */
    fftwf_plan pf;
    void *x;          /* fftw_complex[n] or fftwf_complex[n], fftw_malloc'd (SIMD aligned) */
};

/* Run a forward transform of split (re, im) through FFTW: the timed plan and array at
 * the run's n, a throw-away FFTW_ESTIMATE plan at other sizes.  Copies in and out;
 * only the checks use this. */
static int xform_f64(void *arg, size_t n, double *re, double *im)
{
    struct ctx *c = arg;
    fftw_complex *x = n == c->n ? c->x : fftw_malloc(n * sizeof *x);
    fftw_plan p = n == c->n ? c->pd : x ? fftw_plan_dft_1d((int)n, x, x, DFT_SIGN, FFTW_ESTIMATE) : NULL;
    if (!p) {
        fftw_free(x);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        x[i][0] = re[i];
        x[i][1] = im[i];
    }
    fftw_execute(p);
    for (size_t i = 0; i < n; i++) {
        re[i] = x[i][0];
        im[i] = x[i][1];
    }
    if (n != c->n) {
        fftw_destroy_plan(p);
        fftw_free(x);
    }
    return 0;
}

static int xform_f32(void *arg, size_t n, float *re, float *im)
{
    struct ctx *c = arg;
    fftwf_complex *x = n == c->n ? c->x : fftwf_malloc(n * sizeof *x);
    fftwf_plan p = n == c->n ? c->pf : x ? fftwf_plan_dft_1d((int)n, x, x, DFT_SIGN, FFTW_ESTIMATE) : NULL;
    if (!p) {
        fftwf_free(x);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        x[i][0] = re[i];
        x[i][1] = im[i];
    }
    fftwf_execute(p);
    for (size_t i = 0; i < n; i++) {
        re[i] = x[i][0];
        im[i] = x[i][1];
    }
    if (n != c->n) {
        fftwf_destroy_plan(p);
        fftwf_free(x);
    }
    return 0;
}

/* The timed input: the same pseudo-random values fft.c transforms. */
static void fill_input(struct ctx *c)
{
    size_t n = c->n;
    if (c->prec == FP_FLOAT) {
        float *re = fp_alloc(n * sizeof *re), *im = fp_alloc(n * sizeof *im);
        fftwf_complex *x = c->x;
        if (re && im) {
            fft_fill_f32(re, im, n, 0x5EED);
            for (size_t i = 0; i < n; i++) {
                x[i][0] = re[i];
                x[i][1] = im[i];
            }
        }
        fp_free(re);
        fp_free(im);
    } else {
        double *re = fp_alloc(n * sizeof *re), *im = fp_alloc(n * sizeof *im);
        fftw_complex *x = c->x;
        if (re && im) {
            fft_fill_f64(re, im, n, 0x5EED);
            for (size_t i = 0; i < n; i++) {
                x[i][0] = re[i];
                x[i][1] = im[i];
            }
        }
        fp_free(re);
        fp_free(im);
    }
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c || fp_params(&c->n, &c->prec, 1) != 0)
        return NULL;
    if (c->n > (size_t)INT32_MAX) {
        k_fail("n = %zu is too large for fftw_plan_dft_1d", c->n);
        return NULL;
    }
    size_t bytes = c->n * (c->prec == FP_FLOAT ? sizeof(fftwf_complex) : sizeof(fftw_complex));
    c->x = c->prec == FP_FLOAT ? fftwf_malloc(bytes) : fftw_malloc(bytes);
    if (!c->x) {
        k_fail("cannot allocate %zu bytes", bytes);
        return NULL;
    }
    /* FFTW_MEASURE overwrites the array while planning: plan first, then fill. */
    if (c->prec == FP_FLOAT) {
        fftwf_set_timelimit(PLAN_SECONDS);
        c->pf = fftwf_plan_dft_1d((int)c->n, c->x, c->x, DFT_SIGN, FFTW_MEASURE);
    } else {
        fftw_set_timelimit(PLAN_SECONDS);
        c->pd = fftw_plan_dft_1d((int)c->n, c->x, c->x, DFT_SIGN, FFTW_MEASURE);
    }
    if (!c->pf && !c->pd) {
        k_fail("FFTW could not plan a size-%zu %s transform", c->n, c->prec == FP_FLOAT ? "float" : "double");
        return NULL;
    }
    fill_input(c);
    k_note("n", (double)c->n);
    /* The data; FFTW's twiddle tables (about another n complex values) are its own. */
    k_note("working_set_bytes", (double)(2 * bytes));
    return c;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    int bad = c->prec == FP_FLOAT ? fft_verify_f32(xform_f32, c, c->n, "float (FFTW)")
                                  : fft_verify_f64(xform_f64, c, c->n, "double (FFTW)");
    fill_input(c); /* the checks at n used the timed array: the timed input again */
    if (!bad) { /* bin 1 of the timed input's transform, for tests */
        if (c->prec == FP_FLOAT) {
            fftwf_execute(c->pf);
            k_note("bin1_re", ((fftwf_complex *)c->x)[1][0]);
            k_note("bin1_im", ((fftwf_complex *)c->x)[1][1]);
        } else {
            fftw_execute(c->pd);
            k_note("bin1_re", ((fftw_complex *)c->x)[1][0]);
            k_note("bin1_im", ((fftw_complex *)c->x)[1][1]);
        }
        fill_input(c);
    }
    return bad;
}

/* As fft.c: each rep transforms in place, every second one is followed by an exact
 * 1/n rescale (FFT(FFT(x)) = n x(-j)), 2n multiplies not counted (the same cost as
 * fft.c's, in a loop the compiler vectorises alike); one value per rep
 * goes into the checksum. */
uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        size_t probe = (size_t)r & (c->n - 1);
        if (c->prec == FP_FLOAT) {
            float *x = c->x; /* re, im interleaved */
            fftwf_execute(c->pf);
            if (c->parity)
                for (size_t i = 0; i < 2 * c->n; i++)
                    x[i] *= 1.0f / (float)c->n;
            h = k_mix(h, fp_bits_f(x[2 * probe]));
        } else {
            double *x = c->x;
            fftw_execute(c->pd);
            if (c->parity)
                for (size_t i = 0; i < 2 * c->n; i++)
                    x[i] *= 1.0 / (double)c->n;
            h = k_mix(h, fp_bits_d(x[2 * probe]));
        }
        c->parity ^= 1;
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return 5.0 * (double)c->n * (double)fp_log2(c->n) * (double)reps;
}
