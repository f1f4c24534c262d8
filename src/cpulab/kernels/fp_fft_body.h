/* fp_fft_body.h - the radix-2 FFT and its known-answer checks, written once for a
 * floating type.  Included twice by fp_fft.h, with FT (the type), FT_EPS (its
 * machine epsilon) and FN(name) (name with a type suffix) defined; no include guard.
 *
 * Data layout: split complex, re[n] and im[n], so each butterfly stage reads and
 * writes four unit-stride streams and the compiler can vectorise it plainly.
 */

/* ---- the plan: bit-reversal table and per-stage twiddles ------------------------- */

struct FN(fft_plan) {
    size_t n;
    unsigned logn;
    size_t nswap;  /* bit-reversal permutation as a list of swaps (i, rev(i)), i < rev(i): */
    uint32_t *swp; /* no branch on i < rev(i) in the timed loop (it mispredicts often)     */
    FT *wr, *wi;   /* stage with half-length h uses wr[h + j], wi[h + j], j < h:
                    * exp(-i pi j / h).  n - 1 entries in all, twice the usual n/2
                    * table, so that every stage reads its twiddles at unit stride. */
};

FP_FFT_API void FN(fft_plan_free)(struct FN(fft_plan) *p)
{
    fp_free(p->swp);
    fp_free(p->wr);
    fp_free(p->wi);
    p->swp = NULL;
    p->wr = p->wi = NULL;
}

/* n a power of two >= 2; 0 on success.  Twiddles come from cosl/sinl, so each is
 * within about half an ulp of the exact value in FT (Higham's mu ~ u). */
FP_FFT_API int FN(fft_plan_init)(struct FN(fft_plan) *p, size_t n)
{
    p->n = n;
    p->logn = fp_log2(n);
    p->swp = fp_alloc(n * sizeof *p->swp); /* fewer than n/2 pairs */
    p->wr = fp_alloc(n * sizeof *p->wr);
    p->wi = fp_alloc(n * sizeof *p->wi);
    if (!p->swp || !p->wr || !p->wi) {
        FN(fft_plan_free)(p);
        return -1;
    }
    /* The swap list of the bit-reversal permutation.  r, the reverse of i, is counted up
     * from the top bit down (a reversed increment): amortized two steps per index, where
     * reversing each index bit by bit took n log n (20 ms of set-up at n = 2^20). */
    p->nswap = 0;
    for (size_t i = 0, r = 0; i < n; i++) {
        if (i < r) {
            p->swp[2 * p->nswap] = (uint32_t)i;
            p->swp[2 * p->nswap + 1] = (uint32_t)r;
            p->nswap++;
        }
        size_t bit = n >> 1; /* r = reverse(i + 1): carry down from the top bit */
        while (bit && (r & bit)) {
            r ^= bit;
            bit >>= 1;
        }
        r |= bit;
    }
    /* Stage h's twiddles are exp(-i pi j / h), j < h, at wr/wi[h + j].  The last stage's
     * (h = n/2) hold every other stage's: pi (j k) / (h k) with k a power of two rounds
     * exactly as pi j / h, so the copies are bit for bit what cosl/sinl would give.  Of
     * its angles only those up to pi/4 go through cosl/sinl, which need no argument
     * reduction there (beyond pi/4 glibc's long double reduction took 40% of an x87
     * process's set-up at n = 2^20); those up to pi/2 swap them (cos(pi/2 - b) = sin b),
     * each still within half an ulp of FT (and a hair) of the exact value; the second half
     * mirrors the first (cos(pi - a) = -cos a, sin(pi - a) = sin a): n/8 cosl/sinl pairs
     * in all, where one per twiddle took 0.2-0.5 s at n = 2^20 (x87) in every measured
     * process's set-up. */
    size_t top = n / 2;
    for (size_t j = 0; j <= top / 4 && top; j++) {
        long double a = FP_PI_L * (long double)j / (long double)top;
        p->wr[top + j] = (FT)cosl(a);
        p->wi[top + j] = (FT)-sinl(a);
    }
    for (size_t j = top / 4 + 1; j <= top / 2; j++) {
        p->wr[top + j] = -p->wi[top + top / 2 - j];
        p->wi[top + j] = -p->wr[top + top / 2 - j];
    }
    for (size_t j = top / 2 + 1; j < top; j++) {
        p->wr[top + j] = -p->wr[2 * top - j];
        p->wi[top + j] = p->wi[2 * top - j];
    }
    for (size_t h = 1; h < top; h *= 2)
        for (size_t j = 0; j < h; j++) {
            p->wr[h + j] = p->wr[top + j * (top / h)];
            p->wi[h + j] = p->wi[top + j * (top / h)];
        }
    if (K_BROKEN) /* -DCPULAB_BREAK_KAT (cpulab.h): the first stage's twiddle 1 + 2^-10 */
        p->wr[1] += (FT)0x1p-10;
    return 0;
}

