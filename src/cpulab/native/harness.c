/* harness.c - the fixed main() every cpulab artifact shares.
 *
 * Usage: artifact [--param key=value]... [--samples N] [--warmup SEC]
 *                 [--min-sample-time SEC] [--timer auto|perf|tsc|clock]
 *                 [--calibrate-only] [--profile-code SEC] [--turns] [--tsc-hz HZ]
 *                 [--reps N] [--verified] [--rewarm-calls N] [--step-count ADDRESS:LIMIT:MAP]
 *                 [--events NAME=TYPE:CONFIG,...]
 *
 * --events: named counters (events.h) read around each sample's timed call, printed as
 * "events": {NAME: [per sample]}; one that does not open is named in "event_errors".
 *
 * --step-count: the first k_run call's instructions counted on the core (stepcount.h;
 * ADDRESS is k_run's in the symbol table, LIMIT the most stops, MAP the instructions' map),
 * printed after the JSON object.
 *
 * --turns: the samples are taken in turns with other processes on the same CPU (a
 * group, execute.py).  Once set up, warmed up and calibrated it writes one byte to fd 4
 * (ready); then before each sample it blocks reading one byte
 * (the token) from fd 3, re-warms the kernel untimed (more when another member ran
 * since its last sample: token 'o'; 's': none did), takes the sample, and writes one
 * byte to fd 4 to hand the token back; end of file on fd 3 ends the samples early.  A
 * process waiting for its turn sleeps in read(), so it takes no CPU from the one
 * measuring, and samples of A and B taken milliseconds apart share the host's state.
 *
 * Prints exactly one JSON object on stdout and exits 0 when it measured, 3 when the
 * kernel failed setup or its known-answer test, 4 when it was skipped, 2 on bad usage.
 *
 * Timers, best first: perf_event_open cycles+instructions (where the kernel allows
 * counters), RDTSC fenced with LFENCE and converted to core cycles by a calibration
 * against a chain of dependent register adds, and clock_gettime(CLOCK_MONOTONIC) (the
 * only timer on ISAs without a TSC, e.g. the ARM cross variants).
 */
#define _GNU_SOURCE
#include "cpulab.h"
#include "profile.h"
#include "stepcount.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stddef.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/perf_event.h>) && __has_include(<sys/syscall.h>)
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#define HAVE_PERF 1
#endif
#endif

#include "coreclock.h" /* HAVE_TSC, tsc_begin/tsc_end, add_chain, fastest_chain_ratio */
#include "events.h"    /* --events: named counters around each sample */

/* A kernel may leave k_verify out (a user's, cpulab.h): its check is then cpulab's, the
 * checksum of one k_run call on a fresh context, which every variant must share with
 * its baseline (measure/schedule/runner.py). */
#pragma weak k_verify

#define MAX_PARAMS 32
#define MAX_NOTES 32
#define MAX_SAMPLES 10000
#define TURN_IN_FD 3  /* --turns: the token arrives here before each sample */
#define TURN_OUT_FD 4 /* and goes back here after it */

/* ---- parameters, failures and notes (the k_* services) ---------------------- */

static const char *param_key[MAX_PARAMS], *param_val[MAX_PARAMS];
static int n_params;
static char param_error[512]; /* the first parameter that could not be read whole */
static char fail_reason[512];
static int fail_is_skip;
static const char *note_key[MAX_NOTES];
static double note_val[MAX_NOTES];
static int n_notes;

const char *k_param_str(const char *key, const char *dflt)
{
    for (int i = 0; i < n_params; i++)
        if (strcmp(param_key[i], key) == 0)
            return param_val[i];
    return dflt;
}

/* Whole-string decimal parses, 0 on success.  strtoll/strtod alone stop quietly at the
 * first character they cannot use ("16K" reads as 16, "1e6" as 1) and base 0 reads
 * "010" as 8: here anything but the canonical form cpulab passes is refused.
 * Integers: an optional '-', digits, no leading zeros, within int64_t. */
static int parse_int(const char *s, int64_t *out)
{
    const char *d = s + (*s == '-');
    if (*d < '0' || *d > '9' || (d[0] == '0' && d[1] != '\0'))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

/* Numbers: decimal digits, sign, point and exponent only (no hex, inf or nan), finite. */
static int parse_num(const char *s, double *out)
{
    if (!*s || strspn(s, "0123456789+-.eE") != strlen(s))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* Remember the first unreadable parameter: main reports the result as setup-failed,
 * naming it, whatever the kernel did with the default it was given instead. */
static void bad_param(const char *key, const char *value, const char *want)
{
    if (!param_error[0])
        snprintf(param_error, sizeof param_error, "parameter %s=%s is not %s", key, value, want);
}

int64_t k_param_int(const char *key, int64_t dflt)
{
    const char *v = k_param_str(key, NULL);
    int64_t x = dflt;
    if (v && parse_int(v, &x) != 0) {
        bad_param(key, v, "a decimal integer (digits only, no leading zeros, within 64 bits)");
        return dflt;
    }
    return x;
}

double k_param_num(const char *key, double dflt)
{
    const char *v = k_param_str(key, NULL);
    double x = dflt;
    if (v && parse_num(v, &x) != 0) {
        bad_param(key, v, "a finite decimal number");
        return dflt;
    }
    return x;
}

void k_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_reason, sizeof fail_reason, fmt, ap);
    va_end(ap);
}

