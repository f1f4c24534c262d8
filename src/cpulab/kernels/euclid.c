/* euclid.c - Euclidean distance between two vectors, float or double:
 * d = sqrt(sum (a[i] - b[i])^2).
 *
 * Parameters: n (vector length, default 1024; any n >= 1), precision (float |
 * double, default double).  Unit: flop, 3 per element (subtract, multiply, add),
 * 3N per distance; the one square root at the end is not counted.
 *
 * Plain C loop, as in dot.c: the sum is one serial chain the compiler may not reorder
 * without -ffast-math, so the reduction does not vectorise (the subtractions and
 * squares could, the adds stay in order); with -march=native GCC contracts the square
 * and the add into an FMA.  Neither fast-math nor extra accumulators are written
 * here: the variants decide.
 *
 * Verified before timing (k_verify): exact known answers whose sums of squares are
 * perfect squares (1; 3,4 -> 5; 2,3,6 -> 7; 1..24 -> 70, the cannonball problem:
 * 1^2 + ... + 24^2 = 70^2), and agreement with a long-double reference on the
 * pseudo-random inputs at the run's n and at small n.  Bound: each term
 * fl(fl(a-b)^2) is within 2u of (a-b)^2, the sum of n positive terms within
 * gamma(n-1) (Higham, Accuracy and Stability of Numerical Algorithms, sec. 3.1), the
 * square root halves the relative error and adds u: |d^ - d| <= gamma(n+3) d.
 */
#include "fp_common.h"

const char k_unit[] = "flop";

struct ctx {
    size_t n;
    enum fp_prec prec;
    void *a, *b; /* float[n] or double[n] each */
};

/* The measured loops: 3 flop per element, one load of each input.  -DCPULAB_BREAK_KAT
 * starts the sum of squares at 2^-20 instead of 0 (cpulab.h). */
__attribute__((noinline)) static float euclid_f32(const float *restrict a, const float *restrict b, size_t n)
{
    float s = K_BROKEN * 0x1p-20f;
    for (size_t i = 0; i < n; i++) {
        float d = a[i] - b[i]; /* independent per element: vectorisable            */
        s += d * d;            /* mul + add (or FMA) on the serial chain of the sum  */
    }
    return sqrtf(s); /* once per call, not counted */
}

__attribute__((noinline)) static double euclid_f64(const double *restrict a, const double *restrict b, size_t n)
{
    double s = K_BROKEN * 0x1p-20;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - b[i];
        s += d * d;
    }
    return sqrt(s);
}

static long double elem(const struct ctx *c, const void *v, size_t i)
{
    return c->prec == FP_FLOAT ? (long double)((const float *)v)[i] : (long double)((const double *)v)[i];
}

static void set(const struct ctx *c, void *v, size_t i, double x)
{
    if (c->prec == FP_FLOAT)
        ((float *)v)[i] = (float)x;
    else
        ((double *)v)[i] = x;
}

/* The reference in long double over the first m elements. */
static long double euclid_ref(const struct ctx *c, size_t m)
{
    long double s = 0;
    for (size_t i = 0; i < m; i++) {
        long double d = elem(c, c->a, i) - elem(c, c->b, i);
        s += d * d;
    }
    return sqrtl(s);
}

static double euclid_kernel(const struct ctx *c, size_t n)
{
    return c->prec == FP_FLOAT ? (double)euclid_f32(c->a, c->b, n) : euclid_f64(c->a, c->b, n);
}

static void fill_random(struct ctx *c)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < c->n; i++) {
        set(c, c->a, i, fp_lcg(&s));
        set(c, c->b, i, fp_lcg(&s));
    }
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c || fp_params(&c->n, &c->prec, 0) != 0)
        return NULL;
    size_t elem_size = c->prec == FP_FLOAT ? sizeof(float) : sizeof(double);
    c->a = fp_alloc(c->n * elem_size);
    c->b = fp_alloc(c->n * elem_size);
    if (!c->a || !c->b) {
        k_fail("cannot allocate 2 x %zu bytes", c->n * elem_size);
        return NULL;
    }
    fill_random(c);
    k_note("n", (double)c->n);
    k_note("working_set_bytes", (double)(2 * c->n * elem_size));
    return c;
}

/* Differences whose squares sum to a perfect square; the distance is exact. */
static int check_exact(struct ctx *c)
{
    static const struct { size_t m; double d[24]; double want; } cases[] = {
        {1, {1}, 1},
        {2, {3, -4}, 5},
        {3, {-2, 3, 6}, 7},
        {24, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}, 70},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t m = cases[k].m;
        if (m > c->n)
            break;
        for (size_t i = 0; i < m; i++) { /* a - b = d exactly, with both signs about */
            set(c, c->a, i, 0.5 + (i % 2 ? 2 : -1) * cases[k].d[i]);
            set(c, c->b, i, 0.5 + (i % 2 ? 1 : -2) * cases[k].d[i]);
        }
        double got = euclid_kernel(c, m);
        long double ref = euclid_ref(c, m);
        if (got != cases[k].want || ref != cases[k].want) {
            k_fail("euclid of a %zu-element known answer: kernel %.17g, reference %.17Lg, exact %.17g",
                   m, got, ref, cases[k].want);
            return 1;
        }
    }
    return 0;
}

static int check_prefix(struct ctx *c, size_t m)
{
    long double ref = euclid_ref(c, m);
    double u = c->prec == FP_FLOAT ? FLT_EPSILON / 2 : DBL_EPSILON / 2; /* unit roundoff */
    long double k = (long double)m + 3;
    long double tol = (k * u / (1 - k * u) + k * LDBL_EPSILON) * ref; /* + the reference's own */
    double got = euclid_kernel(c, m);
    if (!(fabsl((long double)got - ref) <= tol)) {
        k_fail("euclid(n=%zu, %s) = %.17g, reference %.17Lg, tolerance %.3Lg", m,
               c->prec == FP_FLOAT ? "float" : "double", got, ref, tol);
        return 1;
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
    k_note("result", euclid_kernel(c, c->n)); /* the distance of the timed inputs, for tests */
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        FP_BARRIER(); /* inputs "may have changed": the distance is computed again every rep */
        h = k_mix(h, c->prec == FP_FLOAT ? fp_bits_f(euclid_f32(c->a, c->b, c->n))
                                         : fp_bits_d(euclid_f64(c->a, c->b, c->n)));
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return 3.0 * (double)c->n * (double)reps;
}