/* ---- the measured transform ------------------------------------------------------ */

/* One stage's butterflies for one group: a = x[k..k+h), b = x[k+h..k+2h).
 * 10 flop per butterfly: complex multiply b*w (4 mul + 2 add) and a +- t (4 add).
 * restrict: the four streams never overlap, which lets the compiler vectorise
 * without run-time overlap checks. */
static inline void FN(fft_group)(FT *restrict ar, FT *restrict ai, FT *restrict br, FT *restrict bi,
                                 const FT *restrict wr, const FT *restrict wi, size_t h)
{
    for (size_t j = 0; j < h; j++) {
        FT tr = br[j] * wr[j] - bi[j] * wi[j];
        FT ti = br[j] * wi[j] + bi[j] * wr[j];
        br[j] = ar[j] - tr;
        bi[j] = ai[j] - ti;
        ar[j] = ar[j] + tr;
        ai[j] = ai[j] + ti;
    }
}

/* One stage: n / 2h groups of h butterflies.  Called with a constant h for the first
 * stages, so that the compiler can unroll those short groups and vectorise across
 * them (a loop of 1, 2 or 4 iterations is not worth a vector loop on its own). */
static inline void FN(fft_stage)(const struct FN(fft_plan) *p, FT *re, FT *im, size_t h)
{
    for (size_t k = 0; k < p->n; k += 2 * h)
        FN(fft_group)(re + k, im + k, re + k + h, im + k + h, p->wr + h, p->wi + h, h);
}

/* In-place forward DFT, X_k = sum_j x_j exp(-2 pi i jk/n): decimation in time,
 * bit-reversed input order, log2 n stages of n/2 butterflies = 5 n log2 n flop. */
FP_FFT_API void FN(fft_run)(const struct FN(fft_plan) *p, FT *re, FT *im)
{
    const uint32_t *s = p->swp;
    for (size_t q = 0; q < p->nswap; q++) { /* bit reversal: n/2 - O(sqrt n) swaps */
        size_t i = s[2 * q], j = s[2 * q + 1];
        FT t = re[i]; re[i] = re[j]; re[j] = t;
        t = im[i]; im[i] = im[j]; im[j] = t;
    }
    FN(fft_stage)(p, re, im, 1); /* twiddle 1: the multiplies are wasted, but counted */
    if (p->n > 2)
        FN(fft_stage)(p, re, im, 2);
    if (p->n > 4)
        FN(fft_stage)(p, re, im, 4);
    for (size_t h = 8; h < p->n; h *= 2) /* the long stages: a vector loop per group */
        FN(fft_stage)(p, re, im, h);
}

/* x *= s, for s = 1/n (a power of two: exact).  2n multiplies. */
FP_FFT_API void FN(fft_scale)(FT *re, FT *im, size_t n, FT s)
{
    for (size_t i = 0; i < n; i++) {
        re[i] *= s;
        im[i] *= s;
    }
}

/* ---- known-answer checks, shared by fft.c and fft_fftw.c ------------------------- */

/* The transform under test: in-place forward DFT of n points in split arrays. */
typedef int (*FN(fft_xform))(void *arg, size_t n, FT *re, FT *im);

