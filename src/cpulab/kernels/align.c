/* align.c - latency of a dependent load by its alignment: seed 004, table 3, today.
 *
 * The seed measured "MOV EAX,[EAX]" in a loop (its Figure 1): each load's result is
 * the next load's address, so loads cannot overlap and the loop time is the
 * load-to-use latency.  Here the pointer of each node of a small ring is stored at a
 * chosen byte offset inside the node's 64-byte line, so every load of the chase has
 * that alignment.
 *
 * Parameters:
 *   offset      byte offset of the load inside its 64-byte line, 0..63 (default 0).
 *               offset + width > 64 makes the load cross into the next line.
 *   width       4 or 8 bytes per load (default 8).
 *   level       l1 (default): a ring of `nodes` lines (default 4) 128 bytes apart, in
 *                 distinct L1 sets: every load hits L1.
 *               l2: `nodes` lines (default 64) one 4 KiB page apart, all at the same
 *                 offset in their page (256 KiB span).  Lines 4 KiB apart share one L1
 *                 set (L1d is 64 sets on current x86), 64 lines overwhelm its 8-12 ways,
 *                 so every load misses L1 and hits L2 -- the seed's Figure 1 trick.
 *                 The ring order is a random single cycle (Sattolo), so no stride
 *                 prefetcher can run ahead of the chase.
 *   at          line (default): nodes sit at line 0 (l1) / line 32 (l2) of their slot.
 *               page-end: every node is the last line of a 4 KiB page, so a load that
 *                 crosses its line also crosses a page (the seed's offset 4093 case).
 *   addressing  how a 4-byte value becomes the next address (see "the extra add"):
 *               auto (default) = direct where possible, else indexed; direct; indexed.
 *   nodes       ring length, 3..256 (0 = default: 4 for l1, 64 for l2).
 *   seed        of the ring order (default 1).
 *
 * The extra add for 4-byte loads.  On x86-64 a 4-byte load cannot hold a pointer,
 * unless the ring lies below 4 GiB: the region is mapped with MAP_32BIT, and then
 * "movl (%rax), %eax" zero-extends into the full next address -- exactly the seed's
 * MOV EAX,[EAX], no add at all ("direct", note indexed_addressing = 0).  If that
 * mapping is refused, or addressing=indexed, the value is an offset from the base and
 * the load is "movl (%rbx,%rax), %eax": still one instruction, but the base+index
 * address costs its extra add inside the address generation (0-1 cycle depending on
 * the core; note indexed_addressing = 1 says it is included, nothing is subtracted).
 * 8-byte loads are direct pointers ("movq (%rax), %rax") unless addressing=indexed.
 * On i386 4-byte loads are direct by nature and 8-byte loads (no 8-byte integer
 * load there) are skipped; other architectures use a portable C chase (indexed).
 *
 * Huge pages: the region is 2 MiB aligned and madvise(MADV_HUGEPAGE)d, so with
 * transparent huge pages the whole ring is one TLB entry and the l2 figure is
 * L2 latency, not a DTLB miss (note thp = 1 when it took).
 *
 * Unit: loads.  One repetition is 1024 dependent loads (16 per asm block); the chase
 * carries on between calls.  Known answers: walking the ring in C visits every node
 * exactly once and returns to the start (one single cycle of `nodes`), and the timed
 * asm chase, run for one repetition from the start of the ring cut short to three
 * nodes, stops exactly where the C walk stops after 1024 steps (one node past the
 * start: a chase that did not load would stay at the start).
 */
#define _GNU_SOURCE
#include "cpulab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char k_unit[] = "loads";

#define LINE 64
#define PAGE 4096
#define HUGE_2M (2u * 1024 * 1024)
#define LOADS_PER_REP 1024
#define MAX_NODES 256

enum mode { DIRECT, INDEXED };

struct ctx {
    unsigned char *base;   /* start of the region (2 MiB aligned) */
    void *map;
    size_t map_len;
    int width, mode, nodes;
    size_t slot;           /* bytes between consecutive nodes */
    uintptr_t start;       /* the first node, in the chase's representation */
    uintptr_t p;           /* where the chase stands between calls */
};

