/* stepcount.c - the instructions executed by the first call of one function, counted on
 * the processor itself under ptrace: exact, and it runs whatever the core runs (AVX-512
 * included), where valgrind 3.19 cannot.
 *
 *   stepcount ADDRESS PIE LIMIT MAP -- EXECUTABLE [ARGS...]
 *
 * ADDRESS: the function's address in the executable's symbol table (hex); PIE: 1 when
 * the executable is position-independent (addresses are then relative to where its
 * first mapping lands). The process runs with address randomisation off. At the
 * function's entry a breakpoint hands it over; the count ends when the return lands back
 * on the caller with the caller's stack. Then the process runs on freely to its end.
 *
 * MAP (a file, or - for none) lists the executable's instructions, one a line, in
 * symbol-table addresses: "ADDRESS LENGTH KIND TARGET CONDITION" (hex, hex, a letter, hex,
 * 0-15). Kinds:
 *   n  falls through          j  jumps to TARGET         c  calls TARGET
 *   b  branches to TARGET when CONDITION holds (x86's condition code: 4 is "equal")
 *   r  returns                s  anything else that moves control (indirect jumps and
 *                                calls, REP string instructions, system calls)
 * The code between two branches runs freely: an int3 on every b, r and s, and the
 * instructions on the way, followed through n, j and c in the map, are counted from it.
 * A b is decided from the flags and an r from the stack without executing either (one
 * stop, no step); an s is single-stepped (a REP instruction one step per iteration, as
 * valgrind counts it). Code outside the map (a shared library's) is single-stepped
 * whole. Every stop must land on the branch the map predicts, or the count fails.
 * A stop is two context switches: ~14 us under KVM with the tracer and the process on one
 * CPU, ~70 us when each wakes the other across CPUs, so both stay on the CPU the tracer
 * started on. Without a map every instruction is a stop (as valgrind and the map agree).
 *
 * The count is printed as the last line of standard output, with how many times each
 * instruction executed, by its address in the symbol table's terms (what a profile's
 * samples are: measure/explain/profile.py attributes them), and the stops it took:
 *
 *   stepcount {"instructions": N, "stops": S, "exit": STATUS, "pcs": {"ADDRESS": COUNT, ...}}
 *
 * or stepcount {"error": "..."}. LIMIT bounds the stops, so a long call fails quickly
 * rather than taking minutes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

static pid_t child;

static int fail(const char *why)
{
    if (child > 0)
        kill(child, SIGKILL);
    fflush(stdout);
    printf("stepcount {\"error\": \"%s\"}\n", why);
    return 2;
}

/* Where the executable's first mapping (file offset 0) starts in the child. */
static uint64_t load_base(const char *exe)
{
    char maps[64], line[PATH_MAX + 128], want[PATH_MAX];
    if (!realpath(exe, want))
        return 0;
    snprintf(maps, sizeof maps, "/proc/%d/maps", (int)child);
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

/* The map, sorted by address (as the file lists it), in the child's addresses. */
struct insn { uint64_t addr, target; uint8_t len, kind, cond, saved; };
static struct insn *map;
static size_t map_n;

static int read_map(const char *path, uint64_t base)
{
    if (strcmp(path, "-") == 0)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t cap = 0;
    uint64_t addr, target;
    unsigned len, cond;
    char kind;
    while (fscanf(f, "%" SCNx64 " %x %c %" SCNx64 " %u", &addr, &len, &kind, &target, &cond) == 5) {
        if (map_n == cap && !(map = realloc(map, (cap = cap ? 2 * cap : 4096) * sizeof *map)))
            return -1;
        map[map_n++] = (struct insn){addr + base, target + base, (uint8_t)len, (uint8_t)kind, (uint8_t)cond, 0};
    }
    fclose(f);
    return 0;
}

static struct insn *find(uint64_t addr)
{
    size_t lo = 0, hi = map_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (map[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < map_n && map[lo].addr == addr ? &map[lo] : NULL;
}

static int is_stop(const struct insn *i) { return i->kind == 'b' || i->kind == 'r' || i->kind == 's'; }

/* Whether condition code `cc` holds on `flags` (x86's tttn encoding). */
static int holds(unsigned cc, uint64_t flags)
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

/* Counts by address (open addressing: a call's few thousand distinct addresses among its
 * millions of instructions): each executed instruction's, and each straight run's. */
#define SLOTS (1u << 16)
struct tally { uint64_t key[SLOTS], count[SLOTS]; };
static struct tally pcs, runs;
/* Each straight run's length and stop, found by its first walk (runs' slot k's, in the same
 * slot): a run starts again at every trip of a loop. */
static struct { uint64_t n; const struct insn *to; } run_of[SLOTS];

static uint64_t *slot(struct tally *t, uint64_t key)
{
    for (uint32_t i = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 48), n = 0; n < SLOTS; i = (i + 1) & (SLOTS - 1), n++) {
        if (t->key[i] == key || !t->count[i]) {
            t->key[i] = key;
            return &t->count[i];
        }
    }
    return NULL;
}

/* The straight run from `i` to the next stop: its instructions, each tallied `times`
 * (0 only counts them). NULL where it loops forever without one. */
static const struct insn *walk(const struct insn *i, uint64_t *n, uint64_t times)
{
    for (*n = 0; !is_stop(i); ++*n) {
        uint64_t *seen = times ? slot(&pcs, i->addr) : NULL;
        if (times && !seen)
            return NULL;
        if (seen)
            *seen += times;
        if (*n > 100000000 || !(i = find(i->kind == 'n' ? i->addr + i->len : i->target)))
            return NULL; /* the map ends n, j and c only where the next is in it */
    }
    return i;
}

static int mem = -1;

static int poke(uint64_t addr, uint8_t byte) { return pwrite(mem, &byte, 1, (off_t)addr) == 1 ? 0 : -1; }

static int stop(uint64_t *stops, uint64_t limit)
{
    int status;
    if (waitpid(child, &status, 0) < 0 || !WIFSTOPPED(status))
        return -1;
    return ++*stops > limit ? -2 : WSTOPSIG(status);
}

int main(int argc, char **argv)
{
    if (argc < 7 || strcmp(argv[5], "--") != 0) {
        fprintf(stderr, "usage: stepcount ADDRESS PIE LIMIT MAP -- EXECUTABLE [ARGS...]\n");
        return 2;
    }
    const uint64_t symbol = strtoull(argv[1], NULL, 16);
    const int pie = atoi(argv[2]);
    const uint64_t limit = strtoull(argv[3], NULL, 10);

    cpu_set_t here;
    CPU_ZERO(&here);
    CPU_SET(sched_getcpu(), &here);
    sched_setaffinity(0, sizeof here, &here); /* inherited by the child */
    fflush(stdout);
    child = fork();
    if (child < 0)
        return fail("fork failed");
    if (child == 0) {
        personality(ADDR_NO_RANDOMIZE);
        ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        execv(argv[6], argv + 6);
        _exit(127);
    }
    int status;
    if (waitpid(child, &status, 0) < 0 || !WIFSTOPPED(status))
        return fail("the executable did not start");
    ptrace(PTRACE_SETOPTIONS, child, NULL, (void *)PTRACE_O_EXITKILL);
    uint64_t base = 0;
    if (pie && !(base = load_base(argv[6])))
        return fail("cannot find where the executable is mapped");
    if (read_map(argv[4], base))
        return fail("cannot read the map of the executable's instructions");
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)child);
    if ((mem = open(path, O_RDWR)) < 0)
        return fail("cannot open the process's memory");

    /* The breakpoint: int3 over the entry's first byte. */
    const uint64_t entry = symbol + base;
    uint8_t first;
    if (pread(mem, &first, 1, (off_t)entry) != 1 || poke(entry, 0xcc))
        return fail("cannot set a breakpoint at the function's entry");
    struct user_regs_struct regs;
    for (;;) {
        ptrace(PTRACE_CONT, child, NULL, NULL);
        if (waitpid(child, &status, 0) < 0 || !WIFSTOPPED(status))
            return fail("the process ended before calling the function");
        ptrace(PTRACE_GETREGS, child, NULL, &regs);
        if (WSTOPSIG(status) == SIGTRAP && regs.rip == entry + 1)
            break;
        if (WSTOPSIG(status) != SIGTRAP)
            return fail("a signal arrived before the function was called");
    }
    poke(entry, first);
    errno = 0;
    const uint64_t back = (uint64_t)ptrace(PTRACE_PEEKDATA, child, (void *)regs.rsp, NULL);
    if (errno)
        return fail("cannot read the return address");
    const uint64_t caller_sp = regs.rsp + 8; /* the stack once the call has returned */
    for (size_t k = 0; k < map_n; k++)
        if (is_stop(&map[k]) && (pread(mem, &map[k].saved, 1, (off_t)map[k].addr) != 1 || poke(map[k].addr, 0xcc)))
            return fail("cannot set the breakpoints");

    uint64_t steps = 0, stops = 0, n;
    regs.rip = entry;
    for (;;) {
        if (regs.rip == back && regs.rsp == caller_sp)
            break;
        const struct insn *i = find(regs.rip);
        if (i && !is_stop(i)) { /* a straight run: free to its stop */
            uint64_t *ran = slot(&runs, i->addr);
            if (!ran)
                return fail("the call executes more distinct instructions than the table holds");
            const size_t k = (size_t)(ran - runs.count);
            if (!*ran && !(run_of[k].to = walk(i, &run_of[k].n, 0)))
                return fail("a straight run of the map has no end");
            const struct insn *to = run_of[k].to;
            ++*ran;
            steps += run_of[k].n;
            ptrace(PTRACE_SETREGS, child, NULL, &regs);
            ptrace(PTRACE_CONT, child, NULL, NULL);
            int sig = stop(&stops, limit);
            ptrace(PTRACE_GETREGS, child, NULL, &regs);
            if (sig == -2)
                return fail("the call takes more stops than the limit");
            if (sig != SIGTRAP || regs.rip != to->addr + 1)
                return fail("the call left the path its map predicts (a signal, or code the map misreads)");
            regs.rip = to->addr;
            i = to;
        }
        uint64_t *seen = slot(&pcs, regs.rip);
        if (!seen)
            return fail("the call executes more distinct instructions than the table holds");
        if (i && i->kind == 'b') { /* decided from the flags, not executed */
            regs.rip = holds(i->cond, regs.eflags) ? i->target : i->addr + i->len;
            ++*seen, ++steps;
        } else if (i && i->kind == 'r') { /* from the stack, not executed */
            errno = 0;
            regs.rip = (uint64_t)ptrace(PTRACE_PEEKDATA, child, (void *)regs.rsp, NULL);
            if (errno)
                return fail("cannot read a return address");
            regs.rsp += 8;
            ++*seen, ++steps;
        } else { /* single-stepped: outside the map, or an s with its own byte back */
            const uint64_t at = regs.rip;
            if (i && poke(at, i->saved))
                return fail("cannot lift a breakpoint");
            ptrace(PTRACE_SETREGS, child, NULL, &regs);
            int sig;
            do { /* a REP instruction stays where it is until its last iteration */
                ptrace(PTRACE_SINGLESTEP, child, NULL, NULL);
                while ((sig = stop(&stops, limit)) > 0 && sig != SIGTRAP)
                    ptrace(PTRACE_SINGLESTEP, child, NULL, (void *)(long)sig); /* a signal: nothing executed */
                if (sig < 0)
                    return fail(sig == -2 ? "the call takes more stops than the limit" : "the process ended inside the function");
                ++*seen, ++steps;
                ptrace(PTRACE_GETREGS, child, NULL, &regs);
            } while (i && regs.rip == at);
            if (i && poke(at, 0xcc))
                return fail("cannot put a breakpoint back");
        }
    }
    /* The original code back, then the process runs on to its end. */
    for (size_t k = 0; k < map_n; k++)
        if (is_stop(&map[k]))
            poke(map[k].addr, map[k].saved);
    ptrace(PTRACE_SETREGS, child, NULL, &regs);
    ptrace(PTRACE_DETACH, child, NULL, NULL);
    if (waitpid(child, &status, 0) < 0)
        return fail("lost the process");
    for (uint32_t k = 0; k < SLOTS; k++) { /* each run's instructions, as often as it ran */
        if (runs.count[k] && !walk(find(runs.key[k]), &n, runs.count[k]))
            return fail("the call executes more distinct instructions than the table holds");
    }
    fflush(stdout);
    printf("stepcount {\"instructions\": %" PRIu64 ", \"stops\": %" PRIu64 ", \"exit\": %d, \"pcs\": {", steps, stops,
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    const char *sep = "";
    for (uint32_t k = 0; k < SLOTS; k++) {
        if (pcs.count[k]) {
            printf("%s\"%" PRIx64 "\": %" PRIu64, sep, pcs.key[k] - base, pcs.count[k]);
            sep = ", ";
        }
    }
    printf("}}\n");
    return 0;
}