/* Pseudo-random input in [-1, 1) (exact in FT). */
static void FN(fft_fill)(FT *re, FT *im, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        re[i] = (FT)fp_lcg(&seed);
        im[i] = (FT)fp_lcg(&seed);
    }
}

/* Error bound for the relative 2-norm error of a computed radix-2 FFT of size m:
 * Higham, Accuracy and Stability of Numerical Algorithms (2nd ed.), Theorem 24.2:
 * ||y^ - y|| / ||y|| <= log2(m) eta / (1 - log2(m) eta), eta = mu + gamma_4 (sqrt2 + mu),
 * mu the twiddles' error.  With mu <= u and gamma_4 ~ 4u, eta < 7u; we allow 8u per
 * stage, plus the long-double reference's own error (a few ulps of long double per
 * term: negligible on x86, where long double has a 64-bit significand, but it keeps
 * the check honest where long double is double). */
static long double FN(fft_tol)(size_t m)
{
    const long double u = FT_EPS / 2;
    const long double eta = 8 * u * fp_log2(m);
    return eta / (1 - eta) + 4 * (long double)m * LDBL_EPSILON;
}

/* Relative 2-norm error of (re, im) against the long-double DFT of (xr, xi), over all
 * bins when m <= 256 (check 1's small sizes), else over 16 bins (then the error of each
 * bin is measured against the whole norm, which the bound above still covers).  Every
 * bin at m = 1024 took 1.3 s of an aarch64 FFT's first process under qemu-user (its long
 * double is soft-float quad) and 0.55 s of armel's: half of float-abi-arm's set-up. */
static long double FN(fft_dft_error)(const FT *xr, const FT *xi, const FT *re, const FT *im, size_t m,
                                     struct fp_roots *w)
{
    long double err = 0, norm = 0;
    for (size_t i = 0; i < m; i++)
        norm += (long double)xr[i] * xr[i] + (long double)xi[i] * xi[i];
    norm *= (long double)m; /* ||X||^2 = m ||x||^2 (Parseval, exact arithmetic) */
    size_t bins = m <= 256 ? m : 16;
    uint64_t s = 0xB5AD4ECEDA1CE2A9ull;
    for (size_t b = 0; b < bins; b++) {
        size_t k = b; /* sampled: bins 0, 1, m/2, m-1, then pseudo-random ones */
        if (bins < m)
            k = b == 0 ? 0 : b == 1 ? 1 : b == 2 ? m / 2 : b == 3 ? m - 1 : (size_t)((fp_lcg(&s) + 1) * 0.5 * (double)m) % m;
        long double Xr, Xi;
        fp_dft_bin(w, k, xr, xi, sizeof(FT), &Xr, &Xi);
        long double dr = re[k] - Xr, di = im[k] - Xi;
        err += dr * dr + di * di;
    }
    return sqrtl(err / norm);
}

static int FN(fft_call)(FN(fft_xform) f, void *arg, size_t m, FT *re, FT *im, const char *what)
{
    if (f(arg, m, re, im) != 0) {
        k_fail("the transform of size %zu could not be run (%s)", m, what);
        return 1;
    }
    return 0;
}

/* Every known-answer check for a transform f, at the run's size n and at small sizes.
 * 0 = all passed; else k_fail() says which check failed and by how much. */