static uint64_t next_u64(uint64_t *s) /* splitmix64: same numbers in every ABI */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The address of a chase value: absolute (direct) or an offset from base (indexed). */
static unsigned char *addr_of(const struct ctx *c, uintptr_t v)
{
    return c->mode == DIRECT ? (unsigned char *)v : c->base + v;
}

/* Store chase value v (an address or an offset, as the chase reads it) at a node. */
static void put_value(const struct ctx *c, unsigned char *at, uint64_t v)
{
    if (c->width == 4) {
        uint32_t v32 = (uint32_t)v;
        memcpy(at, &v32, 4);
    } else {
        memcpy(at, &v, 8);
    }
}

/* One step of the chase in portable C: read `width` bytes (little-endian host). */
static uintptr_t step_c(const struct ctx *c, uintptr_t v)
{
    unsigned char *a = addr_of(c, v);
    if (c->width == 4) {
        uint32_t x;
        memcpy(&x, a, 4);
        return (uintptr_t)x;
    }
    uint64_t x;
    memcpy(&x, a, 8);
    return (uintptr_t)x;
}

/* 1 if the page holding addr is a transparent huge page (smaps AnonHugePages > 0),
 * 0 if not, -1 if /proc/self/smaps cannot tell. */
static int thp_backed(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char buf[256];
    int inside = 0, r = -1;
    double kb;
    while (fgets(buf, sizeof buf, f)) {
        unsigned long long lo, hi;
        if (sscanf(buf, "%llx-%llx ", &lo, &hi) == 2) {
            inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (inside && sscanf(buf, "AnonHugePages: %lf kB", &kb) == 1) {
            r = kb > 0;
            break;
        }
    }
    fclose(f);
    return r;
}

static void *map_region(struct ctx *c, size_t want, int low)
{
    want = (want + HUGE_2M - 1) & ~(size_t)(HUGE_2M - 1); /* whole huge pages */
    c->map_len = want + HUGE_2M;                            /* room to align up */
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#if defined(MAP_32BIT) && defined(__x86_64__)
    if (low)
        flags |= MAP_32BIT;
#else
    (void)low;
#endif
    c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (c->map == MAP_FAILED) {
        c->map = NULL;
        return NULL;
    }
    unsigned char *b = (unsigned char *)(((uintptr_t)c->map + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
#ifdef MADV_HUGEPAGE
    madvise(b, want, MADV_HUGEPAGE); /* harmless if refused: then 4 KiB pages */
#endif
    return b;
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    int64_t offset = k_param_int("offset", 0);
    int64_t width = k_param_int("width", 8);
    const char *level = k_param_str("level", "l1");
    const char *at = k_param_str("at", "line");
    const char *addressing = k_param_str("addressing", "auto");
    uint64_t seed = (uint64_t)k_param_int("seed", 1);
    int l2 = strcmp(level, "l2") == 0, page_end = strcmp(at, "page-end") == 0;

    if (offset < 0 || offset > LINE - 1) {
        k_fail("offset must be 0..63 (the byte inside the line), got %lld; "
               "for a page crossing use at=page-end with offset > 64 - width", (long long)offset);
        return NULL;
    }
    if (width != 4 && width != 8) {
        k_fail("width must be 4 or 8, got %lld", (long long)width);
        return NULL;
    }
    if (!l2 && strcmp(level, "l1") != 0) {
        k_fail("level must be l1 or l2, got '%s'", level);
        return NULL;
    }
    if (!page_end && strcmp(at, "line") != 0) {
        k_fail("at must be line or page-end, got '%s'", at);
        return NULL;
    }
    if (strcmp(addressing, "auto") && strcmp(addressing, "direct") && strcmp(addressing, "indexed")) {
        k_fail("addressing must be auto, direct or indexed, got '%s'", addressing);
        return NULL;
    }
    int64_t nodes = k_param_int("nodes", 0);
    if (nodes == 0)
        nodes = l2 ? 64 : 4; /* 0 = the level's default */
    if (nodes < 3 || nodes > MAX_NODES) { /* k_verify needs three nodes to tell a chase from none */
        k_fail("nodes must be 3..%d, got %lld", MAX_NODES, (long long)nodes);
        return NULL;
    }
#if !defined(__x86_64__) && !defined(__i386__)
    addressing = "indexed"; /* the portable chase */
#endif
#if defined(__i386__)
    if (width == 8) {
        k_skip("8-byte integer loads need x86-64 (i386 has no 8-byte general-register load)");
        return NULL;
    }
#endif
    c->width = (int)width;
    c->nodes = (int)nodes;

    /* Slot k of the ring: l1 = 128 bytes apart (distinct sets, the spill line of a
     * crossing load free); l2 or page-end = one page apart. */
    size_t slot = (l2 || page_end) ? PAGE : 2 * LINE;
    size_t line_in_slot = page_end ? PAGE - LINE : l2 ? 32 * LINE : 0;
    c->slot = slot;
    size_t span = (size_t)nodes * slot + PAGE; /* + the page a crossing spills into */

    int want_direct = strcmp(addressing, "indexed") != 0;
    int need_low = want_direct && width == 4 && sizeof(void *) == 8;
    c->base = map_region(c, span, need_low);
    if (!c->base && need_low && strcmp(addressing, "auto") == 0) {
        need_low = 0;
        c->base = map_region(c, span, 0);
    }
    if (!c->base) {
        k_fail("cannot map %zu bytes", span + HUGE_2M);
        return NULL;
    }
    c->mode = want_direct ? DIRECT : INDEXED;
#if UINTPTR_MAX > 0xffffffffu
    if (c->mode == DIRECT && width == 4 && (uint64_t)(uintptr_t)(c->base + span) > 0xffffffffull) {
        if (strcmp(addressing, "direct") == 0) {
            k_skip("addressing=direct with 4-byte loads needs the ring below 4 GiB (MAP_32BIT refused)");
            return NULL;
        }
        c->mode = INDEXED;
    }
#endif

    /* Ring order: a random single cycle over the slots (Sattolo's algorithm). */
    int order[MAX_NODES];
    for (int i = 0; i < nodes; i++)
        order[i] = i;
    for (int i = (int)nodes - 1; i > 0; i--) {
        int j = (int)((next_u64(&seed) >> 33) % (uint64_t)i); /* 0 <= j < i */
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* order[] as a permutation: slot k's successor is order[k]. */
    memset(c->base, 0, span);
    for (int k = 0; k < nodes; k++) {
        unsigned char *here = c->base + (size_t)k * slot + line_in_slot + (size_t)offset;
        size_t next_off = (size_t)order[k] * slot + line_in_slot + (size_t)offset;
        put_value(c, here, c->mode == DIRECT ? (uint64_t)(uintptr_t)(c->base + next_off) : (uint64_t)next_off);
    }
    size_t first = line_in_slot + (size_t)offset;
    c->start = c->mode == DIRECT ? (uintptr_t)(c->base + first) : (uintptr_t)first;
    c->p = c->start;
    /* corrupt=1 (testing the test): slot 0 points at itself, so the ring is broken. */
    if (k_param_int("corrupt", 0))
        put_value(c, c->base + first, c->start);

    int crosses_line = offset + width > LINE;
    k_note("working_set_bytes", (double)nodes * LINE * (crosses_line ? 2 : 1));
    k_note("nodes", (double)nodes);
    k_note("crosses_line", crosses_line);
    k_note("crosses_page", crosses_line && page_end);
    k_note("indexed_addressing", c->mode == INDEXED);
    k_note("span_bytes", (double)span);
    k_note("thp", thp_backed(c->base)); /* after the memset touched the region */
    return c;
}

/* Known answers.  (1) The C walk from the start visits every node exactly once and is
 * back after `nodes` steps: one single cycle.  (2) The timed asm chase, one repetition
 * (1024 loads) from the start, stops where 1024 C steps stop.  On the whole ring that
 * proves little: 1024 loads are whole laps of the default 4 or 64 nodes, so a chase that
 * never loaded would stop at its start as well.  So (2) runs on the ring cut short to
 * its first three nodes (the third points back at the start until the check is done):
 * 1024 = 3 * 341 + 1 loads stop one node past the start. */
static uintptr_t chase(const struct ctx *c, uintptr_t p, uint64_t reps);

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    unsigned char seen[MAX_NODES] = {0};
    unsigned char *first = addr_of(c, c->start);
    uintptr_t v = c->start;
    for (int n = 0; n < c->nodes; n++) {
        unsigned char *a = addr_of(c, v);
        size_t d = (size_t)(a - first);
        if (a < first || d % c->slot != 0 || d / c->slot >= (size_t)c->nodes) {
            k_fail("step %d: address %p is not a node of the ring", n, (void *)a);
            return 1;
        }
        if (seen[d / c->slot]++) {
            k_fail("node %zu visited twice after %d steps: the ring is not one cycle", d / c->slot, n);
            return 1;
        }
        v = step_c(c, v);
    }
    if (v != c->start) {
        k_fail("after %d loads the chase is not back at the start", c->nodes);
        return 1;
    }
    uintptr_t second = step_c(c, c->start), third = step_c(c, second), fourth = step_c(c, third);
    put_value(c, addr_of(c, third), c->start);
    for (int n = 0; n < LOADS_PER_REP; n++)
        v = step_c(c, v);
    uintptr_t w = chase(c, c->start, 1);
    put_value(c, addr_of(c, third), fourth);
    if (w != v) {
        k_fail("on the ring cut to 3 nodes the timed chase stopped at %p after %d loads, the C walk at %p",
               (void *)addr_of(c, w), LOADS_PER_REP, (void *)addr_of(c, v));
        return 1;
    }
    return 0;
}

/* ---- the timed chase --------------------------------------------------------- */
#define X4(s) s s s s
#define X16(s) X4(X4(s))

static uintptr_t chase(const struct ctx *c, uintptr_t p, uint64_t reps)
{
    const int blocks = LOADS_PER_REP / 16;
    if (K_BROKEN) /* -DCPULAB_BREAK_KAT (cpulab.h): a chase that does not load */
        return p;
#if defined(__x86_64__)
    /* Each line below is one load whose address is the previous load's result: one
     * full load-to-use latency per line (4-5 cycles from L1, ~14 from L2 on current
     * cores).  The counter increment and branch of the for loops run in the shadow. */
    unsigned char *base = c->base;
    if (c->mode == DIRECT && c->width == 8) {
        for (uint64_t r = 0; r < reps; r++)
            for (int i = 0; i < blocks; i++)
                __asm__ __volatile__(X16("movq (%0), %0\n\t") : "+r"(p)::"memory");
    } else if (c->mode == DIRECT) { /* 4 bytes, zero-extended: the ring is below 4 GiB */
        for (uint64_t r = 0; r < reps; r++)
            for (int i = 0; i < blocks; i++)
                __asm__ __volatile__(X16("movl (%q0), %k0\n\t") : "+r"(p)::"memory");
    } else if (c->width == 8) { /* base + index: the add is inside address generation */
        for (uint64_t r = 0; r < reps; r++)
            for (int i = 0; i < blocks; i++)
                __asm__ __volatile__(X16("movq (%1,%0), %0\n\t") : "+r"(p) : "r"(base) : "memory");
    } else {
        for (uint64_t r = 0; r < reps; r++)
            for (int i = 0; i < blocks; i++)
                __asm__ __volatile__(X16("movl (%1,%q0), %k0\n\t") : "+r"(p) : "r"(base) : "memory");
    }
#elif defined(__i386__)
    unsigned char *base = c->base;
    if (c->mode == DIRECT) {
        for (uint64_t r = 0; r < reps; r++)
            for (int i = 0; i < blocks; i++)
                __asm__ __volatile__(X16("movl (%0), %0\n\t") : "+r"(p)::"memory");
    } else {
        for (uint64_t r = 0; r < reps; r++)
            for (int i = 0; i < blocks; i++)
                __asm__ __volatile__(X16("movl (%1,%0), %0\n\t") : "+r"(p) : "r"(base) : "memory");
    }
#else
    /* Portable: the same chase in C (memcpy of `width` bytes; indexed by setup). */
    for (uint64_t r = 0; r < reps; r++)
        for (int i = 0; i < LOADS_PER_REP; i++)
            p = step_c(c, p);
#endif
    return p;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    c->p = chase(c, c->p, reps);
    /* Where the chase stopped, as a byte offset in the region: depends on every load. */
    return (uint64_t)(addr_of(c, c->p) - c->base);
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)reps * LOADS_PER_REP;
}
