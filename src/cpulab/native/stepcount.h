/* stepcount.h - the instructions executed by the first call of one function, counted on
 * the processor itself, inside the process: exact, and it runs whatever the core runs
 * (AVX-512 included), where valgrind 3.19 cannot.  The harness arms it with
 * --step-count MAP ADDRESS (measure/instructions.py); the last line it prints is
 *
 *   stepcount {"instructions": N, "stops": S, "pcs": {"ADDRESS": COUNT, ...}}
 *
 * or stepcount {"error": "..."}: the count, how many times each instruction executed (by
 * its address in the symbol table's terms, what a profile's samples are), and the stops
 * it took.
 *
 * ADDRESS: the function's address in the executable's symbol table (hex); the process
 * knows where the function is, whence where the executable is mapped.  MAP lists the
 * executable's instructions, one a line, in symbol-table addresses: "ADDRESS LENGTH KIND
 * TARGET CONDITION" (hex, hex, a letter, hex, 0-15); measure/stepmap.py writes it.  Kinds:
 *   n  falls through          j  jumps to TARGET         c  calls TARGET
 *   b  branches to TARGET when CONDITION holds (x86's condition code: 4 is "equal")
 *   r  returns                s  anything else that moves control (indirect jumps and
 *                                calls, REP string instructions, system calls)
 * An empty MAP (/dev/null) makes every instruction a stop.
 *
 * An int3 at the function's entry starts the count: its handler (SIGTRAP) puts an int3 on
 * every b, r and s, and the code between two of them runs freely, its instructions
 * counted from the map (followed through n, j and c).  A b is decided from the flags and
 * an r from the stack without executing either (one stop); an s is executed alone with
 * the trap flag (a REP instruction a step per iteration, as valgrind counts it), a
 * system call by the handler itself (the trap flag would let the next instruction run
 * untrapped).  Code outside the map (a shared library's) is stepped whole.  Every stop
 * must land where the map predicts, or the count fails.  The count ends when the return
 * lands back on the caller with the caller's stack: the code is put back and the process
 * runs on.  A stop is one signal: ~3.3 us under KVM, where a ptrace stop (two context
 * switches) took 12.4 (Zen 4).
 *
 * The handler and what it calls must not be in the map (stepmap leaves out functions
 * named step_*): an int3 in them would trap while SIGTRAP is blocked.  For the same
 * reason they call nothing (no libc), and the count's tables are mapped, not static:
 * a measured process carries none of it.
 */
#ifndef CPULAB_STEPCOUNT_H
#define CPULAB_STEPCOUNT_H

#include <stdint.h>
#include <stdio.h>

#if defined(__x86_64__) && defined(__linux__)
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define STEP_SLOTS (1u << 16)
#define STEP_TF 0x100

struct step_insn { uint64_t addr, target; uint8_t len, kind, cond, saved; };

/* Counts by address (open addressing: a call's few thousand distinct addresses among its
 * millions of instructions): each executed instruction's, and each straight run's. */
struct step_tally { uint64_t key[STEP_SLOTS], count[STEP_SLOTS]; };

struct step_state {
    struct step_insn *map;
    size_t n;
    uint64_t base, entry, back, caller_sp, limit, steps, stops;
    uint8_t entry_saved;             /* the entry's own byte, under the int3 that starts the count */
    const struct step_insn *expect;  /* the stop a free run ends at */
    uint64_t stepping;               /* the address executed alone under the trap flag, or 0 */
    const struct step_insn *lifted;  /* its map entry, whose int3 goes back after it */
    int phase;                       /* 0 armed at the entry, 1 counting, 2 done */
    struct step_tally pcs, runs;
    /* Each straight run's length and stop, found by its first walk (runs' slot k's). */
    struct { uint64_t n; const struct step_insn *to; } run_of[STEP_SLOTS];
};

static struct step_state *step_st;
static const char *step_error; /* why there is no count: arming failed, or the count ended early */
#define STEP_FULL "the call executes more distinct instructions than the table holds"