static int FN(fft_verify)(FN(fft_xform) f, void *arg, size_t n, const char *prec)
{
    int bad = 1;
    FT *xr = fp_alloc(n * sizeof(FT)), *xi = fp_alloc(n * sizeof(FT));
    FT *re = fp_alloc(n * sizeof(FT)), *im = fp_alloc(n * sizeof(FT));
    struct fp_roots w = {0};
    if (!xr || !xi || !re || !im) {
        k_fail("cannot allocate verification buffers for n = %zu", n);
        goto out;
    }

    /* 1. Against the direct DFT (long double) at 2, 4, ..., 256 and at n. */
    for (size_t m = 2; m <= n; m = m < 256 || m == n ? 2 * m : n) {
        FN(fft_fill)(xr, xi, m, 0x1234 + m);
        memcpy(re, xr, m * sizeof(FT));
        memcpy(im, xi, m * sizeof(FT));
        if (FN(fft_call)(f, arg, m, re, im, "DFT check"))
            goto out;
        if (fp_roots_init(&w, m)) {
            k_fail("cannot allocate DFT tables for m = %zu", m);
            goto out;
        }
        long double e = FN(fft_dft_error)(xr, xi, re, im, m, &w), tol = FN(fft_tol)(m);
        if (m < n) /* n's table (the last) serves the tone check too */
            fp_roots_free(&w);
        if (!(e <= tol)) {
            k_fail("%s FFT of size %zu differs from the direct DFT: relative error %.3Lg > %.3Lg", prec, m, e, tol);
            goto out;
        }
    }

    /* 2. A pure tone exp(2 pi i t j / n) transforms to n at bin t, 0 elsewhere.  Its
     * samples are the conjugates of fp_roots' w^(j t mod n), in long double: a cosl/sinl
     * per sample reduced its argument, most of this check's time at n = 2^20 (x87). */
    {
        size_t t = (n / 3) | 1;
        t %= n;
        if (!w.hr && fp_roots_init(&w, n)) { /* check 1 ends at size n: its table is kept */
            k_fail("cannot allocate DFT tables for m = %zu", n);
            goto out;
        }
        for (size_t j = 0; j < n; j++) {
            long double cr, ci;
            fp_root(&w, (j * t) % n, &cr, &ci);
            re[j] = (FT)cr;
            im[j] = (FT)-ci;
        }
        if (FN(fft_call)(f, arg, n, re, im, "tone check"))
            goto out;
        long double err = 0;
        for (size_t k = 0; k < n; k++) {
            long double dr = re[k] - (k == t ? (long double)n : 0), di = im[k];
            err += dr * dr + di * di;
        }
        long double e = sqrtl(err) / (long double)n, tol = FN(fft_tol)(n) + 2 * (long double)FT_EPS;
        if (!(e <= tol)) {
            k_fail("%s FFT of size %zu of a pure tone at bin %zu: relative error %.3Lg > %.3Lg", prec, n, t, e, tol);
            goto out;
        }
    }

    /* 3. Parseval: sum |X_k|^2 = n sum |x_j|^2; 4. the inverse recovers the input.
     * The inverse DFT is the forward one with re and im swapped, divided by n. */
    {
        FN(fft_fill)(xr, xi, n, 0xC0FFEE);
        memcpy(re, xr, n * sizeof(FT));
        memcpy(im, xi, n * sizeof(FT));
        if (FN(fft_call)(f, arg, n, re, im, "Parseval check"))
            goto out;
        long double ex = 0, eX = 0;
        for (size_t i = 0; i < n; i++) {
            ex += (long double)xr[i] * xr[i] + (long double)xi[i] * xi[i];
            eX += (long double)re[i] * re[i] + (long double)im[i] * im[i];
        }
        long double tol = FN(fft_tol)(n), e = fabsl(eX / ((long double)n * ex) - 1);
        if (!(e <= 2 * tol + tol * tol)) {
            k_fail("%s FFT of size %zu breaks Parseval: |sum|X|^2 / (n sum|x|^2) - 1| = %.3Lg > %.3Lg",
                   prec, n, e, 2 * tol + tol * tol);
            goto out;
        }
        if (FN(fft_call)(f, arg, n, im, re, "inverse check")) /* swapped: the inverse */
            goto out;
        FN(fft_scale)(re, im, n, (FT)1 / (FT)n);
        long double err = 0;
        for (size_t i = 0; i < n; i++) {
            long double dr = re[i] - (long double)xr[i], di = im[i] - (long double)xi[i];
            err += dr * dr + di * di;
        }
        e = sqrtl(err / ex);
        if (!(e <= 2 * tol + FT_EPS)) {
            k_fail("%s inverse FFT of size %zu does not recover the input: relative error %.3Lg > %.3Lg",
                   prec, n, e, 2 * tol + FT_EPS);
            goto out;
        }
    }
    bad = 0;
out:
    fp_roots_free(&w);
    fp_free(xr);
    fp_free(xi);
    fp_free(re);
    fp_free(im);
    return bad;
}
