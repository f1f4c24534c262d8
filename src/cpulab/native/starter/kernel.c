/* $name.c - a kernel of your own for cpulab (written by `cpulab new kernel $name`).
 *
 * cpulab builds this file under each variant of the plan ($name.toml), with its harness
 * (cpulab.h says what each function is for), and measures k_run: in rounds, each round
 * a fresh layout of this code, against the baseline variant.  Run it:
 *
 *     cpulab run $name.toml
 *
 * Replace the sum below with the code you want to measure; keep the five definitions.
 * The code being tuned may live in other files: list them as `library` in the plan.
 */
#include "cpulab.h"

#include <stdlib.h>

/* What k_work counts: bytes, keys, flop, loads, elements, iterations (it decides the
 * rate shown: MB/s, keys/s, MFLOPS ...). The plan's `unit` must say the same. */
const char k_unit[] = "elements";

struct ctx {
    uint32_t *a;
    size_t n;
};

/* Once per process, untimed: read the parameters (declared in the plan's
 * [kernel.$name.params]) and make the input.  Return NULL after k_fail("why") if it
 * cannot be made. */
void *k_setup(void)
{
    struct ctx *c = malloc(sizeof *c);
    if (!c) {
        k_fail("out of memory");
        return NULL;
    }
    c->n = (size_t)k_param_int("n", 4096);
    c->a = k_alloc(c->n * sizeof *c->a); /* cache-line aligned, at a drawn offset */
    for (size_t i = 0; i < c->n; i++)
        c->a[i] = (uint32_t)i;
    k_note("working_set_bytes", (double)(c->n * sizeof *c->a));
    return c;
}

/* The measured code: `reps` repetitions of the work.  Return something computed from
 * every repetition's result, so that the compiler cannot drop any of them. */
uint64_t k_run(void *p, uint64_t reps)
{
    struct ctx *c = p;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        uint64_t sum = 0;
        for (size_t i = 0; i < c->n; i++)
            sum += c->a[i];
        h = k_mix(h, sum);
    }
    return h;
}

/* The units of work k_run(ctx, reps) does: here, elements summed. */
double k_work(const void *p, uint64_t reps)
{
    const struct ctx *c = p;
    return (double)reps * (double)c->n;
}

/* A known-answer test, run once before anything is timed: return 0 when the measured
 * code computes what it should.  Without one (delete it), cpulab checks instead that
 * every variant's k_run(ctx, 1) returns what the baseline's does. */
int k_verify(void *p)
{
    struct ctx *c = p;
    uint64_t want = (uint64_t)c->n * (c->n - 1) / 2, sum = 0;
    for (size_t i = 0; i < c->n; i++)
        sum += c->a[i];
    if (sum != want) {
        k_fail("sum of 0..%zu is %llu, expected %llu", c->n - 1, (unsigned long long)sum,
               (unsigned long long)want);
        return 1;
    }
    return 0;
}
