/* bandwidth.c - sustainable bandwidth of the four STREAM operations, plain C loops.
 *
 * Parameters:
 *   op    read | write | copy | triad (default read)
 *   size  working set in bytes, all arrays together (default 65536); each array gets
 *         size / (arrays * 8) doubles, rounded down to a multiple of 8 elements
 *
 * Unit: bytes, counted as STREAM counts them (McCalpin): only the bytes the program
 * asks for, per double element,
 *   read   s += a[i]              8 bytes  (1 array)
 *   write  a[i] = s               8 bytes  (1 array)
 *   copy   c[i] = a[i]           16 bytes  (2 arrays)
 *   triad  a[i] = b[i] + q*c[i]  24 bytes  (3 arrays)
 * The write-allocate traffic of a store that misses the cache (the line is read before
 * it is written) is not counted, so write/copy/triad beyond the last cache level show
 * less than the bus carries.  The loops are plain C for the compiler of the variant to
 * vectorise (or not): that is what a variant comparison measures.  gcc may turn the
 * copy loop into a call to the C library's memcpy (-ftree-loop-distribute-patterns);
 * then "copy" measures that memcpy.
 *
 * Known-answer test: each operation on small arrays of small integers held in doubles
 * (so every sum and product is exact) against its closed form, then one pass on the
 * real arrays against the closed form of their initial contents.
 */
#include "cpulab.h"

#include <stdlib.h>
#include <string.h>

const char k_unit[] = "bytes";

enum op { OP_READ, OP_WRITE, OP_COPY, OP_TRIAD };
static const char *const op_name[] = {"read", "write", "copy", "triad"};
static const int op_arrays[] = {1, 1, 2, 3};

#define TRIAD_Q 3.0 /* STREAM's scalar */

struct ctx {
    enum op op;
    size_t n; /* elements per array, a multiple of 8 */
    double *a, *b, *c;
};

/* Elements one pass covers: n rounded down to a multiple of 8 (the read loop's step).
 * -DCPULAB_BREAK_KAT (cpulab.h) drops the last 8: an off-by-one-block bug in every
 * operation, which the known answers must catch. */
#define PASS_LENGTH(n) (((n) & ~(size_t)7) - 8 * (size_t)K_BROKEN)

/* Keeps the compiler from hoisting a repetition out of the loop or deleting stores
 * nobody reads: it must assume the asm reads and writes all memory. */
static inline void barrier(void *p) { __asm__ __volatile__("" : : "r"(p) : "memory"); }

/* Independent partial sums: without -ffast-math the compiler may not reorder one FP sum,
 * so this gives it 32 chains to put in vector lanes (named variables, not an array: at
 * -O2 gcc keeps an array of sums in memory).  A chain's add waits 3-4 cycles for the last
 * one; to keep two loads a cycle going the sums must cover that latency times the loads
 * in flight: 32 doubles are 4 AVX-512 or 8 AVX2 accumulators (8 sums held the AVX-512
 * build to about 21 bytes a cycle in every cache level).  The last n % 32 elements (n
 * is a multiple of 8) go to the first eight sums. */
#define SUM8(k) s##k##0 += a[i + 8 * k + 0]; s##k##1 += a[i + 8 * k + 1]; s##k##2 += a[i + 8 * k + 2]; \
    s##k##3 += a[i + 8 * k + 3]; s##k##4 += a[i + 8 * k + 4]; s##k##5 += a[i + 8 * k + 5];          \
    s##k##6 += a[i + 8 * k + 6]; s##k##7 += a[i + 8 * k + 7]
#define ZERO8(k) double s##k##0 = 0, s##k##1 = 0, s##k##2 = 0, s##k##3 = 0, s##k##4 = 0, s##k##5 = 0, \
    s##k##6 = 0, s##k##7 = 0
#define TOTAL8(k) (((s##k##0 + s##k##1) + (s##k##2 + s##k##3)) + ((s##k##4 + s##k##5) + (s##k##6 + s##k##7)))
static double op_read(const double *restrict a, size_t n)
{
    ZERO8(0);
    ZERO8(1);
    ZERO8(2);
    ZERO8(3);
    n = PASS_LENGTH(n);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* 32 loads, 32 independent adds */
        SUM8(0);
        SUM8(1);
        SUM8(2);
        SUM8(3);
    }
    for (; i < n; i += 8) {
        SUM8(0);
    }
    return (TOTAL8(0) + TOTAL8(1)) + (TOTAL8(2) + TOTAL8(3));
}

static void op_write(double *restrict a, double v, size_t n)
{
    n = PASS_LENGTH(n);
    for (size_t i = 0; i < n; i++)
        a[i] = v; /* one store per element */
}

static void op_copy(double *restrict c, const double *restrict a, size_t n)
{
    n = PASS_LENGTH(n);
    for (size_t i = 0; i < n; i++)
        c[i] = a[i]; /* one load, one store */
}

static void op_triad(double *restrict a, const double *restrict b, const double *restrict c, double q,
                     size_t n)
{
    n = PASS_LENGTH(n);
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + q * c[i]; /* two loads, one multiply-add, one store */
}

static double *alloc(size_t n)
{
    return k_alloc((n ? n : 1) * sizeof(double));
}

