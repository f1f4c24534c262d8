/* coreclock.h - the core clock against the TSC, for the harness and the launcher.
 *
 * The TSC ticks at a fixed rate while the core's clock moves (turbo, a host that shares
 * the core); a chain of dependent register adds costs one core cycle each on every x86
 * core since the Pentium Pro, so adds over ticks is core cycles per TSC tick.
 */
#ifndef CPULAB_CORECLOCK_H
#define CPULAB_CORECLOCK_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_TSC 1

/* LFENCE before RDTSC: earlier instructions have completed before the read. */
static inline uint64_t tsc_begin(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi)::"memory");
    return ((uint64_t)hi << 32) | lo;
}

/* RDTSCP waits for earlier instructions; LFENCE keeps later ones from starting. */
static inline uint64_t tsc_end(void)
{
    uint32_t lo, hi, aux;
    __asm__ __volatile__("rdtscp\n\tlfence" : "=a"(lo), "=d"(hi), "=c"(aux)::"memory");
    return ((uint64_t)hi << 32) | lo;
}

/* 100 dependent register-register adds: 100 core cycles on every x86 core since the
 * Pentium Pro.  A register operand, not an immediate, so no core can fold them. */
#define ADD1 "add %1, %0\n\t"
#define ADD10 ADD1 ADD1 ADD1 ADD1 ADD1 ADD1 ADD1 ADD1 ADD1 ADD1
#define ADD100 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10
#define ADDS_PER_BLOCK 100

static uintptr_t add_chain(uint64_t blocks)
{
    uintptr_t x = 0, y = (uintptr_t)blocks | 1;
    for (uint64_t i = 0; i < blocks; i++)
        __asm__ __volatile__(ADD100 : "+r"(x) : "r"(y));
    return x;
}

/* Core cycles per TSC tick from the fastest of `tries` chains of blocks x 100 dependent
 * adds (interrupts only ever add ticks). */
static double fastest_chain_ratio(uint64_t blocks, int tries)
{
    double best = 1e300;
    for (int i = 0; i < tries; i++) {
        uint64_t a = tsc_begin();
        add_chain(blocks);
        uint64_t b = tsc_end();
        if ((double)(b - a) < best)
            best = (double)(b - a);
    }
    return (double)(blocks * ADDS_PER_BLOCK) / best;
}

#endif /* HAVE_TSC */
#endif
