/* dot.c - dot product of two vectors, float or double: s = sum a[i] * b[i].
 *
 * Parameters: n (vector length, default 1024; any n >= 1), precision (float |
 * double, default double).  Unit: flop, 2 per element (multiply + add), 2N per dot.
 *
 * The loop is plain C on purpose: how it compiles is what the variants compare.  The
 * sum is one serial chain in source order; without -ffast-math (or
 * -fassociative-math) the compiler may not reorder it, so it cannot vectorise the
 * reduction, and each element costs one add latency (3-4 cycles) however wide the
 * vector units are.  With -march=native on an FMA machine GCC contracts the multiply
 * and the add into one FMA (-ffp-contract=fast is GCC's default), whose latency is
 * then the chain.  Neither fast-math nor several accumulators belong here: a variant
 * that wants them says so in its flags.
 *
 * Verified before timing (k_verify): exact integer known answers (sum of i*(n-i) in
 * closed form, exact in either precision for the lengths used) and agreement with a
 * long-double reference on the pseudo-random inputs at the run's n and at small n,
 * within the classical bound for recursive summation (Higham, Accuracy and Stability
 * of Numerical Algorithms, 2nd ed., sec. 3.1): |s^ - s| <= gamma(n) sum |a_i b_i|,
 * gamma(n) = n eps / (1 - n eps).  That bound holds for any summation order, so a
 * fast-math variant passes as well.
 */
#include "fp_common.h"

const char k_unit[] = "flop";

struct ctx {
    size_t n;
    enum fp_prec prec;
    void *a, *b; /* float[n] or double[n] each */
};

/* The measured loops: 2 flop per element, one load of each input.  -DCPULAB_BREAK_KAT
 * starts the sum at 2^-20 instead of 0 (cpulab.h). */
__attribute__((noinline)) static float dot_f32(const float *restrict a, const float *restrict b, size_t n)
{
    float s = K_BROKEN * 0x1p-20f;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i]; /* mul + add (or one FMA); the add waits for the previous one */
    return s;
}

__attribute__((noinline)) static double dot_f64(const double *restrict a, const double *restrict b, size_t n)
{
    double s = K_BROKEN * 0x1p-20;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The reference: long double (64-bit significand on x86).  Returns the sum and, in
 * *abs, sum |a_i b_i| (which sizes the error bound). */
static long double dot_ref(const struct ctx *c, size_t n, long double *abs)
{
    long double s = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        long double p = c->prec == FP_FLOAT ? (long double)((float *)c->a)[i] * ((float *)c->b)[i]
                                            : (long double)((double *)c->a)[i] * ((double *)c->b)[i];
        s += p;
        m += fabsl(p);
    }
    *abs = m;
    return s;
}

static double dot_kernel(const struct ctx *c, size_t n)
{
    return c->prec == FP_FLOAT ? (double)dot_f32(c->a, c->b, n) : dot_f64(c->a, c->b, n);
}

static void fill_random(struct ctx *c)
{
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < c->n; i++) {
        double x = fp_lcg(&s), y = fp_lcg(&s);
        if (c->prec == FP_FLOAT) {
            ((float *)c->a)[i] = (float)x;
            ((float *)c->b)[i] = (float)y;
        } else {
            ((double *)c->a)[i] = x;
            ((double *)c->b)[i] = y;
        }
    }
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c || fp_params(&c->n, &c->prec, 0) != 0)
        return NULL;
    size_t elem = c->prec == FP_FLOAT ? sizeof(float) : sizeof(double);
    c->a = fp_alloc(c->n * elem);
    c->b = fp_alloc(c->n * elem);
    if (!c->a || !c->b) {
        k_fail("cannot allocate 2 x %zu bytes", c->n * elem);
        return NULL;
    }
    fill_random(c);
    k_note("n", (double)c->n);
    k_note("working_set_bytes", (double)(2 * c->n * elem));
    return c;
}

/* The kernel against the reference over the first m elements; 0 when within bound. */
static int check_prefix(struct ctx *c, size_t m)
{
    long double abs, ref = dot_ref(c, m, &abs);
    double eps = c->prec == FP_FLOAT ? FLT_EPSILON / 2 : DBL_EPSILON / 2; /* unit roundoff */
    /* gamma(m) for the kernel, plus the reference's own gamma(m) in long double. */
    long double tol = ((long double)m * eps / (1 - (long double)m * eps) + (long double)m * LDBL_EPSILON) * abs;
    double got = dot_kernel(c, m);
    if (!(fabsl((long double)got - ref) <= tol)) {
        k_fail("dot(n=%zu, %s) = %.17g, reference %.17Lg, tolerance %.3Lg", m,
               c->prec == FP_FLOAT ? "float" : "double", got, ref, tol);
        return 1;
    }
    return 0;
}

/* Exact known answers: a[i] = i, b[i] = m - i, sum_{i<m} i (m - i) = (m^3 - m) / 6.
 * Every product and partial sum is an integer below 2^24 for m <= 64, so float and
 * double must both get it exactly, in any order and with or without FMA. */
static int check_exact(struct ctx *c)
{
    static const size_t lens[] = {1, 2, 3, 7, 16, 33, 64};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t m = lens[k];
        if (m > c->n)
            break;
        for (size_t i = 0; i < m; i++) {
            if (c->prec == FP_FLOAT) {
                ((float *)c->a)[i] = (float)i;
                ((float *)c->b)[i] = (float)(m - i);
            } else {
                ((double *)c->a)[i] = (double)i;
                ((double *)c->b)[i] = (double)(m - i);
            }
        }
        double want = (double)(m * m * m - m) / 6, got = dot_kernel(c, m);
        long double abs, ref = dot_ref(c, m, &abs);
        if (got != want || ref != want) {
            k_fail("dot of i and %zu-i over %zu elements: kernel %.17g, reference %.17Lg, exact %.17g",
                   m, m, got, ref, want);
            return 1;
        }
    }
    return 0;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    if (check_exact(c))
        return 1;
    fill_random(c); /* the timed inputs again */
    static const size_t small[] = {1, 2, 3, 5, 8, 17, 100, 1000};
    for (size_t k = 0; k < sizeof small / sizeof small[0] && small[k] <= c->n; k++)
        if (check_prefix(c, small[k]))
            return 1;
    if (check_prefix(c, c->n))
        return 1;
    k_note("result", dot_kernel(c, c->n)); /* the dot of the timed inputs, for tests */
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        FP_BARRIER(); /* inputs "may have changed": the dot is done again every rep */
        h = k_mix(h, c->prec == FP_FLOAT ? fp_bits_f(dot_f32(c->a, c->b, c->n))
                                         : fp_bits_d(dot_f64(c->a, c->b, c->n)));
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return 2.0 * (double)c->n * (double)reps;
}
