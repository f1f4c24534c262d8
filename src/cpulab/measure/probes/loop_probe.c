/* loop_probe.c - the kernel of a loop probe (cpulab probe 'add rax, rbx').
 *
 * cpulab.probes.loop writes a small C file that defines the PROBE_* macros below for
 * one body and then includes this file; the harness measures it like any kernel.
 *
 *   PROBE_COUNTER   the loop counter register, as an asm string ("r15", or the body's own)
 *   PROBE_PRELOAD   asm that zeroes every other general register and xmm0-15 (and sets
 *                   rax = rsi unless rax is the counter)
 *   PROBE_LOOP      the 64-byte-aligned loop: COPIES copies of the body and an r15
 *                   dec/jnz, or the body as its own loop
 *   PROBE_FOLD      asm that xors every register into rax (the checksum)
 *   PROBE_COPIES    body executions per loop trip
 *   PROBE_TRIPS     default trips per k_run call (the "trips" parameter overrides it)
 *   PROBE_AS_LOOP   1 when the body is its own loop
 *   PROBE_CLOBBERS  every general register and xmm0-15, as an asm clobber list
 *
 * Registers on entry to the loop: rsi = rax = scratch (4 KiB, its first qword = its
 * own address), the other GPRs and xmm0-15 = 0, the counter = trips (loaded last).
 *
 * The self-pointing qword is stored before every call's loop and drained by an MFENCE:
 * with the store still in flight, a core that renames memory (seen on Rocket Lake) hands
 * its register to the loads, and `mov rax, [rax]` ran at 0.34 cycles instead of 5.  The
 * MFENCE also keeps one call's loop from overlapping the next call's.  It costs about 60
 * cycles per call, in the fixed part that the two loop lengths cancel.
 */
#include "cpulab.h"

#include <stdlib.h>
#include <string.h>

const char k_unit[] = "iterations";

struct ctx {
    uint64_t *scratch;
    uint64_t trips;
};

void *k_setup(void)
{
#if !defined(__x86_64__)
    k_skip("loop probes are x86-64 code");
    return NULL;
#else
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->scratch = aligned_alloc(4096, 4096);
    if (!c->scratch) {
        k_fail("cannot allocate the scratch buffer");
        return NULL;
    }
    memset(c->scratch, 0, 4096);
    int64_t trips = k_param_int("trips", PROBE_TRIPS);
    if (trips < 1 || trips > (int64_t)1 << 31) {
        k_fail("trips must be 1..2^31, got %lld", (long long)trips);
        return NULL;
    }
    c->trips = (uint64_t)trips;
    k_note("working_set_bytes", 4096);
    k_note("copies", PROBE_COPIES);
    k_note("trips", (double)trips);
    return c;
#endif
}

#if defined(__x86_64__)
/* rsp at the start and at the end of the asm block (a body must leave it balanced),
 * and the loop counter after the loop. */
static uint64_t sp_in, sp_out, counter_out;

/* Inputs reach the asm through memory (locals on the stack, globals rip-relative):
 * every general register except rsp/rbp is the body's, so none can carry them. */
static __attribute__((noinline)) uint64_t probe(const struct ctx *c)
{
    uint64_t scr = (uint64_t)(uintptr_t)c->scratch, trips = c->trips, out;
    __asm__ __volatile__(
        "mov %%rsp, %[sp_in]\n\t"
        "mov %[scr], %%rsi\n\t"
        "mov %[trips], %%" PROBE_COUNTER "\n\t"
        "sub $256, %%rsp\n\t" /* below the red zone: push/pop in the body are safe */
        "mov %%rsi, (%%rsi)\n\t"
        "mfence\n\t" /* the store reaches L1 first: see below */
        PROBE_PRELOAD
        PROBE_LOOP
        "mov %%rsp, %[sp_out]\n\t"
        "mov %[sp_in], %%rsp\n\t"
        "mov %%" PROBE_COUNTER ", %[cnt_out]\n\t"
        PROBE_FOLD
        "mov %%rax, %[out]\n\t"
        : [out] "=m"(out), [sp_in] "+m"(sp_in), [sp_out] "+m"(sp_out), [cnt_out] "+m"(counter_out)
        : [scr] "m"(scr), [trips] "m"(trips)
        : PROBE_CLOBBERS, "cc", "memory");
    return out;
}
#endif

/* The body's semantics are the user's, so the known answers are about the frame: the
 * stack comes back balanced, and the loop exits with its counter at 0 (with r15 as the
 * counter, a body that touched r15 would break that). */
int k_verify(void *ctx)
{
#if defined(__x86_64__)
    struct ctx *c = ctx;
    probe(c);
    if (sp_out != sp_in - 256) {
        k_fail("the body moved rsp by %lld bytes: push/pop must balance", (long long)(sp_out - (sp_in - 256)));
        return 1;
    }
    if (counter_out != 0) {
        k_fail(PROBE_AS_LOOP ? "the loop exited with " PROBE_COUNTER " = %llu, not 0: its branch is not "
                               "controlled by " PROBE_COUNTER
                             : "the loop exited with r15 = %llu, not 0: r15 was touched",
               (unsigned long long)counter_out);
        return 1;
    }
    return 0;
#else
    (void)ctx;
    return 1;
#endif
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    uint64_t h = 0;
#if defined(__x86_64__)
    for (uint64_t r = 0; r < reps; r++)
        h = k_mix(h, probe(ctx));
#else
    (void)ctx;
    (void)reps;
#endif
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)reps * (double)c->trips * PROBE_COPIES;
}
