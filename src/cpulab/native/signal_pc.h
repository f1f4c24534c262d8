/* signal_pc.h - the instruction address a signal interrupted, from its handler's context
 * (the sampled profiles of harness.c and profile_preload.c).  0 on an ISA it does not know. */
#ifndef CPULAB_SIGNAL_PC_H
#define CPULAB_SIGNAL_PC_H

#include <stdint.h>
#include <ucontext.h>

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
