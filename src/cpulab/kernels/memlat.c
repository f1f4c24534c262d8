/* memlat.c - load-to-use latency versus working-set size (a better lat_mem_rd).
 *
 * Parameters:
 *   size   working set in bytes (default 65536); rounded down to whole lines
 *   line   bytes per node of the chain (default 64, one cache line)
 *   mode   random (default): the pages in one random order, then laps through them in
 *            that order, one line of each page per lap (lmbench's lat_mem_rd -t order):
 *            consecutive loads land on unrelated pages, so neither the stride nor the
 *            next-page prefetchers can guess the next address; every page comes back
 *            exactly one lap later, never sooner, so past a TLB's reach every load
 *            misses it (a random order over lines brings some pages back early); and
 *            a line's 128-byte buddy comes half a cycle later, so the adjacent-line
 *            prefetcher's fetch is gone by then.  The same order as the reference
 *            removes one difference from it (docs/seeds.md, seed 003).
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
 *   colour any (default): the pages the kernel hands out, whatever their physical frames.
 *          report: also note how the chase's pages spread over the page colours of a
 *            cache of colour_cache_bytes with colour_ways ways (colours = bytes / ways /
 *            4096: the pages whose frames agree modulo that compete for the same sets).
 *          balanced: map twice the pages needed (4 or 8 times where a colour runs
 *            short: the frames handed out can be skewed), read their frames, chase a
 *            subset with equal pages per colour (round robin over the colours), so no set of a
 *            physically indexed cache is oversubscribed before the cache is full, and
 *            give the other pages back.
 *            Where the environment names CPULAB_SHARED_PAGES (a directory on tmpfs, one
 *            per run), the first process of a point keeps its pages and chain there and
 *            the run's later ones map them: found once per run, not once per process
 *            (1.0-1.3 s of a 600 MiB chase's set-up on a Xeon guest, model 167).  The
 *            random mode's order is kept there too, whatever the colour.
 *          Frames come from /proc/self/pagemap, which shows them only to root
 *          (CAP_SYS_ADMIN); otherwise colour_known=0 is noted and balanced is skipped.
 *          report and balanced need pages=4k.  In a VM the frames are guest-physical.
 *   cache  none (default), L1d, L2 or L3: that cache of the CPU the kernel runs on, as
 *          sysfs describes it where it runs (so on a cluster each machine reads its
 *          own): the cache whose colours report and balanced count, in place of
 *          colour_cache_bytes and colour_ways.
 *   fraction  with cache: the working set is this percentage of the cache's size,
 *          rounded down to whole pages, in place of size (0, the default: size).
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

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

const char k_unit[] = "loads";

#define HUGE_2M (2u * 1024 * 1024)
#define UNROLL 16
#define LOADS_PER_REP (64 * UNROLL) /* 1024 loads: ~2 us in L1, ~100 us in DRAM */
/* k_verify walks the chain as this many stretches at once: their loads overlap, where one
 * walk of a 600 MiB chain's line table waits out ~10 M misses in turn (1.8 s of a 2.3 s
 * set-up on a Xeon guest, model 167; 0.16 s with 16 stretches). */
#define WALKS 16