void k_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_reason, sizeof fail_reason, fmt, ap);
    va_end(ap);
    fail_is_skip = 1;
}

/* k_alloc's draws (cpulab.h): seeded per process by the executor's CPULAB_HEAP_SEED, or
 * by the clock where it is not set (a process run by hand). */
static uint64_t heap_draws;

void *k_alloc(size_t bytes)
{
    void *base = NULL;
    if (posix_memalign(&base, 4096, bytes + 4096) != 0)
        return NULL;
    heap_draws = heap_draws * 6364136223846793005ull + 1442695040888963407ull; /* an LCG step */
    /* Lines 1..64 of the block: every offset within a page, with room before the block
     * for the pointer k_free needs. */
    char *p = (char *)base + 64 * (1 + (heap_draws >> 33) % 64);
    ((void **)p)[-1] = base;
    return p;
}

void k_free(void *p)
{
    if (p)
        free(((void **)p)[-1]);
}

void k_note(const char *key, double value)
{
    for (int i = 0; i < n_notes; i++)
        if (strcmp(note_key[i], key) == 0) {
            note_val[i] = value;
            return;
        }
    if (n_notes < MAX_NOTES) {
        note_key[n_notes] = key;
        note_val[n_notes++] = value;
    } else { /* a kernel's author must hear of it: a silently lost note reads as zero */
        fprintf(stderr, "k_note: more than %d notes, '%s' dropped\n", MAX_NOTES, key);
    }
}

/* A working set (the kernel's note working_set_bytes) that a sample of another member
 * of the same size leaves in L2 (512 KiB and more on x86 cores since 2017). */
#define SMALL_WORKING_SET (128 * 1024)

static int small_working_set(void)
{
    for (int i = 0; i < n_notes; i++)
        if (strcmp(note_key[i], "working_set_bytes") == 0)
            return note_val[i] > 0 && note_val[i] <= SMALL_WORKING_SET;
    return 0;
}

/* ---- JSON output ----------------------------------------------------------- */

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_num(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
}

static void json_array(const char *key, const double *v, int n)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++) {
        if (i)
            putchar(',');
        json_num(v[i]);
    }
    putchar(']');
}

static void json_notes(void)
{
    printf(",\"notes\":{");
    for (int i = 0; i < n_notes; i++) {
        if (i)
            putchar(',');
        json_str(note_key[i]);
        putchar(':');
        json_num(note_val[i]);
    }
    putchar('}');
}

/* A result that is not a measurement: setup/verify failure, skip, or usage. */
static int report_status(const char *status, const char *error, int code)
{
    printf("{\"status\":");
    json_str(status);
    printf(",\"error\":");
    json_str(error);
    json_notes();
    printf("}\n");
    return code;
}

static volatile uint64_t checksum_sink;
static volatile uintptr_t canary_sink;

/* ---- clocks ------------------------------------------------------------------ */

static inline uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef HAVE_TSC
/* Core cycles per TSC tick.  The clock ramps up under load, so spin first; then
 * take the fastest of many short chains (interrupts only ever add ticks).  With the TSC
 * rate known (--tsc-hz: the run measured it once), the 30 ms spin that also measures it
 * is skipped: each sample's cycles use the ratio measured right beside it anyway, and
 * the kernel's own warm-up ramps the clock before the samples. */
static double calibrate_core_per_tsc(double *tsc_hz)
{
    const uint64_t blocks = 2000; /* 200k adds: about 0.1 ms at 2 GHz */
    if (*tsc_hz > 0)
        return fastest_chain_ratio(blocks, 11);
    uint64_t t0 = now_ns(), c0 = tsc_begin();
    while (now_ns() - t0 < 30000000ull) /* 30 ms warm-up */
        add_chain(blocks);
    double ratio = fastest_chain_ratio(blocks, 41);
    uint64_t c1 = tsc_end(), t1 = now_ns();
    *tsc_hz = (double)(c1 - c0) * 1e9 / (double)(t1 - t0);
    return ratio;
}

/* The core/TSC ratio right now: fastest of 5 chains of 20k dependent adds (about 6 us
 * each at 3.5 GHz, 30 us in all, outside the timed region).  The host moves the core
 * clock between processes and within one, so each sample gets its own ratio. */
static double adjacent_core_per_tsc(void)
{
    return fastest_chain_ratio(200, 5);
}

