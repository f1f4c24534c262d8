/* memlat.c - load-to-use latency versus working-set size (a better lat_mem_rd).
 *
 * Parameters:
 *   size   working set in bytes (default 65536); rounded down to whole lines
 *   line   bytes per node of the chain (default 64, one cache line)
 *   mode   random (default): one random cycle through every line, built with
 *            Sattolo's algorithm, so consecutive loads land on unrelated lines of
 *            unrelated pages: neither the stride nor the next-page prefetchers can
 *            guess the next address, and with 4 KiB pages every load past the TLB
 *            reach also misses the TLB.
 *          sequential: line i points to line i+1 (and the last to the first); the
 *            prefetchers do help, for contrast.
 *          pagestride: one node per 4 KiB page (a random single cycle over the pages),
 *            at line (i mod 64) of page i so the nodes spread over every cache set:
 *            the chase touches size/4096 pages but only size/64 bytes of cache, so
 *            its steps are the TLBs' (entries x 4 KiB) well before the caches' (a
 *            cache of C bytes is outgrown only at size = 64 C).  `line` is ignored.
 *   pages  4k (default): madvise(MADV_NOHUGEPAGE), ordinary 4 KiB pages;
 *          thp: MADV_HUGEPAGE on a 2 MiB-aligned mapping (transparent huge pages);
 *          huge: MAP_HUGETLB explicit huge pages (skipped if none are reserved).
 *   seed   of the permutation (default 1); the same seed gives the same chain in
 *          every variant (the generator uses only 32/64-bit integer arithmetic).
 *   corrupt 1 breaks the chain on purpose, to show that k_verify catches it.
 *
 * Unit: loads.  One repetition is LOADS_PER_REP dependent loads; the chase carries on
 * where the previous call stopped, so a sample is always a chase through the cycle
 * whatever the number of repetitions.  Known-answer test: walking the chain from line
 * 0 visits every line exactly once and comes back to line 0 (one single cycle); in
 * sequential mode each line must point at the next one.
 */
#define _GNU_SOURCE
#include "cpulab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const char k_unit[] = "loads";

#define HUGE_2M (2u * 1024 * 1024)
#define UNROLL 16
#define LOADS_PER_REP (64 * UNROLL) /* 1024 loads: ~2 us in L1, ~100 us in DRAM */

struct ctx {
    char *base;      /* first line of the chain */
    void *map;       /* what to munmap */
    size_t map_len;
    size_t line;     /* bytes of one line: the node's offset step within its page */
    size_t stride;   /* bytes between nodes: line, or a page in pagestride mode */
    uint32_t lines;  /* nodes in the chain */
    int sequential;
    int pagestride;
    void *p;         /* where the chase stands between calls */
};

/* splitmix64: a fixed, portable generator (same numbers on i386 and x86-64). */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform-enough integer in [0, n), n < 2^32 (multiply-shift; bias < n / 2^32). */
static uint32_t below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(((next_u64(s) >> 32) * (uint64_t)n) >> 32);
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

#define PAGE_STRIDE 4096

/* Byte offset of node i: i strides in, plus in pagestride mode a line that rotates
 * through the page so consecutive pages' nodes sit in different cache sets. */
static size_t node_off(const struct ctx *c, uint32_t i)
{
    size_t off = (size_t)i * c->stride;
    return c->pagestride ? off + (i % (c->stride / c->line)) * c->line : off;
}

static long hugetlb_reserved(void)
{
    long n = -1;
    FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r");
    if (f) {
        if (fscanf(f, "%ld", &n) != 1)
            n = -1;
        fclose(f);
    }
    return n;
}

/* Bytes of the mapping at addr backed by transparent huge pages (smaps AnonHugePages),
 * or -1 if /proc/self/smaps cannot tell. */
