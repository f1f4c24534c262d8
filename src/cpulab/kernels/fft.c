/* fft.c - in-place iterative complex radix-2 FFT (Cooley-Tukey, decimation in time),
 * float or double; the transform itself is in fp_fft_body.h.
 *
 * Parameters: n (FFT size, a power of two >= 2, default 1024), precision (float |
 * double, default double).  Unit: flop, 5 n log2 n per transform (the usual
 * convention; the radix-2 butterflies do exactly that many).
 *
 * Layout: split complex (re[n], im[n]), twiddles per stage at unit stride, a
 * precomputed bit-reversal table; the butterfly loop is plain C for the compiler to
 * vectorise (or not: that is what the variants compare).
 *
 * Verified before timing (fp_fft_body.h): against a direct long-double DFT at sizes
 * 2..256 and at n (every bin up to 256, 16 bins beyond), a pure tone, Parseval's
 * identity and the inverse transform, all within Higham's bound for the radix-2 FFT
 * (8 u log2 n relative 2-norm error).
 */
#include "fp_fft.h"

const char k_unit[] = "flop";

struct ctx {
    size_t n;
    enum fp_prec prec;
    unsigned parity;           /* transforms done since the last rescale, mod 2       */
    struct fft_plan_f32 pf;    /* the plan of the chosen precision                     */
    struct fft_plan_f64 pd;
    void *re, *im;             /* float[n] or double[n] each: the transformed data     */
};

/* The transform under test for the checks: the timed plan at n, a fresh plan else. */
static int xform_f32(void *arg, size_t n, float *re, float *im)
{
    struct ctx *c = arg;
    if (n == c->n) {
        fft_run_f32(&c->pf, re, im);
        return 0;
    }
    struct fft_plan_f32 p;
    if (fft_plan_init_f32(&p, n))
        return -1;
    fft_run_f32(&p, re, im);
    fft_plan_free_f32(&p);
    return 0;
}

static int xform_f64(void *arg, size_t n, double *re, double *im)
{
    struct ctx *c = arg;
    if (n == c->n) {
        fft_run_f64(&c->pd, re, im);
        return 0;
    }
    struct fft_plan_f64 p;
    if (fft_plan_init_f64(&p, n))
        return -1;
    fft_run_f64(&p, re, im);
    fft_plan_free_f64(&p);
    return 0;
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c || fp_params(&c->n, &c->prec, 1) != 0)
        return NULL;
    size_t elem = c->prec == FP_FLOAT ? sizeof(float) : sizeof(double);
    c->re = fp_alloc(c->n * elem);
    c->im = fp_alloc(c->n * elem);
    int bad = !c->re || !c->im;
    if (!bad && c->prec == FP_FLOAT) {
        bad = fft_plan_init_f32(&c->pf, c->n);
        fft_fill_f32(c->re, c->im, c->n, 0x5EED);
    } else if (!bad) {
        bad = fft_plan_init_f64(&c->pd, c->n);
        fft_fill_f64(c->re, c->im, c->n, 0x5EED);
    }
    if (bad) {
        k_fail("cannot allocate the data and plan for n = %zu", c->n);
        return NULL;
    }
    k_note("n", (double)c->n);
    /* Touched per transform: data (2n values), twiddles (n - 1 pairs, ~2n values) and
     * the bit-reversal swap list (< n/2 pairs of uint32: < 4n bytes). */
    k_note("working_set_bytes", (double)(4 * c->n * elem + c->n * sizeof(uint32_t)));
    return c;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    int bad = c->prec == FP_FLOAT ? fft_verify_f32(xform_f32, c, c->n, "float")
                                  : fft_verify_f64(xform_f64, c, c->n, "double");
    if (!bad) { /* bin 1 of the timed input's transform, for tests (does not touch c->re/im) */
        size_t n = c->n, e = c->prec == FP_FLOAT ? sizeof(float) : sizeof(double);
        void *r = fp_alloc(n * e), *i = fp_alloc(n * e);
        if (r && i) {
            memcpy(r, c->re, n * e);
            memcpy(i, c->im, n * e);
            if (c->prec == FP_FLOAT)
                fft_run_f32(&c->pf, r, i);
            else
                fft_run_f64(&c->pd, r, i);
            k_note("bin1_re", c->prec == FP_FLOAT ? ((float *)r)[1] : ((double *)r)[1]);
            k_note("bin1_im", c->prec == FP_FLOAT ? ((float *)i)[1] : ((double *)i)[1]);
        }
        fp_free(r);
        fp_free(i);
    }
    return bad;
}

/* Each rep transforms the data in place: FFT(FFT(x)) = n x(-j), so after every second
 * transform the data are scaled by 1/n (a power of two, exact) and stay bounded for
 * ever, whatever reps the harness asks for (the parity lives in the context, so it
 * holds across k_run calls).  The rescale costs 2n real multiplies every other
 * transform, n per transform: 1/(5 log2 n) of the counted flop (2% at n = 1024, 5% at
 * n = 16), not counted.  One output value per rep goes into the checksum. */
uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        size_t probe = (size_t)r & (c->n - 1);
        if (c->prec == FP_FLOAT) {
            fft_run_f32(&c->pf, c->re, c->im);
            if (c->parity)
                fft_scale_f32(c->re, c->im, c->n, 1.0f / (float)c->n);
            h = k_mix(h, fp_bits_f(((float *)c->re)[probe]));
        } else {
            fft_run_f64(&c->pd, c->re, c->im);
            if (c->parity)
                fft_scale_f64(c->re, c->im, c->n, 1.0 / (double)c->n);
            h = k_mix(h, fp_bits_d(((double *)c->re)[probe]));
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
