/* stepcount.c - the instructions executed by the first call of one function, counted on
 * the processor itself by single-stepping it under ptrace: exact, and it runs whatever
 * the core runs (AVX-512 included), where valgrind 3.19 cannot.
 *
 *   stepcount ADDRESS PIE LIMIT -- EXECUTABLE [ARGS...]
 *
 * ADDRESS: the function's address in the executable's symbol table (hex); PIE: 1 when
 * the executable is position-independent (the address is then relative to where its
 * first mapping lands). The process runs with address randomisation off. At the
 * function's entry a breakpoint hands it over; from there every instruction is one step
 * (a REP-prefixed string instruction one step per iteration, as valgrind counts it)
 * until the return lands back on the caller with the caller's stack. Then the process
 * runs on freely to its end. The count is printed as the last line of standard output,
 * with how many times each instruction executed, by its address in the symbol table's
 * terms (what a profile's samples are: measure/explain/profile.py attributes them):
 *
 *   stepcount {"instructions": N, "exit": STATUS, "pcs": {"ADDRESS": COUNT, ...}}
 *
 * or stepcount {"error": "..."}. A step is two context switches: ~14 us under KVM with
 * the tracer and the process on one CPU, ~70 us when each wakes the other across CPUs,
 * so both stay on the CPU the tracer started on. LIMIT bounds the steps, so a long call
 * fails quickly rather than taking minutes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static int fail(const char *why, pid_t child)
{
    if (child > 0)
        kill(child, SIGKILL);
    fflush(stdout);
    printf("stepcount {\"error\": \"%s\"}\n", why);
    return 2;
}

/* Where the executable's first mapping (file offset 0) starts in the child. */
static uint64_t load_base(pid_t pid, const char *exe)
{
    char maps[64], line[PATH_MAX + 128], want[PATH_MAX];
    if (!realpath(exe, want))
        return 0;
    snprintf(maps, sizeof maps, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(maps, "r");
    if (!f)
        return 0;
    uint64_t base = 0;
    while (!base && fgets(line, sizeof line, f)) {
        uint64_t start, offset;
        char path[PATH_MAX] = "";
        if (sscanf(line, "%" SCNx64 "-%*x %*s %" SCNx64 " %*s %*s %4095s", &start, &offset, path) >= 2
            && offset == 0 && strcmp(path, want) == 0)
            base = start;
    }
    fclose(f);
    return base;
}

/* Each executed address and its count: open addressing, a loop's few hundred distinct
 * addresses among a call's millions of steps. */
#define SLOTS (1u << 16)
static uint64_t slot_pc[SLOTS], slot_count[SLOTS];

static int tally(uint64_t pc)
{
    for (uint32_t i = (uint32_t)(pc * 0x9e3779b97f4a7c15ull >> 48), n = 0; n < SLOTS; i = (i + 1) & (SLOTS - 1), n++) {
        if (slot_pc[i] == pc || !slot_count[i]) {
            slot_pc[i] = pc;
            slot_count[i]++;
            return 0;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 6 || strcmp(argv[4], "--") != 0) {
        fprintf(stderr, "usage: stepcount ADDRESS PIE LIMIT -- EXECUTABLE [ARGS...]\n");
        return 2;
    }
    uint64_t address = strtoull(argv[1], NULL, 16);
    const int pie = atoi(argv[2]);
    const uint64_t limit = strtoull(argv[3], NULL, 10);

    cpu_set_t here;
    CPU_ZERO(&here);
    CPU_SET(sched_getcpu(), &here);
    sched_setaffinity(0, sizeof here, &here); /* inherited by the child */
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return fail("fork failed", 0);
    if (child == 0) {
        personality(ADDR_NO_RANDOMIZE);
        ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        execv(argv[5], argv + 5);
        _exit(127);
    }
    int status;
    if (waitpid(child, &status, 0) < 0 || !WIFSTOPPED(status))
        return fail("the executable did not start", child);
    ptrace(PTRACE_SETOPTIONS, child, NULL, (void *)PTRACE_O_EXITKILL);
    if (pie) {
        uint64_t base = load_base(child, argv[5]);
        if (!base)
            return fail("cannot find where the executable is mapped", child);
        address += base;
    }

    /* The breakpoint: int3 over the entry's first byte. */
    errno = 0;
    long word = ptrace(PTRACE_PEEKTEXT, child, (void *)address, NULL);
    if (errno)
        return fail("cannot read the function's entry", child);
    ptrace(PTRACE_POKETEXT, child, (void *)address, (void *)((word & ~0xffL) | 0xcc));
    struct user_regs_struct regs;
    for (;;) {
        ptrace(PTRACE_CONT, child, NULL, NULL);
        if (waitpid(child, &status, 0) < 0 || !WIFSTOPPED(status))
            return fail("the process ended before calling the function", child);
        ptrace(PTRACE_GETREGS, child, NULL, &regs);
        if (WSTOPSIG(status) == SIGTRAP && regs.rip == address + 1)
            break;
        if (WSTOPSIG(status) != SIGTRAP)
            return fail("a signal arrived before the function was called", child);
    }
    ptrace(PTRACE_POKETEXT, child, (void *)address, (void *)word);
    regs.rip = address;
    ptrace(PTRACE_SETREGS, child, NULL, &regs);
    const uint64_t caller_sp = regs.rsp + 8; /* the stack once the call has returned */
    errno = 0;
    const uint64_t back = (uint64_t)ptrace(PTRACE_PEEKDATA, child, (void *)regs.rsp, NULL);
    if (errno)
        return fail("cannot read the return address", child);

    const uint64_t base = address - strtoull(argv[1], NULL, 16);
    uint64_t steps = 0, pc = address;
    int pass = 0; /* a signal meant for the process, handed on with the next step */
    for (;;) {
        ptrace(PTRACE_SINGLESTEP, child, NULL, (void *)(long)pass);
        if (waitpid(child, &status, 0) < 0 || !WIFSTOPPED(status))
            return fail("the process ended inside the function", child);
        pass = WSTOPSIG(status) == SIGTRAP ? 0 : WSTOPSIG(status);
        if (pass)
            continue; /* stopped by a signal, not by a step: nothing executed */
        if (++steps > limit)
            return fail("the call executes more instructions than the limit", child);
        if (tally(pc - base))
            return fail("the call executes more distinct instructions than the table holds", child);
        errno = 0;
        uint64_t rip = pc = (uint64_t)ptrace(PTRACE_PEEKUSER, child, (void *)offsetof(struct user_regs_struct, rip), NULL);
        if (errno)
            return fail("cannot read the registers", child);
        if (rip == back  /* and the caller's frame, not a deeper call returning there */
            && (uint64_t)ptrace(PTRACE_PEEKUSER, child, (void *)offsetof(struct user_regs_struct, rsp), NULL) == caller_sp)
            break;
    }
    ptrace(PTRACE_DETACH, child, NULL, NULL);
    if (waitpid(child, &status, 0) < 0)
        return fail("lost the process", 0);
    fflush(stdout);
    printf("stepcount {\"instructions\": %" PRIu64 ", \"exit\": %d, \"pcs\": {", steps,
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    const char *sep = "";
    for (uint32_t i = 0; i < SLOTS; i++) {
        if (slot_count[i]) {
            printf("%s\"%" PRIx64 "\": %" PRIu64, sep, slot_pc[i], slot_count[i]);
            sep = ", ";
        }
    }
    printf("}}\n");
    return 0;
}