static inline __attribute__((always_inline)) int step_is_stop(const struct step_insn *i)
{
    return i->kind == 'b' || i->kind == 'r' || i->kind == 's';
}

static inline __attribute__((always_inline)) const struct step_insn *step_find(uint64_t addr)
{
    size_t lo = 0, hi = step_st->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (step_st->map[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < step_st->n && step_st->map[lo].addr == addr ? &step_st->map[lo] : NULL;
}

/* Whether condition code `cc` holds on `flags` (x86's tttn encoding). */
static inline __attribute__((always_inline)) int step_holds(unsigned cc, uint64_t flags)
{
    const int cf = flags & 1, pf = flags >> 2 & 1, zf = flags >> 6 & 1, sf = flags >> 7 & 1, of = flags >> 11 & 1;
    int t;
    switch (cc >> 1) {
    case 0: t = of; break;
    case 1: t = cf; break;
    case 2: t = zf; break;
    case 3: t = cf | zf; break;
    case 4: t = sf; break;
    case 5: t = pf; break;
    case 6: t = sf != of; break;
    default: t = zf | (sf != of); break;
    }
    return t ^ (int)(cc & 1);
}

static inline __attribute__((always_inline)) uint64_t *step_slot(struct step_tally *t, uint64_t key)
{
    for (uint32_t i = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 48), n = 0; n < STEP_SLOTS;
         i = (i + 1) & (STEP_SLOTS - 1), n++) {
        if (t->key[i] == key || !t->count[i]) {
            t->key[i] = key;
            return &t->count[i];
        }
    }
    return NULL;
}

/* The straight run from `i` to the next stop: its instructions, each tallied `times`
 * (0 only counts them).  NULL where it loops forever without one. */
static inline __attribute__((always_inline)) const struct step_insn *step_walk(const struct step_insn *i,
                                                                                uint64_t *n, uint64_t times)
{
    for (*n = 0; !step_is_stop(i); ++*n) {
        uint64_t *seen = times ? step_slot(&step_st->pcs, i->addr) : NULL;
        if (times && !seen)
            return NULL;
        if (seen)
            *seen += times;
        if (*n > 100000000 || !(i = step_find(i->kind == 'n' ? i->addr + i->len : i->target)))
            return NULL; /* the map ends n, j and c only where the next is in it */
    }
    return i;
}

/* Every stop's int3 (1) or its own byte (0). */
static inline __attribute__((always_inline)) void step_mark(int on)
{
    for (size_t k = 0; k < step_st->n; k++)
        if (step_is_stop(&step_st->map[k]))
            *(volatile uint8_t *)step_st->map[k].addr = on ? 0xcc : step_st->map[k].saved;
}

/* The count ends (why: NULL when it is whole): the code as it was, the process runs on. */
static inline __attribute__((always_inline)) void step_end(const char *why)
{
    step_mark(0);
    step_st->phase = 2;
    step_error = why;
}

static inline __attribute__((always_inline)) long step_syscall(long nr, long a, long b, long c, long d, long e,
                                                                long f)
{
    register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* Where the handler returns: the kernel's rt_sigreturn. */
void step_restore(void);
__asm__(".text\n.type step_restore, @function\nstep_restore:\n\tmovq $15, %rax\n\tsyscall\n"
        ".size step_restore, .-step_restore\n");

/* The SIGTRAP handler: the process at a stop (an int3: rip is past it) or after one
 * instruction under the trap flag; it decides what it can and lets the rest run. */
static void step_on_trap(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)info;
    greg_t *g = ((ucontext_t *)context)->uc_mcontext.gregs;
    struct step_state *st = step_st;
    uint64_t at;
    if (st->phase == 2)
        return;
    if (st->phase == 1)
        st->stops++;
    if (st->stepping) { /* one instruction ran alone */
        uint64_t *seen = step_slot(&st->pcs, st->stepping);
        if (!seen) {
            g[REG_EFL] &= ~STEP_TF;
            step_end(STEP_FULL);
            return;
        }
        ++*seen, ++st->steps;
        if ((uint64_t)g[REG_RIP] == st->stepping) /* a REP instruction, not at its last iteration */
            return;
        if (st->lifted)
            *(volatile uint8_t *)st->lifted->addr = 0xcc;
        g[REG_EFL] &= ~STEP_TF;
        st->stepping = 0, st->lifted = NULL;
        at = (uint64_t)g[REG_RIP];
    } else if (st->phase == 0) { /* the call starts: its return address is on top of the stack */
        at = (uint64_t)g[REG_RIP] - 1;
        if (at != st->entry)
            return; /* not ours: the int3 runs as it would have */
        st->back = *(uint64_t *)g[REG_RSP];
        st->caller_sp = (uint64_t)g[REG_RSP] + 8;
        *(volatile uint8_t *)at = st->entry_saved;
        step_mark(1);
        st->phase = 1;
    } else {
        at = (uint64_t)g[REG_RIP] - 1;
        if (!st->expect || at != st->expect->addr) {
            g[REG_RIP] = (greg_t)at;
            step_end("the call left the path its map predicts (a signal, or code the map misreads)");
            return;
        }
    }
    for (;;) {
        if (at == st->back && (uint64_t)g[REG_RSP] == st->caller_sp) {
            step_end(NULL);
            break;
        }
        if (st->stops > st->limit) {
            step_end("the call takes more stops than the limit");
            break;
        }
        const struct step_insn *i = st->n ? step_find(at) : NULL;
        if (i && !step_is_stop(i)) { /* a straight run: free to its stop */
            uint64_t *ran = step_slot(&st->runs, at);
            if (!ran) {
                step_end(STEP_FULL);
                break;
            }
            const size_t k = (size_t)(ran - st->runs.count);
            if (!*ran && !(st->run_of[k].to = step_walk(i, &st->run_of[k].n, 0))) {
                step_end("a straight run of the map has no end");
                break;
            }
            ++*ran;
            st->steps += st->run_of[k].n;
            st->expect = st->run_of[k].to;
            break;
        }
        uint64_t *seen = step_slot(&st->pcs, at);
        if (!seen) {
            step_end(STEP_FULL);
            break;
        }
        if (i && i->kind == 'b') { /* decided from the flags, not executed */
            at = step_holds(i->cond, (uint64_t)g[REG_EFL]) ? i->target : i->addr + i->len;
            ++*seen, ++st->steps;
        } else if (i && i->kind == 'r') { /* from the stack, not executed */
            at = *(uint64_t *)g[REG_RSP];
            g[REG_RSP] += 8;
            ++*seen, ++st->steps;
        } else if ((i ? i->saved : *(const uint8_t *)at) == 0x0f && *(const uint8_t *)(at + 1) == 0x05) {
            /* syscall: made here, as the instruction would make it */
            long nr = (long)g[REG_RAX];
            if (nr == 15 || nr == 56 || nr == 57 || nr == 58 || nr == 59 || nr == 322 || nr == 435) {
                step_end("the call makes a system call that cannot be counted from inside it");
                break;
            }
            g[REG_RAX] = (greg_t)step_syscall(nr, (long)g[REG_RDI], (long)g[REG_RSI], (long)g[REG_RDX],
                                              (long)g[REG_R10], (long)g[REG_R8], (long)g[REG_R9]);
            g[REG_R11] = g[REG_EFL];
            at += 2;
            g[REG_RCX] = (greg_t)at;
            ++*seen, ++st->steps, ++st->stops; /* a stop of its own, as if it had trapped */
        } else { /* executed alone: outside the map, or an s with its own byte back */
            if (i)
                *(volatile uint8_t *)at = i->saved;
            st->stepping = at, st->lifted = i;
            g[REG_EFL] |= STEP_TF;
            break;
        }
    }
    g[REG_RIP] = (greg_t)at;
}

/* Arms the count of the first call of the function at `entry` (`symbol` in the map's
 * terms) from the map at `path`, at most `limit` stops: 0, or -1 with step_error. */
static int step_arm(const char *path, uintptr_t entry, uint64_t symbol, uint64_t limit)
{
    void *mem = mmap(NULL, sizeof *step_st, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return step_error = "cannot map the count's tables", -1;
    struct step_state *st = step_st = mem;
    st->base = entry - symbol, st->entry = entry, st->limit = limit;
    FILE *f = fopen(path, "r");
    if (!f)
        return step_error = "cannot read the map of the executable's instructions", -1;
    size_t cap = 0;
    uint64_t addr, target;
    unsigned len, cond;
    char kind;
    while (fscanf(f, "%" SCNx64 " %x %c %" SCNx64 " %u", &addr, &len, &kind, &target, &cond) == 5) {
        if (st->n == cap) {
            size_t bytes = (cap = cap ? 2 * cap : 4096) * sizeof *st->map;
            void *grown = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (grown == MAP_FAILED)
                return fclose(f), step_error = "cannot map the count's tables", -1;
            if (st->n)
                memcpy(grown, st->map, st->n * sizeof *st->map), munmap(st->map, st->n * sizeof *st->map);
            st->map = grown;
        }
        st->map[st->n++] = (struct step_insn){addr + st->base, target + st->base, (uint8_t)len, (uint8_t)kind,
                                              (uint8_t)cond, 0};
    }
    fclose(f);
    /* The code writable (private: this process's copy), each stop's own byte kept. */
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t last = 0;
    for (size_t k = 0; k <= st->n; k++) {
        const uint64_t first = k < st->n ? st->map[k].addr : entry;
        const uint64_t end = first + (k < st->n ? st->map[k].len : 1);
        for (uint64_t a = first & ~(page - 1); a < end; a += page) {
            if (a != last && mprotect((void *)a, page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
                return step_error = "cannot make the code writable", -1;
            last = a;
        }
        if (k < st->n)
            st->map[k].saved = *(const uint8_t *)first;
    }
    st->entry_saved = *(const uint8_t *)entry;
    /* The kernel's sigaction, with a return of our own: libc's (__restore_rt) is in the
     * map of a static build, and a stop on its system call would trap in the handler. */
    struct { void (*handler)(int, siginfo_t *, void *); unsigned long flags; void (*restorer)(void); uint64_t mask; }
        sa = {step_on_trap, SA_SIGINFO | 0x04000000 /* SA_RESTORER */, step_restore, 0};
    if (step_syscall(13 /* rt_sigaction */, SIGTRAP, (long)&sa, 0, 8, 0, 0) != 0)
        return step_error = "cannot take SIGTRAP", -1;
    *(volatile uint8_t *)entry = 0xcc;
    return 0;
}

/* The count's line (module comment), once the process has made the call or not. */
static void step_report(void)
{
    struct step_state *st = step_st; /* mapped unless step_error says why not */
    if (!step_error && st->phase != 2)
        step_error = "the function was not called";
    uint64_t n;
    for (uint32_t k = 0; k < STEP_SLOTS && !step_error; k++) /* each run's instructions, as often as it ran */
        if (st->runs.count[k] && !step_walk(step_find(st->runs.key[k]), &n, st->runs.count[k]))
            step_error = STEP_FULL;
    fflush(stdout);
    if (step_error) {
        printf("stepcount {\"error\": \"%s\"}\n", step_error);
        return;
    }
    printf("stepcount {\"instructions\": %" PRIu64 ", \"stops\": %" PRIu64 ", \"pcs\": {", st->steps, st->stops);
    const char *sep = "";
    for (uint32_t k = 0; k < STEP_SLOTS; k++) {
        if (st->pcs.count[k]) {
            printf("%s\"%" PRIx64 "\": %" PRIu64, sep, st->pcs.key[k] - st->base, st->pcs.count[k]);
            sep = ", ";
        }
    }
    printf("}}\n");
}
#else
static int step_arm(const char *path, uintptr_t entry, uint64_t symbol, uint64_t limit)
{
    (void)path, (void)entry, (void)symbol, (void)limit;
    return -1;
}
static void step_report(void)
{
    printf("stepcount {\"error\": \"stepping counts x86-64 Linux only\"}\n");
}
#endif

#endif