/* Throughput canary: 4 independent add chains, up to 4 adds per cycle on a core of its
 * own.  A tenant on the SMT sibling takes ALU slots and this rate drops, while the
 * dependent chain above (1 add per cycle) does not notice.  Median of 5 blocks of
 * 20k adds; returns adds per TSC tick (divide by the ratio for adds per cycle). */
#define IADD4 "add %4, %0\n\tadd %4, %1\n\tadd %4, %2\n\tadd %4, %3\n\t"
#define IADD40 IADD4 IADD4 IADD4 IADD4 IADD4 IADD4 IADD4 IADD4 IADD4 IADD4
#define IADD400 IADD40 IADD40 IADD40 IADD40 IADD40 IADD40 IADD40 IADD40 IADD40 IADD40

static double canary_adds_per_tick(void)
{
    const uint64_t blocks = 50;
    uintptr_t a = 0, b = 0, c = 0, d = 0, y = 1;
    double t[5];
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = tsc_begin();
        for (uint64_t k = 0; k < blocks; k++)
            __asm__ __volatile__(IADD400 : "+r"(a), "+r"(b), "+r"(c), "+r"(d) : "r"(y));
        t[i] = (double)(tsc_end() - t0);
    }
    canary_sink = a ^ b ^ c ^ d; /* keeps the adds; not the kernel's checksum */
    for (int i = 1; i < 5; i++) /* insertion sort of 5: the median, not the best, since */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { /* contention is what it looks for */
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return (double)(blocks * 400) / t[2];
}
#else
/* No TSC (ARM, AArch64: their cycle counters are not readable from user mode by
 * default): the timer falls back to clock_gettime, and perf_setup only needs some work
 * for its counter check. */
static uintptr_t add_chain(uint64_t blocks)
{
    volatile uintptr_t x = 0;
    for (uint64_t i = 0; i < blocks * 100; i++)
        x += i;
    return x;
}
#endif

/* ---- perf_event counters ------------------------------------------------------- */

static int perf_fd_cycles = -1, perf_fd_instr = -1;
static char perf_error[256] = "perf_event_open not available in this build";

#ifdef HAVE_PERF
static int perf_open(uint64_t config, int group)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = config;
    a.disabled = group < 0;
    a.exclude_kernel = 1; /* allowed at perf_event_paranoid <= 2 */
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, group, 0);
}

