/* cpulab.h - the interface between the fixed harness (harness.c) and one kernel: a
 * public interface, the one a kernel of your own implements (README: "Your own kernel";
 * `cpulab new kernel NAME` writes one to start from).
 *
 * A kernel is one C or C++ file that defines k_unit and the k_* functions below (k_verify
 * may be left out).  The harness is compiled with fixed flags; only the kernel (and the
 * library sources its plan names) gets the variant's flags.  The harness calls, in order:
 *
 *   ctx = k_setup();          allocate and initialise from the parameters
 *   k_verify(ctx) == 0 ?      known-answer test; a kernel that fails is never timed.
 *                             Left out: cpulab checks instead that one k_run(ctx, 1) on
 *                             a fresh context returns what the baseline's returns
 *                             (exactly, or as doubles within the plan's tolerance:
 *                             return k_double_bits(x) for a floating-point result)
 *   k_run(ctx, reps)          the timed work, called many times; returns a checksum
 *   k_work(ctx, reps)         units of work (bytes, keys, flop, loads) done by one
 *                             k_run(ctx, reps) call
 *
 * cpulab compiles a kernel with this file's directory on the include path; `cpulab new
 * kernel` also writes compile_flags.txt naming it, for editors.
 */
#ifndef CPULAB_H
#define CPULAB_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parameters arrive as --param key=value on the harness command line.  k_param_int and
 * k_param_num read the whole value in base 10 (no leading zeros, hex or suffixes); a value
 * they cannot read makes the result setup-failed, naming it, and they return dflt. */
const char *k_param_str(const char *key, const char *dflt);
int64_t     k_param_int(const char *key, int64_t dflt);
double      k_param_num(const char *key, double dflt);

/* Why k_setup returned NULL or k_verify failed; printed as the result's error. */
void k_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Like k_fail, but the variant is "skipped" (e.g. the CPU lacks an instruction set). */
void k_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Memory for a kernel's buffers: 64-byte aligned, at a cache line of its first page drawn
 * at random in each process (where buffers sit against each other within a page, for 4K
 * aliasing and cache sets, is part of the layout a verdict averages over, as the code's
 * placement is); one page more than asked.  Free it with k_free, not free. */
void *k_alloc(size_t bytes);
void  k_free(void *p);

/* Attach a number to the result, e.g. k_note("working_set_bytes", 3 * n * 8).  Two are read:
 * working_set_bytes (which cache level holds the data, for the why) and flops_per_byte
 * (floating-point operations per byte of operands, of a kernel whose unit is flop or bytes:
 * where the roofline places it). */
void k_note(const char *key, double value);

/* Proving that a known-answer test can fail.  K_BROKEN is 0, or 1 when the kernel is built
 * with -DCPULAB_BREAK_KAT.  Each kernel perturbs one constant of the code it times by it
 * (a round constant, an input bit, a coefficient, a loop bound; never the expected
 * answer), so tests/test_kats.py can show that k_verify compares the timed computation
 * with an independent known answer: every kernel built that way must be verify-failed.
 * Written as `x ^ K_BROKEN`, `x + K_BROKEN * d` or `if (K_BROKEN)`, it folds away in an
 * ordinary build at every -O level: it costs nothing in a measured loop. */
#ifdef CPULAB_BREAK_KAT
#define K_BROKEN 1
#else
#define K_BROKEN 0
#endif

/* A 64-bit hash helper kernels may use to fold results into a checksum. */
static inline uint64_t k_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

/* A double's bits as a checksum, for the automatic check's tolerance (k_verify left out). */
static inline uint64_t k_double_bits(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

/* Defined by each kernel (with C linkage: in C++ this header declares them so). */
extern const char k_unit[];                     /* "bytes", "keys", "flop", "loads" ... */
void    *k_setup(void);                         /* NULL = failure (say why with k_fail/k_skip) */
int      k_verify(void *ctx);                   /* 0 = known answers match */
uint64_t k_run(void *ctx, uint64_t reps);       /* the timed work; a checksum of it */
double   k_work(const void *ctx, uint64_t reps); /* units of work in k_run(ctx, reps) */

#ifdef __cplusplus
}
#endif

#endif