static double thp_bytes(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char buf[512];
    int inside = 0;
    double kb = -1;
    while (fgets(buf, sizeof buf, f)) {
        unsigned long long lo, hi;
        if (sscanf(buf, "%llx-%llx ", &lo, &hi) == 2) {
            inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (inside && sscanf(buf, "AnonHugePages: %lf kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Map len bytes with the requested kind of pages; NULL (and k_skip/k_fail) if we cannot. */
static char *map_pages(struct ctx *c, size_t len, const char *pages, double *page_bytes)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (strcmp(pages, "4k") == 0) {
        c->map_len = round_up(len, (size_t)pg);
        c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c->map == MAP_FAILED)
            goto nomem;
#ifdef MADV_NOHUGEPAGE
        madvise(c->map, c->map_len, MADV_NOHUGEPAGE); /* fails harmlessly without THP */
#endif
        *page_bytes = (double)pg;
        return c->map;
    }
    if (strcmp(pages, "thp") == 0) {
#ifdef MADV_HUGEPAGE
        /* Over-allocate by 2 MiB so a 2 MiB-aligned run of whole huge pages fits. */
        size_t want = round_up(len, HUGE_2M);
        c->map_len = want + HUGE_2M;
        c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c->map == MAP_FAILED)
            goto nomem;
        char *aligned = (char *)round_up((size_t)(uintptr_t)c->map, HUGE_2M);
        if (madvise(aligned, want, MADV_HUGEPAGE) != 0) {
            k_skip("madvise(MADV_HUGEPAGE) refused: transparent huge pages unavailable "
                   "(see /sys/kernel/mm/transparent_hugepage/enabled)");
            return NULL;
        }
        *page_bytes = -1; /* known only once touched: see k_setup */
        return aligned;
#else
        k_skip("this libc has no MADV_HUGEPAGE");
        return NULL;
#endif
    }
    if (strcmp(pages, "huge") == 0) {
#ifdef MAP_HUGETLB
        c->map_len = round_up(len, HUGE_2M);
        c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (c->map == MAP_FAILED) {
            long n = hugetlb_reserved();
            if (n == 0)
                k_skip("no explicit huge pages reserved (vm.nr_hugepages=0)");
            else
                k_skip("mmap(MAP_HUGETLB) of %zu bytes failed (vm.nr_hugepages=%ld): too few free huge pages",
                       c->map_len, n);
            return NULL;
        }
        *page_bytes = HUGE_2M; /* the default huge page size on x86 */
        return c->map;
#else
        k_skip("this libc has no MAP_HUGETLB");
        return NULL;
#endif
    }
    k_fail("pages must be 4k, thp or huge, got '%s'", pages);
    return NULL;
nomem:
    c->map = NULL;
    k_fail("cannot map %zu bytes", len);
    return NULL;
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    int64_t size = k_param_int("size", 65536);
    int64_t line = k_param_int("line", 64);
    const char *mode = k_param_str("mode", "random");
    const char *pages = k_param_str("pages", "4k");
    uint64_t seed = (uint64_t)k_param_int("seed", 1);

    if (line < (int64_t)sizeof(void *) || line % (int64_t)sizeof(void *) != 0 || line > 1 << 20) {
        k_fail("line must be a multiple of %zu bytes up to 1 MiB, got %lld", sizeof(void *), (long long)line);
        return NULL;
    }
    if (size < line || size / line >= (int64_t)UINT32_MAX) {
        k_fail("size must be from one line (%lld bytes) to 2^32 lines, got %lld", (long long)line,
               (long long)size);
        return NULL;
    }
    if (strcmp(mode, "random") != 0 && strcmp(mode, "sequential") != 0 && strcmp(mode, "pagestride") != 0) {
        k_fail("mode must be random, sequential or pagestride, got '%s'", mode);
        return NULL;
    }
    c->sequential = mode[0] == 's';
    c->pagestride = mode[0] == 'p';
    if (c->pagestride) {
        line = 64;
        if (size < PAGE_STRIDE) {
            k_fail("pagestride needs size of at least one page (%d bytes), got %lld", PAGE_STRIDE, (long long)size);
            return NULL;
        }
    }
    c->line = (size_t)line;
    c->stride = c->pagestride ? PAGE_STRIDE : c->line;
    c->lines = (uint32_t)(size / (int64_t)c->stride);
    size_t bytes = (size_t)c->lines * c->stride;

    double page_bytes = -1;
    c->base = map_pages(c, bytes, pages, &page_bytes);
    if (!c->base)
        return NULL;

    /* next[i] = index of the line that line i points to.  Sattolo's algorithm (Sattolo
     * 1986) turns the identity into a uniformly random permutation with a single
     * cycle: like Fisher-Yates but j < i strictly, so no element stays in place and
     * every swap joins two cycles.  O(lines) swaps; ~0.1 s for 4 Mi lines (256 MiB). */
    uint32_t *next = malloc((size_t)c->lines * sizeof *next);
    if (!next) {
        k_fail("cannot allocate the permutation (%u lines)", c->lines);
        return NULL;
    }
    for (uint32_t i = 0; i < c->lines; i++)
        next[i] = c->sequential ? (i + 1) % c->lines : i;
    if (!c->sequential)
        for (uint32_t i = c->lines - 1; i > 0; i--) {
            /* 0 <= j < i; -DCPULAB_BREAK_KAT (cpulab.h) allows j = i: Fisher-Yates, whose
             * permutation has several cycles, which k_verify must refuse. */
            uint32_t j = below(&seed, i + K_BROKEN);
            uint32_t t = next[i];
            next[i] = next[j];
            next[j] = t;
        }
    /* A fingerprint of the chain (52 bits, exact in the JSON double): equal in every
     * variant for the same size, line, mode and seed. */
    uint64_t id = 0;
    for (uint32_t i = 0; i < c->lines; i++)
        id = k_mix(id, next[i]);
    k_note("chain_id", (double)(id >> 12));
    /* Write the pointers in address order (fast: sequential stores, page faults in order). */
    for (uint32_t i = 0; i < c->lines; i++)
        *(void **)(c->base + node_off(c, i)) = c->base + node_off(c, next[i]);
    free(next);
    c->p = c->base;
    /* corrupt=1 (for testing the test): line 0 skips its successor, so the chain is
     * one line short of a full cycle and k_verify must refuse it. */
    if (k_param_int("corrupt", 0) && c->lines >= 2)
        *(void **)c->base = **(void ***)c->base; /* node 0 is at offset 0 in every mode */

    if (strcmp(pages, "thp") == 0) {
        double thp = thp_bytes(c->base);
        if (thp >= 0)
            k_note("thp_fraction", thp / (double)round_up(bytes, HUGE_2M));
        page_bytes = thp < 0 ? -1.0 : thp >= 0.5 * (double)round_up(bytes, HUGE_2M) ? (double)HUGE_2M : 4096.0;
    }
    k_note("working_set_bytes", (double)bytes);
    k_note("lines", (double)c->lines);
    k_note("line_bytes", (double)c->line);
    if (c->pagestride)
        k_note("pages_touched", (double)c->lines);
    if (page_bytes > 0)
        k_note("page_bytes", page_bytes);
    return c;
}

/* Walk the chain once from line 0: every pointer must land on a line of the region,
 * no line may be visited twice, and after exactly `lines` loads we must be back. */
int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    uint8_t *seen = calloc((size_t)c->lines / 8 + 1, 1);
    if (!seen) {
        k_fail("cannot allocate the visit bitmap");
        return 1;
    }
    char *p = c->base;
    int bad = 0;
    for (uint32_t n = 0; n < c->lines; n++) {
        size_t off = (size_t)(p - c->base);
        uint32_t i = (uint32_t)(off / c->stride);
        if (p < c->base || off / c->stride >= c->lines || off != node_off(c, i)) {
            k_fail("step %u: pointer %p is not a node of the region", n, (void *)p);
            bad = 1;
            break;
        }
        if (seen[i / 8] & (1u << (i % 8))) {
            k_fail("line %u visited twice after %u steps: the chain is not one cycle", i, n);
            bad = 1;
            break;
        }
        seen[i / 8] |= (uint8_t)(1u << (i % 8));
        char *q = *(char **)p;
        if (c->sequential && q != c->base + node_off(c, (i + 1) % c->lines)) {
            k_fail("sequential chain: line %u does not point at line %u", i, (i + 1) % c->lines);
            bad = 1;
            break;
        }
        p = q;
    }
    if (!bad && p != c->base) {
        k_fail("after %u loads the chase is not back at line 0", c->lines);
        bad = 1;
    }
    free(seen);
    return bad;
}

/* The measured loop: each load's address is the value of the previous load, so loads
 * cannot overlap and each costs one full load-to-use latency (4-5 cycles in L1 on
 * current x86; ~100 ns from DRAM).  The 16-fold unrolling leaves one counter increment
 * and one predicted branch per 16 loads; they run in the shadow of the chain. */
#define LOAD p = *(void *volatile *)p;
uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    void *p = c->p;
    for (uint64_t r = 0; r < reps; r++)
        for (int i = 0; i < LOADS_PER_REP / UNROLL; i++) {
            LOAD LOAD LOAD LOAD LOAD LOAD LOAD LOAD
            LOAD LOAD LOAD LOAD LOAD LOAD LOAD LOAD
        }
    c->p = p;
    /* The line we stopped at: depends on every load, same in every variant. */
    return (uint64_t)((char *)p - c->base) / c->stride;
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)reps * LOADS_PER_REP;
}