/* Open a group {cycles, instructions}; 0 on success, else why in perf_error. */
static int perf_setup(void)
{
    perf_fd_cycles = perf_open(PERF_COUNT_HW_CPU_CYCLES, -1);
    if (perf_fd_cycles < 0) {
        snprintf(perf_error, sizeof perf_error, "perf_event_open(cycles): %s", strerror(errno));
        return -1;
    }
    perf_fd_instr = perf_open(PERF_COUNT_HW_INSTRUCTIONS, perf_fd_cycles);
    if (perf_fd_instr < 0) {
        snprintf(perf_error, sizeof perf_error, "perf_event_open(instructions): %s", strerror(errno));
        close(perf_fd_cycles);
        perf_fd_cycles = -1;
        return -1;
    }
    ioctl(perf_fd_cycles, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
    /* A counter that opens but never counts (some hypervisors) is no counter. */
    uint64_t v = 0;
    add_chain(1000);
    if (read(perf_fd_cycles, &v, sizeof v) != sizeof v || v == 0) {
        snprintf(perf_error, sizeof perf_error, "perf cycles counter opened but does not count");
        close(perf_fd_instr);
        close(perf_fd_cycles);
        perf_fd_cycles = perf_fd_instr = -1;
        return -1;
    }
    return 0;
}

static inline uint64_t perf_read(int fd)
{
    uint64_t v = 0;
    if (read(fd, &v, sizeof v) != sizeof v)
        return 0;
    return v;
}
#else
static int perf_setup(void) { return -1; }
static inline uint64_t perf_read(int fd) { (void)fd; return 0; }
#endif

/* ---- the sample loop ------------------------------------------------------------ */

enum timer { T_PERF, T_TSC, T_CLOCK };
static const char *timer_name[] = {"perf", "tsc", "clock"};

/* What was seen around one sample (all read outside the timed region). */
struct sample {
    double t_ns;                         /* CLOCK_MONOTONIC at its start */
    double ns, ticks, cycles, instructions, user_s, sys_s;
    double invol_switches, vol_switches; /* of this thread, during the sample */
    double offcpu_ns;                    /* wall time the thread was not running */
    double migrated;                     /* 1 if the CPU differed before and after */
    double steal_ticks;                  /* /proc/stat steal of that CPU (USER_HZ ticks) */
    double ratio_before, ratio_after;    /* core/TSC ratio just before and after */
    double canary_before, canary_after;  /* independent adds per core cycle */
    double events[MAX_EVENTS];           /* --events: each counter's count in the window */
};

static struct events events; /* --events (none: no counter is read) */

/* Steal time of one CPU from /proc/stat, in USER_HZ ticks (usually 10 ms), or NAN.
 * One pread of an fd kept open (about 20 us for a few CPUs): before and after each
 * sample, never inside it. */
static int proc_stat_fd = -2;

static double steal_of_cpu(int cpu)
{
    static char buf[16384];
    if (proc_stat_fd == -2)
        proc_stat_fd = open("/proc/stat", O_RDONLY);
    if (proc_stat_fd < 0 || cpu < 0)
        return NAN;
    ssize_t n = pread(proc_stat_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return NAN;
    buf[n] = 0;
    char want[32];
    int wl = snprintf(want, sizeof want, "\ncpu%d ", cpu);
    const char *line = strstr(buf, want);
    if (!line)
        return NAN;
    /* cpuN user nice system idle iowait irq softirq steal ... */
    unsigned long long f[8] = {0};
    if (sscanf(line + wl, "%llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4],
               &f[5], &f[6], &f[7]) != 8)
        return NAN;
    return (double)f[7];
}

static double cpu_seconds(const struct timeval *tv)
{
    return (double)tv->tv_sec + (double)tv->tv_usec * 1e-6;
}

static void take_sample(void *ctx, uint64_t reps, enum timer timer, struct sample *s)
{
    struct rusage r0, r1;
    uint64_t c0 = 0, i0 = 0, c1 = 0, i1 = 0, k0 = 0, k1 = 0;
    s->ratio_before = s->canary_before = s->ratio_after = s->canary_after = NAN;
#ifdef HAVE_TSC
    s->ratio_before = adjacent_core_per_tsc();
    s->canary_before = canary_adds_per_tick() / s->ratio_before;
#endif
    int cpu0 = sched_getcpu();
    double steal0 = steal_of_cpu(cpu0);
    getrusage(RUSAGE_THREAD, &r0);
    /* Thread CPU time in ns (a syscall, ~0.3 us, outside the timed region): wall minus
     * CPU time is the time other threads had the CPU.  getrusage's times only move at
     * scheduler ticks and cannot say that for a sample of a few ms. */
    events_mark(&events); /* outside the timed window: a read() each, ~0.5 us */
    uint64_t u0 = thread_cpu_ns();
    uint64_t t0 = now_ns();
    if (timer == T_PERF) {
        c0 = perf_read(perf_fd_cycles);
        i0 = perf_read(perf_fd_instr);
    }
#ifdef HAVE_TSC
    k0 = tsc_begin();
#endif
    checksum_sink ^= k_run(ctx, reps);
#ifdef HAVE_TSC
    k1 = tsc_end();
#endif
    if (timer == T_PERF) {
        c1 = perf_read(perf_fd_cycles);
        i1 = perf_read(perf_fd_instr);
    }
    uint64_t t1 = now_ns();
    uint64_t u1 = thread_cpu_ns();
    events_since(&events, s->events);
    getrusage(RUSAGE_THREAD, &r1);
    int cpu1 = sched_getcpu();
    double steal1 = steal_of_cpu(cpu1);
#ifdef HAVE_TSC
    s->ratio_after = adjacent_core_per_tsc();
    s->canary_after = canary_adds_per_tick() / s->ratio_after;
#endif
    s->t_ns = (double)t0;
    s->ns = (double)(t1 - t0);
    s->ticks = (double)(k1 - k0);
    s->cycles = timer == T_PERF ? (double)(c1 - c0) : NAN;
    s->instructions = timer == T_PERF ? (double)(i1 - i0) : NAN;
    s->user_s = cpu_seconds(&r1.ru_utime) - cpu_seconds(&r0.ru_utime);
    s->sys_s = cpu_seconds(&r1.ru_stime) - cpu_seconds(&r0.ru_stime);
    s->invol_switches = (double)(r1.ru_nivcsw - r0.ru_nivcsw);
    s->vol_switches = (double)(r1.ru_nvcsw - r0.ru_nvcsw);
    s->offcpu_ns = s->ns - (double)(u1 - u0);
    s->migrated = cpu0 != cpu1;
    s->steal_ticks = cpu0 == cpu1 ? steal1 - steal0 : NAN;
}

/* Double reps until one call lasts min_ns; once a call is within 16x of it, scale from
 * the fastest of three calls to land 10% above it.  Interference only slows, so the
 * fastest call is the machine's real speed: scaling from a slowed call would give
 * samples shorter than the floor once the burst passes (seen: 7 ms of the asked 10). */
static double time_call(void *ctx, uint64_t reps)
{
    uint64_t t0 = now_ns();
    checksum_sink ^= k_run(ctx, reps);
    return (double)(now_ns() - t0);
}

static uint64_t calibrate_reps(void *ctx, double min_ns)
{
    uint64_t reps = 1;
    for (;;) {
        double dt = time_call(ctx, reps);
        if (min_ns <= 0) /* one repetition a sample: k_run ran once before the samples */
            return reps;
        if (dt < min_ns / 16 || dt <= 0) {
            reps *= 8;
            continue;
        }
        if (reps == 1 && dt >= 2 * min_ns) /* one call lasts two samples: only one twice as fast would need 2 */
            return reps;
        for (int i = 0; i < 2; i++) {
            double d = time_call(ctx, reps);
            dt = d < dt ? d : dt;
        }
        if (dt >= min_ns) /* even the fastest of three is long enough */
            return reps;
        return (uint64_t)ceil((double)reps * min_ns * 1.1 / dt);
    }
}

/* ---- the sampled profile (--profile-code) ------------------------------------------
 *
 * After the timed samples (never during them), k_run keeps running for SEC seconds while
 * an interval timer interrupts it every PROFILE_PERIOD_US; the handler records the
 * interrupted instruction address from the signal context.  ITIMER_REAL is a
 * high-resolution timer (ITIMER_PROF ticks with the scheduler, every 1-4 ms); the process
 * is pinned and busy, so wall-clock ticks land where the CPU time goes.  Without the
 * option nothing is armed: the measured code pays nothing.  The addresses are printed
 * with the run-time address of main, from which the reader finds the load base of a PIE. */
int main(int argc, char **argv);

#define PROFILE_PERIOD_US 97 /* not a round number, so it does not beat with a loop period */
#define MAX_PROFILE_PCS (1 << 16)

static uintptr_t profile_pc[MAX_PROFILE_PCS];
static volatile sig_atomic_t profile_n;

static void on_profile_tick(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)info;
    if (profile_n < MAX_PROFILE_PCS)
        profile_pc[profile_n++] = signal_pc(uc);
}

static int cmp_pc(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* Run k_run(ctx, reps) for `seconds` under the profiling timer; print the histogram of
 * interrupted addresses as ,"profile":{...} (addresses in hex strings, counts). */
static void profile_code(void *ctx, uint64_t reps, double seconds)
{
    struct itimerval off = {{0, 0}, {0, 0}};
    profile_n = 0;
    arm_sampler(ITIMER_REAL, SIGALRM, on_profile_tick, PROFILE_PERIOD_US);
    for (uint64_t t0 = now_ns(); (double)(now_ns() - t0) < seconds * 1e9 && profile_n < MAX_PROFILE_PCS;)
        checksum_sink ^= k_run(ctx, reps);
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);

    int n = profile_n;
    qsort(profile_pc, (size_t)n, sizeof profile_pc[0], cmp_pc);
    printf(",\"profile\":{\"period_us\":%d,\"main\":\"%llx\",\"ticks\":%d,\"pcs\":[", PROFILE_PERIOD_US,
           (unsigned long long)(uintptr_t)&main, n);
    for (int i = 0, first = 1; i < n;) {
        int j = i;
        while (j < n && profile_pc[j] == profile_pc[i])
            j++;
        printf("%s[\"%llx\",%d]", first ? "" : ",", (unsigned long long)profile_pc[i], j - i);
        first = 0;
        i = j;
    }
    printf("]}");
}

static int usage(const char *why)
{
    fprintf(stderr, "usage: artifact [--param k=v]... [--samples N] [--warmup SEC] "
                    "[--min-sample-time SEC] [--timer auto|perf|tsc|clock] [--calibrate-only] "
                    "[--profile-code SEC] [--turns] [--tsc-hz HZ] [--reps N] [--verified] "
                    "[--rewarm-calls N] [--step-count ADDRESS:LIMIT:MAP] [--events NAME=TYPE:CONFIG,...]\n");
    return report_status("usage", why, 2);
}

/* Each sample's figures as JSON arrays, one per quantity, in this order.  Core cycles
 * (no field of its own): counters if we have them, else TSC ticks x the core/TSC ratio
 * measured right beside that sample (mean of before and after), not the one from the
 * start of the process. */
#define CYCLES ((size_t)-1)
static const struct {
    const char *key;
    size_t offset; /* of a double in struct sample, or CYCLES */
} sample_columns[] = {
    {"ns", offsetof(struct sample, ns)},
    {"t_ns", offsetof(struct sample, t_ns)},
    {"cycles", CYCLES},
    {"instructions", offsetof(struct sample, instructions)},
    {"user_s", offsetof(struct sample, user_s)},
    {"sys_s", offsetof(struct sample, sys_s)},
    {"invol_switches", offsetof(struct sample, invol_switches)},
    {"vol_switches", offsetof(struct sample, vol_switches)},
    {"offcpu_ns", offsetof(struct sample, offcpu_ns)},
    {"migrated", offsetof(struct sample, migrated)},
    {"steal_ticks", offsetof(struct sample, steal_ticks)},
    {"ratio_before", offsetof(struct sample, ratio_before)},
    {"ratio_after", offsetof(struct sample, ratio_after)},
    {"canary_before", offsetof(struct sample, canary_before)},
    {"canary_after", offsetof(struct sample, canary_after)},
};

static void json_samples(const struct sample *s, int samples, enum timer timer)
{
    static double column[MAX_SAMPLES];
    for (size_t c = 0; c < sizeof sample_columns / sizeof sample_columns[0]; c++) {
        for (int i = 0; i < samples; i++) {
            double adjacent = (s[i].ratio_before + s[i].ratio_after) / 2;
            column[i] = sample_columns[c].offset != CYCLES
                            ? *(const double *)((const char *)&s[i] + sample_columns[c].offset)
                        : timer == T_PERF ? s[i].cycles
                        : timer == T_TSC  ? s[i].ticks * adjacent
                                          : NAN;
        }
        json_array(sample_columns[c].key, column, samples);
    }
    if (!events.n)
        return;
    printf(",\"events\":{");
    for (int e = 0; e < events.n; e++) {
        for (int i = 0; i < samples; i++)
            column[i] = s[i].events[e];
        printf("%s\"%s\":[", e ? "," : "", events.name[e]);
        for (int i = 0; i < samples; i++) {
            if (i)
                putchar(',');
            json_num(column[i]);
        }
        putchar(']');
    }
    printf("}");
    events_print_errors(&events, stdout);
}
#undef CYCLES

/* What the command line asks (usage() above). */
struct options {
    int samples, calibrate_only, turns, verified, rewarm_calls;
    uint64_t given_reps;
    double warmup_s, min_sample_s, profile_s, given_tsc_hz;
    const char *timer_arg, *step_map, *events;
    unsigned long long step_at, step_limit;
};

/* The command line into *o: 0, or usage()'s exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    *o = (struct options){.samples = 5, .rewarm_calls = 1, .warmup_s = 0.02, .min_sample_s = 0.010,
                          .timer_arg = "auto"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--calibrate-only") == 0) {
            o->calibrate_only = 1;
            continue;
        }
        if (strcmp(a, "--turns") == 0) {
            o->turns = 1;
            continue;
        }
        if (strcmp(a, "--verified") == 0) {
            o->verified = 1;
            continue;
        }
        if (!v)
            return usage(a);
        i++;
        if (strcmp(a, "--param") == 0) {
            char *eq = strchr(v, '=');
            if (!eq || n_params == MAX_PARAMS)
                return usage("--param wants key=value");
            if (!(param_key[n_params] = strndup(v, (size_t)(eq - v))))
                return usage("out of memory reading --param");
            param_val[n_params++] = eq + 1;
        } else if (strcmp(a, "--samples") == 0) {
            int64_t n;
            if (parse_int(v, &n) != 0 || n < 1 || n > MAX_SAMPLES)
                return usage("--samples wants a whole number 1..10000");
            o->samples = (int)n;
        } else if (strcmp(a, "--warmup") == 0) {
            if (parse_num(v, &o->warmup_s) != 0 || o->warmup_s < 0)
                return usage("--warmup wants seconds >= 0");
        } else if (strcmp(a, "--min-sample-time") == 0) {
            if (parse_num(v, &o->min_sample_s) != 0 || o->min_sample_s < 0)
                return usage("--min-sample-time wants seconds >= 0 (0: one repetition)");
        } else if (strcmp(a, "--timer") == 0) {
            o->timer_arg = v;
        } else if (strcmp(a, "--profile-code") == 0) {
            if (parse_num(v, &o->profile_s) != 0 || !(o->profile_s >= 0 && o->profile_s <= 60))
                return usage("--profile-code wants 0..60 seconds");
        } else if (strcmp(a, "--reps") == 0) {
            int64_t n;
            if (parse_int(v, &n) != 0 || n < 1)
                return usage("--reps wants a whole number >= 1");
            o->given_reps = (uint64_t)n;
        } else if (strcmp(a, "--rewarm-calls") == 0) {
            int64_t n;
            if (parse_int(v, &n) != 0 || n < 0 || n > 1000)
                return usage("--rewarm-calls wants a whole number 0..1000");
            o->rewarm_calls = (int)n;
        } else if (strcmp(a, "--step-count") == 0) {
            int at = 0;
            if (sscanf(v, "%llx:%llu:%n", &o->step_at, &o->step_limit, &at) != 2 || !at || !v[at])
                return usage("--step-count wants ADDRESS:LIMIT:MAP");
            o->step_map = v + at;
        } else if (strcmp(a, "--events") == 0) {
            o->events = v;
        } else if (strcmp(a, "--tsc-hz") == 0) {
            if (parse_num(v, &o->given_tsc_hz) != 0 || !(o->given_tsc_hz >= 1e6 && o->given_tsc_hz <= 1e11))
                return usage("--tsc-hz wants the TSC rate in Hz");
        } else {
            return usage(a);
        }
    }
    return 0;
}

/* The timer asked for, chosen before set-up: a forced timer that is missing is a usage
 * error (2); 0 and *timer set otherwise. */
static int choose_timer(const char *timer_arg, enum timer *timer)
{
    if (strcmp(timer_arg, "perf") == 0) {
        if (perf_setup() != 0)
            return report_status("error", perf_error, 2);
        *timer = T_PERF;
    } else if (strcmp(timer_arg, "tsc") == 0) {
#ifndef HAVE_TSC
        return report_status("error", "no TSC on this architecture", 2);
#endif
        *timer = T_TSC;
    } else if (strcmp(timer_arg, "clock") == 0) {
        *timer = T_CLOCK;
    } else if (strcmp(timer_arg, "auto") == 0) {
#ifdef HAVE_TSC
        *timer = perf_setup() == 0 ? T_PERF : T_TSC;
#else
        *timer = perf_setup() == 0 ? T_PERF : T_CLOCK;
#endif
    } else {
        return usage("--timer must be auto, perf, tsc or clock");
    }
    return 0;
}

int main(int argc, char **argv)
{
#ifdef __linux__
    /* cpulab killed outright (SIGKILL, a lost worker) must not leave this process running
     * on the pinned CPU, where it would slow whatever is measured next. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    struct options o;
    int status = parse_options(argc, argv, &o);
    if (status)
        return status;
    int samples = o.samples;
    const int calibrate_only = o.calibrate_only, turns = o.turns, verified = o.verified;
    const int rewarm_calls = o.rewarm_calls;
    const uint64_t given_reps = o.given_reps;
    double warmup_s = o.warmup_s;
    const double min_sample_s = o.min_sample_s, profile_s = o.profile_s, given_tsc_hz = o.given_tsc_hz;
    static struct sample s[MAX_SAMPLES];
    enum timer timer = T_CLOCK; /* set by choose_timer */
    if ((status = choose_timer(o.timer_arg, &timer)))
        return status;
    char events_error[256];
    if (o.events && events_open(&events, o.events, 0, events_error, sizeof events_error) != 0)
        return usage(events_error);

    /* Where a process's time goes outside its samples (the run's time split): the TSC
     * ratio, set-up and known-answer test, warm-up and calibration, then the work around
     * each sample (re-warm, the adjacent TSC ratios, the token). */
    uint64_t t_begin = now_ns();
    double tsc_hz = given_tsc_hz > 0 ? given_tsc_hz : NAN, core_per_tsc = NAN;
#ifdef HAVE_TSC
    core_per_tsc = calibrate_core_per_tsc(&tsc_hz);
#endif
    uint64_t t_start = now_ns();
    if (calibrate_only) {
        printf("{\"status\":\"ok\",\"timer\":\"%s\",\"tsc_hz\":", timer_name[timer]);
        json_num(tsc_hz);
        printf(",\"core_per_tsc\":");
        json_num(core_per_tsc);
        printf(",\"perf_error\":");
        json_str(timer == T_PERF ? "" : perf_error);
        printf("}\n");
        return 0;
    }

    const char *heap_seed = getenv("CPULAB_HEAP_SEED");
    heap_draws = heap_seed ? strtoull(heap_seed, NULL, 10) : now_ns();
    if (o.step_map && step_arm(o.step_map, (uintptr_t)&k_run, o.step_at, o.step_limit) != 0) {
        step_report();
        return report_status("error", "cannot count by stepping", 2);
    }
    void *ctx = k_setup();
    if (param_error[0])
        return report_status("setup-failed", param_error, 3);
    if (!ctx)
        return fail_is_skip ? report_status("skipped", fail_reason, 4)
                            : report_status("setup-failed", fail_reason[0] ? fail_reason : "k_setup failed", 3);
    /* --verified: this executable (or a placement of it: the same code bytes) passed its
     * known-answer test at these parameters earlier in the run; its test can cost more
     * than the samples (a long-double DFT, or anything under qemu). */
    const int own_check = k_verify != NULL;
    uint64_t check = 0;
    if (!verified && !own_check)
        check = k_run(ctx, 1);
    int bad = verified || !own_check ? 0 : k_verify(ctx);
    if (bad)
        return fail_is_skip ? report_status("skipped", fail_reason, 4)
                            : report_status("verify-failed", fail_reason[0] ? fail_reason : "known-answer test failed", 3);
    uint64_t t_setup = now_ns();

    /* Calibrate, then warm up for at most one sample.  The calibration times the fastest
     * of three calls once the count is near (calibrate_reps), so a cold first call does
     * not set it; with --min-sample-time 0 and --warmup 0 k_run is called exactly once
     * before the samples (the kernels' known-answer tests count on it).
     * --reps: the count the runner took from an earlier process of this target (its
     * calibration scaled to its fastest kept sample), so every process does the same work
     * per sample and none spends ~3 samples' time calibrating.
     * What is left to warm after set-up, the known-answer test and the calibration
     * (caches, TLB, predictors) one sample's work refills: a first process's 20 ms
     * warm-up before calibrating made the seeds' calibration 13 s, 6 s without it (5 s
     * less in the alone rounds), as it had been 6 s of their memory curve's later
     * processes.  In turns with given reps the re-warm before the first sample (which
     * follows the other members' set-up) is the warm-up. */
    uint64_t reps = given_reps ? given_reps : calibrate_reps(ctx, min_sample_s * 1e9);
    if (turns && given_reps)
        warmup_s = 0;
    else if (warmup_s > min_sample_s)
        warmup_s = min_sample_s;
    const uint64_t warm_reps = reps / 4 ? reps / 4 : 1; /* calls short against the warm-up */
    if (warmup_s > 0)
        for (uint64_t t0 = now_ns(); (double)(now_ns() - t0) < warmup_s * 1e9;)
            checksum_sink ^= k_run(ctx, warm_reps);
    uint64_t t_ready = now_ns();
    double around_ns = 0; /* time in the sample loop outside the timed regions */
    if (turns) {
        /* Before each sample an eighth of one, untimed, refills what the time since the
         * last one took (caches, TLB, predictors): the cpulab process handing the token
         * over, and another member's sample when the token says one ran since ours
         * ('o'; 's': none did).  After another member at least --rewarm-calls whole
         * calls (default 1: a 2^20-point FFT of one call per sample ran 10-12% slower
         * right after another build without it), unless the kernel notes a working set
         * of at most SMALL_WORKING_SET: another member's sample leaves it in L2, whence
         * it refills in microseconds (DES's table core, 14 KiB in a call as long as a
         * sample, re-warmed a whole call before each).  After itself, under 8
         * repetitions, none (a whole call would cost up to 100% more, to refill what it
         * left). */
        const uint64_t rewarm = reps / 8;
        const uint64_t rewarm_least = small_working_set() ? 0 : (uint64_t)rewarm_calls;
        const uint64_t rewarm_other = rewarm > rewarm_least ? rewarm : rewarm_least;
        int taken = 0;
        char token = 'r';
        /* Ready: set up, warmed and calibrated alone on the CPU; the group's next member
         * starts only now, so no calibration ever shares the CPU. */
        if (write(TURN_OUT_FD, &token, 1) != 1)
            samples = 0;
        while (taken < samples && read(TURN_IN_FD, &token, 1) == 1) {
            /* The cpulab thread that handed the token over may still be on this CPU, a
             * few microseconds from blocking: let it finish now, or it takes the CPU back
             * mid-sample (one switch of ~150 us under ftrace; float-abi alone left out 7.2%
             * of its samples with it, 4% without). */
            sched_yield();
            uint64_t t0 = now_ns();
            uint64_t calls = token == 'o' ? rewarm_other : rewarm;
            if (calls)
                checksum_sink ^= k_run(ctx, calls);
            take_sample(ctx, reps, timer, &s[taken]);
            around_ns += (double)(now_ns() - t0) - s[taken++].ns;
            if (write(TURN_OUT_FD, &token, 1) != 1)
                break;
        }
        samples = taken;
        /* Our samples are taken, not the group's: printing and exiting now would run
         * beside the other members' last samples (a third of float-abi's samples left out
         * off-CPU were the last of their process).  The end of the token pipe says the
         * group is done. */
        while (read(TURN_IN_FD, &token, 1) == 1)
            ;
    } else {
        for (int i = 0; i < samples; i++) {
            uint64_t t0 = now_ns();
            take_sample(ctx, reps, timer, &s[i]);
            around_ns += (double)(now_ns() - t0) - s[i].ns;
        }
    }

    printf("{\"status\":\"ok\",\"error\":\"\",\"unit\":");
    json_str(k_unit);
    printf(",\"timer\":\"%s\",\"tsc_hz\":", timer_name[timer]);
    json_num(tsc_hz);
    printf(",\"core_per_tsc\":");
    json_num(core_per_tsc);
    printf(",\"perf_error\":");
    json_str(timer == T_PERF ? "" : perf_error);
    printf(",\"reps\":%llu,\"work\":", (unsigned long long)reps);
    json_num(k_work(ctx, reps));
    printf(",\"checksum\":\"%016llx\"", (unsigned long long)checksum_sink);
    if (!verified && !own_check)
        printf(",\"check\":\"%016llx\"", (unsigned long long)check);
    /* Where the timed code sits: its offset within a page (the placement, artifacts.py). */
    printf(",\"code_offset\":%u", (unsigned)((uintptr_t)&k_run & 4095));
    printf(",\"setup_ns\":%llu,\"calibrate_ns\":%llu,\"around_ns\":", (unsigned long long)(t_setup - t_start),
           (unsigned long long)(t_ready - t_setup + t_start - t_begin));
    json_num(around_ns);
    json_samples(s, samples, timer);
    json_notes();
    if (profile_s > 0)
        profile_code(ctx, reps, profile_s);
    printf("}\n");
    if (o.step_map)
        step_report();
    return 0;
}