struct ctx {
    char *base;      /* first line of the chain */
    uint32_t *page_at; /* balanced colour: logical page L of the chain is page page_at[L] of
                        * base; NULL: logical and mapped pages are the same */
    int32_t *slot_of;  /* inverse of page_at (-1: a mapped page the chase does not use) */
    size_t mapped_pages;
    void *map;       /* what to munmap */
    size_t map_len;
    size_t line;     /* bytes of one line: the node's offset step within its page */
    size_t stride;   /* bytes between nodes: line, or a page in pagestride mode */
    uint32_t lines;  /* nodes in the chain */
    int sequential;
    int pagestride;
    int buddies;     /* random mode: line 2k+1 comes lines/2 loads after 2k (whole pages) */
    void *p;         /* where the chase stands between calls */
    uint32_t walks;  /* stretches k_verify walks: walk t starts at line start[t], the line */
    uint32_t start[WALKS]; /* the construction put at step t * lines / walks (1: from line 0) */
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

/* next[] becomes a uniformly random permutation of 0..n-1 with a single cycle (next[i]:
 * the successor of i), by Sattolo's algorithm (Sattolo 1986): like Fisher-Yates but
 * j < i strictly, so no element stays in place and every swap joins two cycles.  O(n);
 * ~0.1 s for 4 Mi lines (256 MiB). */
static void random_cycle(uint32_t *next, uint32_t n, uint64_t *seed)
{
    for (uint32_t i = 0; i < n; i++)
        next[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        /* 0 <= j < i; -DCPULAB_BREAK_KAT (cpulab.h) allows j = i: Fisher-Yates, whose
         * permutation has several cycles, which k_verify must refuse. */
        uint32_t j = below(seed, i + K_BROKEN);
        uint32_t t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
}

static uint32_t bitrev(uint32_t x, uint32_t bits)
{
    uint32_t r = 0;
    for (uint32_t b = 0; b < bits; b++)
        r |= ((x >> b) & 1u) << (bits - 1 - b);
    return r;
}

/* The random mode's cycle through n lines of lpp (a power of two) lines a page, the last
 * page possibly partial: a random order of the pages, then lpp laps
 * through the pages in that order, taking in the i-th page of the order on lap j its
 * line bitrev((i + j) mod lpp), skipped where a partial page has no such line.  Each
 * line comes once (page i's offsets over the laps are all of them), each page once a
 * lap, and line 2k+1 (bit reversal: offset + lpp/2) exactly lpp/2 laps after line 2k
 * of its page.  On a Zen 4 guest this order read within 1% of lmbench at 512 KiB to
 * 2 MiB, where in the same half hour a random cycle over lines read 26% below at 512
 * KiB (bench/lmbench_agreement.py; later both agreed there).  The lines at steps
 * t * n / walks go to start[t], where k_verify's walks begin.  Returns 0 when out of
 * memory. */
static int page_cycle(uint32_t *next, uint32_t n, uint32_t lpp, uint64_t *seed, uint32_t *start, uint32_t walks)
{
    uint32_t pages = (n + lpp - 1) / lpp, bits = 0, k = 0;
    while ((1u << bits) < lpp)
        bits++;
    uint32_t *order = malloc((size_t)pages * sizeof *order), *seq = malloc((size_t)n * sizeof *seq);
    if (!order || !seq) {
        free(order);
        free(seq);
        return 0;
    }
    random_cycle(order, pages, seed); /* a permutation of the pages, read as their order */
    for (uint32_t j = 0; j < lpp; j++)
        for (uint32_t i = 0; i < pages; i++) {
            uint32_t line = order[i] * lpp + bitrev((i + j) % lpp, bits);
            if (line < n)
                seq[k++] = line;
        }
    /* -DCPULAB_BREAK_KAT (cpulab.h): the last line points at itself instead of the
     * first, so the walk from line 0 comes back to a line twice, which k_verify refuses. */
    for (uint32_t i = 0; i < n; i++)
        next[seq[i]] = seq[i + 1 < n ? i + 1 : K_BROKEN ? n - 1 : 0];
    for (uint32_t t = 0; t < walks; t++)
        start[t] = seq[(uint64_t)t * n / walks];
    free(order);
    free(seq);
    return 1;
}

/* The run's directory for what its processes share (CPULAB_SHARED_PAGES, named by the
 * runner), or NULL: none, or a build broken on purpose (K_BROKEN), whose chains no other
 * process may inherit. */
static const char *shared_dir(void)
{
    const char *dir = getenv("CPULAB_SHARED_PAGES");
    return dir && *dir && !K_BROKEN ? dir : NULL;
}

/* File `name` written as a then b, whole or not at all (a temporary renamed: a reader sees
 * it complete, and a concurrent writer writes the same). */
static void keep_whole(const char *name, const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%d", name, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return;
    int whole = fwrite(a, 1, a_bytes, f) == a_bytes && fwrite(b, 1, b_bytes, f) == b_bytes;
    if (fclose(f) == 0 && whole)
        rename(tmp, name);
    else
        unlink(tmp);
}

/* A fingerprint of the chain next[] (52 bits, exact in the JSON double): equal in every
 * variant for the same size, line, mode and seed. */
static uint64_t chain_id(const uint32_t *next, uint32_t n)
{
    uint64_t id = 0;
    for (uint32_t i = 0; i < n; i++)
        id = k_mix(id, next[i]);
    return id;
}

/* page_cycle's order and its chain_id, made once per run: every process of a point chases
 * the same order (on pages of its own), so in the run's shared directory the first keeps
 * it and the others read it (0.13-0.3 s of a 600 MiB chase's set-up, against ~10 ms to
 * read its 39 MB; the id, kept too, took 23 ms more). */
static int kept_page_cycle(uint32_t *next, uint32_t n, uint32_t lpp, uint64_t seed, uint32_t *start, uint32_t walks,
                           uint64_t *id)
{
    const char *dir = shared_dir();
    char name[4096];
    struct {
        uint64_t id;
        uint32_t start[WALKS];
    } head = {0, {0}};
    FILE *f = NULL;
    if (dir) {
        snprintf(name, sizeof name, "%s/order-%u-%u-%llu-%u", dir, n, lpp, (unsigned long long)seed, walks);
        f = fopen(name, "rb");
    }
    int whole = f && fread(&head, sizeof head, 1, f) == 1 && fread(next, sizeof *next, n, f) == n;
    if (f)
        fclose(f);
    if (!whole) { /* made here: kept for the run's later processes where there is a directory */
        if (!page_cycle(next, n, lpp, &seed, head.start, walks))
            return 0;
        head.id = chain_id(next, n);
        if (dir)
            keep_whole(name, &head, sizeof head, next, n * sizeof *next);
    }
    memcpy(start, head.start, walks * sizeof *start);
    *id = head.id;
    return 1;
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

#define PAGE_STRIDE 4096

/* Byte offset of node i: i strides in, plus in pagestride mode a line that rotates
 * through the page so consecutive pages' nodes sit in different cache sets. */
static inline size_t node_off(const struct ctx *c, uint32_t i)
{
    size_t off = (size_t)i * c->stride;
    return c->pagestride ? off + (i % (c->stride / c->line)) * c->line : off;
}

/* Address of node i: its logical offset, moved to the mapped page chosen for its logical
 * page when the pages were picked by colour (one lookup per node, in setup only).  Inline:
 * as a call it took 8% of a 600 MiB chase's set-up (313 -> 288 ms, Xeon guest, model 167). */
static inline char *node_addr(const struct ctx *c, uint32_t i)
{
    size_t off = node_off(c, i);
    if (!c->page_at)
        return c->base + off;
    return c->base + (size_t)c->page_at[off / PAGE_STRIDE] * PAGE_STRIDE + off % PAGE_STRIDE;
}

/* Logical offset of address p, or (size_t)-1 if p is not on a page of the chase. */
static size_t logical_off(const struct ctx *c, const char *p)
{
    if (p < c->base)
        return (size_t)-1;
    size_t off = (size_t)(p - c->base);
    if (!c->page_at)
        return off;
    size_t m = off / PAGE_STRIDE;
    if (m >= c->mapped_pages || c->slot_of[m] < 0)
        return (size_t)-1;
    return (size_t)c->slot_of[m] * PAGE_STRIDE + off % PAGE_STRIDE;
}

/* One value from a sysfs file: 1 when fmt matched. */
static int scan_file(const char *dir, const char *file, const char *fmt, ...)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vfscanf(f, fmt, ap);
    va_end(ap);
    fclose(f);
    return n > 0;
}

/* Size and ways of the running CPU's cache named L1d, L2 or L3, from sysfs (index*: level,
 * type, size as "512K", ways_of_associativity).  Returns 0 when sysfs does not describe it. */
static int os_cache(const char *name, int64_t *bytes, int64_t *ways)
{
    int cpu = sched_getcpu();
    for (int i = 0;; i++) {
        char dir[96], type[32] = "", unit = 0;
        int level = 0;
        long long size = 0, w = 0;
        snprintf(dir, sizeof dir, "/sys/devices/system/cpu/cpu%d/cache/index%d", cpu < 0 ? 0 : cpu, i);
        if (!scan_file(dir, "level", "%d", &level))
            return 0; /* past the last index directory */
        if (level == name[1] - '0' && scan_file(dir, "type", "%31s", type) && strcmp(type, "Instruction") != 0 &&
            scan_file(dir, "size", "%lld%c", &size, &unit) && scan_file(dir, "ways_of_associativity", "%lld", &w)) {
            *bytes = size * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
            *ways = w;
            return *bytes > 0 && w > 0;
        }
    }
}

/* Physical frame numbers of n 4 KiB pages from addr (already touched), from
 * /proc/self/pagemap (bits 0-54 of each 8-byte entry; bit 63: present).  Of the pages the
 * chase may use (slot_of[i] >= 0; each page without slot_of): 1 when every one is present
 * with a non-zero frame; 0 when the kernel hides the frames (present with frame 0: not
 * root) or the file cannot be read; -1 when one is not present (a page that compaction
 * is migrating reads so for a moment: a balanced point run as root once said "needs root"). */
static int read_frames(const char *addr, size_t n, const int32_t *slot_of, uint64_t *pfn)
{
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f)
        return 0;
    int ok = fseeko(f, (off_t)((uintptr_t)addr / PAGE_STRIDE * 8), SEEK_SET) == 0 &&
             fread(pfn, 8, n, f) == n;
    fclose(f);
    int hidden = 0, missing = 0;
    for (size_t i = 0; ok && i < n; i++) {
        int used = !slot_of || slot_of[i] >= 0, present = (int)(pfn[i] >> 63);
        pfn[i] &= (1ull << 55) - 1;
        missing |= used && !present;
        hidden |= used && present && !pfn[i];
    }
    return !ok || hidden ? 0 : missing ? -1 : 1;
}

/* Fault in again each page the chase may use: written where this process made the pages
 * (before the chain is), read where they are a kept pool's (mapped read-only, chained). */
static void touch_pages(const struct ctx *c, int write)
{
    for (size_t m = 0; m < c->mapped_pages; m++)
        if (!c->slot_of || c->slot_of[m] >= 0) {
            if (write)
                c->base[m * PAGE_STRIDE] = 1;
            else
                (void)*(volatile const char *)(c->base + m * PAGE_STRIDE);
        }
}

/* Pages per colour of the n frames, noted as colours, colour_pages (their sum),
 * colour_pages_max, colour_pages_min and colour_imbalance (max / mean); returns max - min
 * (0 where it cannot count). */
static uint32_t note_colours(const uint64_t *pfn, const uint32_t *which, size_t n, uint32_t colours)
{
    uint32_t *count = calloc(colours, sizeof *count);
    if (!count)
        return 0;
    for (size_t i = 0; i < n; i++)
        count[pfn[which ? which[i] : i] % colours]++;
    uint32_t hi = 0, lo = UINT32_MAX;
    uint64_t sum = 0;
    for (uint32_t k = 0; k < colours; k++) {
        hi = count[k] > hi ? count[k] : hi;
        lo = count[k] < lo ? count[k] : lo;
        sum += count[k];
    }
    free(count);
    k_note("colours", colours);
    k_note("colour_pages", (double)sum);
    k_note("colour_pages_max", hi);
    k_note("colour_pages_min", lo);
    k_note("colour_imbalance", hi / ((double)sum / colours));
    return hi - lo;
}

/* Choose the chase's pages among the mapped ones, round robin over the colours: each
 * pass takes the next unused page of every colour that still has one, so the colours'
 * page counts differ by at most one until a colour runs out (then k_setup maps twice as
 * many and picks again).  Fills page_at and slot_of; 0 (after k_fail) if out of memory. */
static int pick_balanced(struct ctx *c, const uint64_t *pfn, size_t need, uint32_t colours)
{
    uint32_t *start = calloc((size_t)colours + 1, sizeof *start); /* first page of colour k */
    uint32_t *fill = calloc(colours, sizeof *fill);                /* pages of k handed out */
    uint32_t *live = malloc(colours * sizeof *live);               /* colours with pages left */
    uint32_t *by_colour = malloc(c->mapped_pages * sizeof *by_colour);
    c->page_at = malloc(need * sizeof *c->page_at);
    c->slot_of = malloc(c->mapped_pages * sizeof *c->slot_of);
    int ok = start && fill && live && by_colour && c->page_at && c->slot_of;
    if (!ok) {
        k_fail("cannot allocate the page-colour tables");
    } else {
        /* The mapped pages grouped by colour, in address order (a counting sort). */
        for (size_t m = 0; m < c->mapped_pages; m++)
            start[pfn[m] % colours + 1]++;
        for (uint32_t k = 0; k < colours; k++)
            start[k + 1] += start[k];
        for (size_t m = 0; m < c->mapped_pages; m++) {
            uint32_t k = (uint32_t)(pfn[m] % colours);
            by_colour[start[k] + fill[k]++] = (uint32_t)m;
            c->slot_of[m] = -1;
        }
        memset(fill, 0, colours * sizeof *fill);
        uint32_t nlive = 0;
        for (uint32_t k = 0; k < colours; k++)
            if (start[k + 1] > start[k])
                live[nlive++] = k;
        size_t L = 0;
        while (L < need) { /* one pass; nlive > 0 while L < need since mapped >= need */
            uint32_t kept = 0;
            for (uint32_t j = 0; j < nlive && L < need; j++) {
                uint32_t k = live[j];
                uint32_t m = by_colour[start[k] + fill[k]++];
                c->page_at[L] = m;
                c->slot_of[m] = (int32_t)L++;
                if (start[k] + fill[k] < start[k + 1])
                    live[kept++] = k;
            }
            nlive = kept;
        }
    }
    free(start);
    free(fill);
    free(live);
    free(by_colour);
    return ok;
}

/* madvise `advice` on each stretch of mapped pages that the chase uses (picked 1) or does
 * not (picked 0), by slot_of: one call per stretch (2-14k of them at page-colour's L3 points). */
static void advise_stretches(const struct ctx *c, int picked, int advice)
{
    size_t start = 0; /* of the current stretch */
    for (size_t m = 0; m <= c->mapped_pages; m++)
        if (m == c->mapped_pages || (c->slot_of[m] >= 0) != picked) {
            if (m > start)
                madvise(c->base + start * PAGE_STRIDE, (m - start) * PAGE_STRIDE, advice);
            start = m + 1;
        }
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

/* A point's colour-balanced pages kept for the run's later processes (CPULAB_SHARED_PAGES):
 * NAME holds the mapping (twice the pages needed, as the first process mapped them) with
 * its chain written, NAME.head what a later process needs besides (struct pool_head, then
 * page_at), NAME.lock serialises the first process's making against the others' reading.
 * The chain's pointers are absolute, so a later process maps NAME where the first did
 * (MAP_FIXED_NOREPLACE, at an address far from where Linux puts mappings); where that
 * address is taken it makes its own pages, as without the pool. */
struct pool_head {
    uint64_t magic, addr, map_len, lines, need, chain_id;
    uint32_t walks, buddies, start[WALKS];
};
struct pool {
    int lock, data;
    char name[4096];
};
#define POOL_MAGIC 0x316c6f6f70636c6dull
#define POOL_ADDRESS 0x200000000000ull /* 32 TiB: below the libraries and stack, above the heap */

/* Open and lock the pool of this point; 0 where there is none to keep (no shared
 * directory, or a chain broken on purpose, which no other process may inherit). */
static int pool_open(struct pool *pl, uint32_t colours, uint32_t lines, size_t line, const char *mode,
                     uint64_t seed)
{
    const char *dir = shared_dir();
    pl->lock = pl->data = -1;
    if (!dir || k_param_int("corrupt", 0))
        return 0;
    char lock[4200];
    snprintf(pl->name, sizeof pl->name, "%s/balanced-%u-%u-%zu-%s-%llu", dir, colours, lines, line, mode,
             (unsigned long long)seed);
    snprintf(lock, sizeof lock, "%s.lock", pl->name);
    if ((pl->lock = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
        return 0;
    if (flock(pl->lock, LOCK_EX) != 0) {
        close(pl->lock);
        return pl->lock = -1, 0;
    }
    return 1;
}

/* Whether the pool's file is on tmpfs, where a hole punched leaves the other pages where
 * they are.  On ext4 a later process once found the picked pages on other frames (26
 * against 21 pages a colour); likely a large folio that a hole split was dropped whole,
 * written back, and read again elsewhere. */
static int pool_on_tmpfs(const struct pool *pl)
{
    struct statfs fs;
    return fstatfs(pl->data, &fs) == 0 && fs.f_type == 0x01021994; /* TMPFS_MAGIC */
}

static void pool_close(struct pool *pl)
{
    if (pl->data >= 0)
        close(pl->data);
    if (pl->lock >= 0)
        close(pl->lock); /* and with it the lock */
    pl->lock = pl->data = -1;
}

/* The pool made by an earlier process, mapped as it was: 1 with c's chain, page tables and
 * walks set (and chain_id), 0 where there is none yet or it cannot be mapped there. */
static int pool_reuse(struct pool *pl, struct ctx *c, size_t need, uint64_t *chain_id)
{
    char head_name[4200];
    struct pool_head h;
    snprintf(head_name, sizeof head_name, "%s.head", pl->name);
    FILE *f = fopen(head_name, "rb");
    if (!f)
        return 0;
    int ok = fread(&h, sizeof h, 1, f) == 1 && h.magic == POOL_MAGIC && h.lines == c->lines && h.need == need;
    c->mapped_pages = ok ? h.map_len / PAGE_STRIDE : 0;
    c->page_at = ok ? malloc(need * sizeof *c->page_at) : NULL;
    c->slot_of = ok ? malloc(c->mapped_pages * sizeof *c->slot_of) : NULL;
    ok = ok && c->page_at && c->slot_of && fread(c->page_at, sizeof *c->page_at, need, f) == need;
    fclose(f);
    int fd = ok ? open(pl->name, O_RDONLY | O_CLOEXEC) : -1;
    void *m = fd < 0 ? MAP_FAILED
                     : mmap((void *)(uintptr_t)h.addr, h.map_len, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (fd >= 0)
        close(fd);
    if (m != (void *)(uintptr_t)h.addr) {
        if (m != MAP_FAILED)
            munmap(m, h.map_len); /* an older kernel took the address as a hint */
        free(c->page_at);
        free(c->slot_of);
        c->page_at = NULL, c->slot_of = NULL, c->mapped_pages = 0;
        return 0;
    }
    c->map = c->base = m;
    c->map_len = h.map_len;
    for (size_t p = 0; p < c->mapped_pages; p++)
        c->slot_of[p] = -1;
    for (size_t L = 0; L < need; L++)
        c->slot_of[c->page_at[L]] = (int32_t)L;
    c->walks = h.walks;
    c->buddies = (int)h.buddies;
    memcpy(c->start, h.start, sizeof c->start);
    *chain_id = h.chain_id;
#ifdef MADV_POPULATE_READ /* the pages are there: only this process's page tables to fill */
    advise_stretches(c, 1, MADV_POPULATE_READ); /* not the released ones: a read there would refill them */
#endif
    return 1;
}

/* Twice the pages needed, mapped from the pool's file for the first process to fill;
 * NULL where tmpfs has no room for them (allocated here: a page that cannot be had
 * later would be a SIGBUS). */
static char *pool_map(struct pool *pl, struct ctx *c, size_t len)
{
    pl->data = open(pl->name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (pl->data < 0)
        return NULL;
    if (posix_fallocate(pl->data, 0, (off_t)len) != 0) {
        unlink(pl->name);
        return NULL;
    }
    c->map_len = len;
    c->map = mmap((void *)(uintptr_t)POOL_ADDRESS, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                  pl->data, 0);
    if (c->map == MAP_FAILED)
        c->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, pl->data, 0);
    return c->map == MAP_FAILED ? (c->map = NULL) : c->map;
}

/* What a later process needs besides the pages. */
static void pool_keep(struct pool *pl, const struct ctx *c, size_t need, uint64_t chain_id)
{
    char head_name[4200];
    struct pool_head h = {POOL_MAGIC, (uint64_t)(uintptr_t)c->map, c->map_len, c->lines, need, chain_id,
                          c->walks, (uint32_t)c->buddies, {0}};
    memcpy(h.start, c->start, sizeof h.start);
    snprintf(head_name, sizeof head_name, "%s.head", pl->name);
    keep_whole(head_name, &h, sizeof h, c->page_at, need * sizeof *c->page_at);
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
    const char *colour = k_param_str("colour", "any");
    int64_t colour_bytes = k_param_int("colour_cache_bytes", 0);
    int64_t colour_ways = k_param_int("colour_ways", 0);
    const char *cache = k_param_str("cache", "none");
    int64_t fraction = k_param_int("fraction", 0);

    if (strcmp(cache, "none") != 0) {
        if (strcmp(cache, "L1d") != 0 && strcmp(cache, "L2") != 0 && strcmp(cache, "L3") != 0) {
            k_fail("cache must be none, L1d, L2 or L3, got '%s'", cache);
            return NULL;
        }
        if (colour_bytes || colour_ways) {
            k_fail("cache=%s names the colour cache: give it or colour_cache_bytes and colour_ways, not both", cache);
            return NULL;
        }
        if (!os_cache(cache, &colour_bytes, &colour_ways)) {
            k_skip("sysfs does not describe this CPU's %s cache (size and ways)", cache);
            return NULL;
        }
        k_note("cache_bytes", (double)colour_bytes);
        k_note("cache_ways", (double)colour_ways);
        if (fraction > 0)
            size = colour_bytes * fraction / 100 / PAGE_STRIDE * PAGE_STRIDE;
    } else if (fraction) {
        k_fail("fraction needs cache (L1d, L2 or L3), got fraction=%lld", (long long)fraction);
        return NULL;
    }
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
    if (strcmp(colour, "any") != 0 && strcmp(colour, "report") != 0 && strcmp(colour, "balanced") != 0) {
        k_fail("colour must be any, report or balanced, got '%s'", colour);
        return NULL;
    }
    int balanced = colour[0] == 'b';
    uint32_t colours = 0;
    if (colour[0] != 'a') {
        if (strcmp(pages, "4k") != 0) {
            k_fail("colour=%s needs pages=4k, got '%s'", colour, pages);
            return NULL;
        }
        if (colour_bytes < 0 || colour_ways < 0 || (colour_bytes > 0) != (colour_ways > 0)) {
            k_fail("colour_cache_bytes and colour_ways must both be positive (or both 0), got %lld and %lld",
                   (long long)colour_bytes, (long long)colour_ways);
            return NULL;
        }
        if (colour_bytes > 0)
            colours = (uint32_t)(colour_bytes / colour_ways / PAGE_STRIDE);
        colours = colours ? colours : 1; /* a way smaller than a page: one colour */
        if (balanced && colour_bytes == 0) {
            k_fail("colour=balanced needs colour_cache_bytes and colour_ways (the cache to balance for)");
            return NULL;
        }
    }
    c->line = (size_t)line;
    c->stride = c->pagestride ? PAGE_STRIDE : c->line;
    c->lines = (uint32_t)(size / (int64_t)c->stride);
    size_t bytes = (size_t)c->lines * c->stride;

    double page_bytes = -1;
    /* Pages the chain spans; balanced maps twice as many to choose from. */
    size_t need = round_up(bytes, PAGE_STRIDE) / PAGE_STRIDE;
    struct pool pool = {-1, -1, ""};
    uint64_t id = 0; /* the chain's fingerprint */
    int reused = balanced && pool_open(&pool, colours, c->lines, c->line, mode, seed) && pool_reuse(&pool, c, need, &id);
    int wide = 2; /* balanced: pages mapped to choose from, per page needed */
mapping:
    if (reused || (pool.lock >= 0 && (c->base = pool_map(&pool, c, wide * need * PAGE_STRIDE))))
        page_bytes = PAGE_STRIDE; /* the pool's: tmpfs pages */
    else {
        pool_close(&pool); /* no pool: this process's own pages */
        c->base = map_pages(c, (balanced ? wide : 1) * need * PAGE_STRIDE, pages, &page_bytes);
    }
    if (!c->base)
        return NULL;
    if (colour[0] != 'a') {
        /* Touch every page so it has a frame, then read the frames (one 8-byte pagemap
         * entry per page: ~1 ms per 100 MiB). */
        c->mapped_pages = c->map_len / PAGE_STRIDE;
        int populated = reused;
#ifdef MADV_POPULATE_WRITE /* one call for every fault (Linux 5.14+): 10-15% of this set-up at L3 sizes */
        populated = populated || madvise(c->base, c->map_len, MADV_POPULATE_WRITE) == 0;
#endif
        if (!populated)
            touch_pages(c, 1);
        uint64_t *pfn = malloc(c->mapped_pages * sizeof *pfn);
        if (!pfn) {
            k_fail("cannot allocate the frame table (%zu pages)", c->mapped_pages);
            return NULL;
        }
        int known = read_frames(c->base, c->mapped_pages, c->slot_of, pfn);
        for (int again = 0; known < 0 && again < 3; again++) {
            touch_pages(c, !reused);
            known = read_frames(c->base, c->mapped_pages, c->slot_of, pfn);
        }
        if (known < 0) {
            free(pfn);
            k_fail("pages of the chase were still not present after touching them three times (pagemap)");
            return NULL;
        }
        k_note("colour_known", known);
        if (!known && balanced) {
            free(pfn);
            k_skip("page colour needs root (/proc/self/pagemap PFNs)");
            return NULL;
        }
        if (known && balanced && !reused) {
            if (!pick_balanced(c, pfn, need, colours)) {
                free(pfn);
                return NULL;
            }
            /* The pages not picked go back now, not at the run's end: half of what the
             * pools of page-colour's points hold (1.7 of 3.4 GiB at a 480 MiB L3). */
            if (pool.lock < 0)
                advise_stretches(c, 0, MADV_DONTNEED);
            else if (pool_on_tmpfs(&pool))
                advise_stretches(c, 0, MADV_REMOVE);
        }
        uint32_t spread = known && colour_bytes > 0 ? note_colours(pfn, c->page_at, need, colours) : 0;
        free(pfn);
        if (balanced && spread > 1 && wide < 8) {
            /* A colour ran short: the frames handed out were skewed (a suite beside a busy
             * loop left 27 against 17 pages a colour from twice the pages needed), or a
             * kept pool's pages have moved since.  Picked again from twice as many, in a
             * new file (a process that maps the old one keeps its pages). */
            munmap(c->map, c->map_len);
            free(c->page_at);
            free(c->slot_of);
            c->page_at = NULL, c->slot_of = NULL, c->map = c->base = NULL, c->buddies = 0;
            if (pool.lock >= 0) {
                unlink(pool.name);
                if (pool.data >= 0)
                    close(pool.data);
                pool.data = -1;
            }
            reused = 0;
            wide *= 2;
            goto mapping;
        }
    }

    if (reused) {
        k_note("chain_id", (double)(id >> 12));
        goto chained;
    }
    /* next[i] = index of the line that line i points to. */
    uint32_t *next = malloc((size_t)c->lines * sizeof *next);
    if (!next) {
        k_fail("cannot allocate the permutation (%u lines)", c->lines);
        return NULL;
    }
    /* The page order knows where the stretches of k_verify's walks start; the other orders
     * are walked in one stretch from line 0. */
    int paged = !c->sequential && !c->pagestride && c->lines >= 4;
    c->walks = paged && c->lines >= 64 * WALKS ? WALKS : 1;
    c->start[0] = 0;
    if (c->sequential || c->pagestride || c->lines < 4) {
        if (c->sequential)
            for (uint32_t i = 0; i < c->lines; i++)
                next[i] = (i + 1) % c->lines;
        else
            random_cycle(next, c->lines, &seed);
        id = chain_id(next, c->lines);
    } else if (!kept_page_cycle(next, c->lines, PAGE_STRIDE % c->line ? 1 : PAGE_STRIDE / c->line, seed, c->start,
                                c->walks, &id)) {
        free(next);
        k_fail("cannot allocate the page order (%u lines)", c->lines);
        return NULL;
    } else /* a partial page or odd lines shift some buddies' laps: checked on whole pages of pairs */
        c->buddies = c->line * 2 <= PAGE_STRIDE && c->lines % (PAGE_STRIDE / c->line) == 0;
    k_note("chain_id", (double)(id >> 12));
    /* Write the pointers in address order (fast: sequential stores, page faults in order). */
    for (uint32_t i = 0; i < c->lines; i++)
        *(void **)node_addr(c, i) = node_addr(c, next[i]);
    free(next);
    if (pool.lock >= 0)
        pool_keep(&pool, c, need, id);
chained:
    pool_close(&pool);
    c->p = node_addr(c, 0);
    /* corrupt=1 (for testing the test): line 0 skips its successor, so the chain is
     * one line short of a full cycle and k_verify must refuse it. */
    if (k_param_int("corrupt", 0) && c->lines >= 2)
        *(void **)c->p = **(void ***)c->p;

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

/* The chain as it stands in memory, read in line order (sequential loads, ~60 ms per
 * 600 MiB): next[i] = the line line i points to.  Every pointer must land on a line of
 * the region; 1 when one does not (said with k_fail). */
static int read_chain(const struct ctx *c, uint32_t *next)
{
    for (uint32_t i = 0; i < c->lines; i++) {
        char *q = *(char **)node_addr(c, i);
        size_t off = logical_off(c, q);
        uint32_t j = (uint32_t)(off / c->stride);
        if (off == (size_t)-1 || off / c->stride >= c->lines || off != node_off(c, j)) {
            k_fail("line %u: pointer %p is not a node of the region", i, (void *)q);
            return 1;
        }
        if (c->sequential && j != (i + 1) % c->lines) {
            k_fail("sequential chain: line %u does not point at line %u", i, (i + 1) % c->lines);
            return 1;
        }
        next[i] = j;
    }
    return 0;
}

/* What k_verify has seen: each line (a bit), each buddy pair's step of its first visit,
 * each page's first step modulo the pages, and the gaps they are held to. */
struct visits {
    uint8_t *seen;
    uint32_t *pair_at, *phase;
    uint32_t half, lpp, pages;
};

/* One visit of k_verify: line i at step n of the cycle.  No line may be visited twice; in
 * the random mode (whole pages) each line's buddy must be visited exactly lines/2 steps
 * from it, and all visits of a page share one step modulo the pages (its lpp visits then
 * fall one a lap).  Visits may come in any order, so these hold for walks in stretches.
 * 1 when one fails (said with k_fail). */
static int visit(const struct ctx *c, struct visits *v, uint32_t i, uint32_t n)
{
    uint8_t *seen = v->seen;
    uint32_t *pair_at = v->pair_at, *phase = v->phase, half = v->half, lpp = v->lpp, pages = v->pages;
    if (seen[i / 8] & (1u << (i % 8))) {
        k_fail("line %u visited twice (at step %u): the chain is not one cycle", i, n);
        return 1;
    }
    seen[i / 8] |= (uint8_t)(1u << (i % 8));
    if (!c->buddies || i >= 2 * half)
        return 0;
    uint32_t buddy = i ^ 1u;
    if (!(seen[buddy / 8] & (1u << (buddy % 8))))
        pair_at[i / 2] = n;
    else if (pair_at[i / 2] + half != n && n + half != pair_at[i / 2]) {
        k_fail("line %u is not %u loads from its buddy %u", i, half, buddy);
        return 1;
    }
    if (phase[i / lpp] == UINT32_MAX)
        phase[i / lpp] = n % pages;
    else if (phase[i / lpp] != n % pages) {
        k_fail("page %u is visited at step %u, not a whole number of laps (%u) from its first visit", i / lpp, n,
               pages);
        return 1;
    }
    return 0;
}

/* The chain read back from memory, then walked on its line numbers (a walk of the 4-byte
 * table, not of the working set) in c->walks stretches side by side: stretch t from
 * start[t] for as many steps as lie before start[t + 1] (the last: back to start[0]).
 * Each must end exactly there having visited no line twice, so the stretches make one
 * cycle through every line, whatever the construction meant to build. */
int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    uint32_t lpp = PAGE_STRIDE / c->line, pages = c->lines / (lpp ? lpp : 1), w = c->walks;
    uint32_t *next = malloc((size_t)c->lines * sizeof *next);
    uint8_t *seen = calloc((size_t)c->lines / 8 + 1, 1);
    uint32_t *pair_at = c->buddies ? malloc((size_t)(c->lines / 2) * sizeof *pair_at) : NULL; /* step of the first */
    uint32_t *phase = c->buddies ? malloc((size_t)pages * sizeof *phase) : NULL; /* its first visit's step % pages */
    if (!next || !seen || (c->buddies && (!pair_at || !phase))) {
        free(next);
        free(seen);
        free(pair_at);
        free(phase);
        k_fail("cannot allocate the visit bitmap");
        return 1;
    }
    if (phase)
        memset(phase, 0xff, (size_t)pages * sizeof *phase);
    int bad = read_chain(c, next);
    struct visits v = {seen, pair_at, phase, c->lines / 2, lpp, pages};
    uint32_t at[WALKS], step[WALKS], end[WALKS];
    for (uint32_t t = 0; t < w; t++) {
        at[t] = c->start[t];
        step[t] = (uint32_t)((uint64_t)t * c->lines / w);
        end[t] = (uint32_t)((uint64_t)(t + 1) * c->lines / w);
    }
    for (uint32_t busy = w; !bad && busy;) /* each pass takes one step of every stretch not at its end */
        for (uint32_t t = 0; !bad && t < w; t++)
            if (step[t] < end[t]) {
                bad = visit(c, &v, at[t], step[t]);
                at[t] = next[at[t]];
                if (++step[t] == end[t])
                    busy--;
            }
    for (uint32_t t = 0; !bad && t < w; t++)
        if (at[t] != c->start[(t + 1) % w]) {
            k_fail("the chain is not one cycle: the chase from line %u ends at line %u after its stretch, not at %u",
                   c->start[t], at[t], c->start[(t + 1) % w]);
            bad = 1;
        }
    free(next);
    free(seen);
    free(pair_at);
    free(phase);
    if (!bad && c->buddies) {
        k_note("buddy_gap", c->lines / 2);
        k_note("page_gap", pages);
    }
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
    return (uint64_t)(logical_off(c, p) / c->stride);
}

double k_work(const void *ctx, uint64_t reps)
{
    (void)ctx;
    return (double)reps * LOADS_PER_REP;
}