/* Initial contents: small integers, exact in a double and in any sum of them. */
static void fill(double *x, size_t n, unsigned mul)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (double)((i * mul) & 1023);
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const char *op = k_param_str("op", "read");
    int64_t size = k_param_int("size", 65536);
    int found = 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(op, op_name[i]) == 0) {
            c->op = (enum op)i;
            found = 1;
        }
    if (!found) {
        k_fail("op must be read, write, copy or triad, got '%s'", op);
        return NULL;
    }
    int arrays = op_arrays[c->op];
    if (size < (int64_t)arrays * 64) {
        k_fail("size must be at least %d bytes for %s, got %lld", arrays * 64, op, (long long)size);
        return NULL;
    }
    c->n = ((size_t)size / ((size_t)arrays * sizeof(double))) & ~(size_t)7;
    c->a = alloc(c->n);
    c->b = arrays >= 2 ? alloc(c->n) : NULL;
    c->c = arrays >= 3 ? alloc(c->n) : NULL;
    if (!c->a || (arrays >= 2 && !c->b) || (arrays >= 3 && !c->c)) {
        k_fail("cannot allocate %d arrays of %zu doubles", arrays, c->n);
        return NULL;
    }
    /* Every array is written here, so its pages exist before anything is timed. */
    fill(c->a, c->n, 1);
    if (c->b)
        fill(c->b, c->n, 3);
    if (c->c)
        fill(c->c, c->n, 5);
    k_note("working_set_bytes", (double)c->n * arrays * sizeof(double));
    k_note("elements", (double)c->n);
    k_note("bytes_per_element", 8.0 * (c->op == OP_READ || c->op == OP_WRITE ? 1 : c->op == OP_COPY ? 2 : 3));
    return c;
}

/* Sum of (i * mul) & 1023 for i < n, counted the slow obvious way in integers. */
static uint64_t int_sum(size_t n, unsigned mul)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += (i * mul) & 1023;
    return s;
}

static int check_small(void)
{
    enum { N = 200 }; /* a multiple of 8; i * 7 below stays well inside 2^53 */
    static double a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = i;
        b[i] = 2 * i;
        c[i] = -1;
    }
    if (op_read(a, N) != (double)(N * (N - 1) / 2)) {
        k_fail("read: sum of 0..%d is not %d", N - 1, N * (N - 1) / 2);
        return 1;
    }
    op_copy(c, a, N);
    for (int i = 0; i < N; i++)
        if (c[i] != i) {
            k_fail("copy: element %d is %g, want %d", i, c[i], i);
            return 1;
        }
    op_triad(c, a, b, TRIAD_Q, N); /* i + 3 * 2i = 7i */
    for (int i = 0; i < N; i++)
        if (c[i] != 7 * i) {
            k_fail("triad: element %d is %g, want %d", i, c[i], 7 * i);
            return 1;
        }
    op_write(c, 42.0, N);
    for (int i = 0; i < N; i++)
        if (c[i] != 42.0) {
            k_fail("write: element %d is %g, want 42", i, c[i]);
            return 1;
        }
    return 0;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    if (check_small())
        return 1;
    /* One pass on the real arrays; restore their contents afterwards. */
    size_t n = c->n;
    switch (c->op) {
    case OP_READ:
        if (op_read(c->a, n) != (double)int_sum(n, 1)) {
            k_fail("read: sum of the %zu-element array is not %llu", n, (unsigned long long)int_sum(n, 1));
            return 1;
        }
        break;
    case OP_WRITE:
        op_write(c->a, 5.0, n);
        for (size_t i = 0; i < n; i++)
            if (c->a[i] != 5.0) {
                k_fail("write: element %zu is %g, want 5", i, c->a[i]);
                return 1;
            }
        break;
    case OP_COPY:
        op_copy(c->b, c->a, n);
        for (size_t i = 0; i < n; i++)
            if (c->b[i] != (double)(i & 1023)) {
                k_fail("copy: element %zu is %g, want %zu", i, c->b[i], i & 1023);
                return 1;
            }
        break;
    case OP_TRIAD:
        op_triad(c->a, c->b, c->c, TRIAD_Q, n);
        for (size_t i = 0; i < n; i++)
            if (c->a[i] != (double)(((i * 3) & 1023) + 3 * ((i * 5) & 1023))) {
                k_fail("triad: element %zu is %g", i, c->a[i]);
                return 1;
            }
        fill(c->a, n, 1);
        break;
    }
    return 0;
}

/* The measured loop: one pass of the operation over the arrays per repetition. */
uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        double x;
        switch (c->op) {
        case OP_READ:
            x = op_read(c->a, c->n);
            break;
        case OP_WRITE:
            op_write(c->a, (double)(r & 1023), c->n);
            x = c->a[r % c->n];
            break;
        case OP_COPY:
            op_copy(c->b, c->a, c->n);
            x = c->b[r % c->n];
            break;
        default:
            op_triad(c->a, c->b, c->c, TRIAD_Q, c->n);
            x = c->a[r % c->n];
            break;
        }
        barrier(c->a);
        h = k_mix(h, (uint64_t)x);
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)reps * (double)c->n * 8.0 * (c->op == OP_COPY ? 2 : c->op == OP_TRIAD ? 3 : 1);
}
