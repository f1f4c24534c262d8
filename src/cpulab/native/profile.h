/* profile.h - what the sampled profiles of harness.c and profile_preload.c share: arming
 * an interval timer whose signal goes to a handler with its context, and reading from
 * that context the instruction address the signal interrupted. */
#ifndef CPULAB_PROFILE_H
#define CPULAB_PROFILE_H

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

/* Send `signo` to `handler` every period_us of `timer` (ITIMER_REAL: wall clock, high
 * resolution; ITIMER_PROF: the process's CPU time, at the scheduler tick). */
static inline void arm_sampler(int timer, int signo, void (*handler)(int, siginfo_t *, void *), long period_us)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(signo, &sa, NULL);
    struct itimerval it = {{0, period_us}, {0, period_us}};
    setitimer(timer, &it, NULL);
}

/* The instruction address the signal interrupted; 0 on an ISA this does not know. */
static inline uintptr_t signal_pc(const void *context)
{
    const ucontext_t *uc = context;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#elif defined(__arm__)
    return (uintptr_t)uc->uc_mcontext.arm_pc;
#else
    (void)uc;
    return 0;
#endif
}

#endif
