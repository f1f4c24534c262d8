/* launch: run one command and report how long it took, as hyperfine would see it.
 *
 *   launch [--null-stdout] [--events NAME=TYPE:CONFIG,...] PROGRAM [ARG...]
 *
 * cpulab runs this through its executor (which pins it and gives it its own session);
 * the command inherits the pinning.  Python's subprocess costs about a millisecond
 * between fork and exec; this costs one posix_spawn (a vfork in glibc), so the wall
 * time of a 5 ms command is the command's, not cpulab's.
 *
 * The last line on stderr is "cpulab-launch {json}": wall seconds from spawn to reap,
 * the child's rusage from wait4 (user, sys, max RSS, context switches), how it ended,
 * and user-space cycles and instructions where perf counters are allowed (null if not).
 * On x86 it also reads the core clock against the TSC right before the spawn and right
 * after the reap, and the TSC ticks between them: the host moves the core clock between
 * processes, and core cycles (ticks times the ratio) do not move with it.
 * --events: named counters (events.h) of the command alone, in "events" (and
 * "event_errors" for those that did not open).
 * The command's own stdout and stderr pass through unless --null-stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/perf_event.h>
#include <sys/syscall.h>
#endif
#include "coreclock.h"
#include "events.h"

extern char **environ;

/* A counter on this process that is inherited by the child, stays off here and turns on
 * when the child execs: what it reads after the reap is the command's count alone. */
static int counter_open(uint64_t config)
{
#ifdef __linux__
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = config;
    a.disabled = 1;
    a.inherit = 1;
    a.enable_on_exec = 1;
    a.exclude_kernel = 1; /* allowed at perf_event_paranoid <= 2 */
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
#else
    (void)config;
    return -1;
#endif
}

static void counter_print(const char *name, int fd)
{
    uint64_t v = 0;
    if (fd >= 0 && read(fd, &v, sizeof v) == sizeof v && v > 0)
        fprintf(stderr, ",\"%s\":%llu", name, (unsigned long long)v);
    else
        fprintf(stderr, ",\"%s\":null", name);
}

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec * 1e-6; }

int main(int argc, char **argv)
{
    int first = 1, null_stdout = 0;
    const char *event_spec = NULL;
    for (;; first++) {
        if (first < argc && strcmp(argv[first], "--null-stdout") == 0)
            null_stdout = 1;
        else if (first + 1 < argc && strcmp(argv[first], "--events") == 0)
            event_spec = argv[++first];
        else
            break;
    }
    static struct events events;
    char events_error[256];
    if (first >= argc || (event_spec && events_open(&events, event_spec, 1, events_error, sizeof events_error))) {
        fprintf(stderr, "usage: launch [--null-stdout] [--events NAME=TYPE:CONFIG,...] PROGRAM [ARG...]%s%s\n",
                event_spec && first < argc ? ": " : "", event_spec && first < argc ? events_error : "");
        return 2;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (null_stdout)
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
#ifdef __linux__
    int fd_cycles = counter_open(PERF_COUNT_HW_CPU_CYCLES);
    int fd_instr = counter_open(PERF_COUNT_HW_INSTRUCTIONS);
#else
    int fd_cycles = -1, fd_instr = -1;
#endif
    fflush(stderr);

    struct timespec t0, t1;
    pid_t pid;
#ifdef HAVE_TSC
    /* The ratio from the fastest of 5 chains of 20k adds (30 us), outside the timed span. */
    const double ratio_before = fastest_chain_ratio(200, 5);
    const uint64_t tsc0 = tsc_begin();
#endif
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int err = posix_spawnp(&pid, argv[first], &fa, NULL, argv + first, environ);
    if (err) {
        fprintf(stderr, "\ncpulab-launch {\"spawn_errno\":%d}\n", err);
        return 127;
    }
    int status = 0;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "\ncpulab-launch {\"wait_errno\":%d}\n", errno);
            return 127;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
#ifdef HAVE_TSC
    const uint64_t ticks = tsc_end() - tsc0;
    const double ratio_after = fastest_chain_ratio(200, 5);
#endif

    double wall = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr, "\ncpulab-launch {\"wall_s\":%.9f,\"user_s\":%.6f,\"sys_s\":%.6f,\"max_rss_kb\":%ld,"
            "\"voluntary_switches\":%ld,\"involuntary_switches\":%ld,\"page_faults\":%ld,\"exit\":%d,\"signal\":%d",
            wall, seconds(ru.ru_utime), seconds(ru.ru_stime), ru.ru_maxrss, ru.ru_nvcsw, ru.ru_nivcsw,
            ru.ru_minflt + ru.ru_majflt,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    counter_print("cycles", fd_cycles);
    counter_print("instructions", fd_instr);
    if (events.n) {
        double counted[MAX_EVENTS];
        events_since(&events, counted); /* from zero: each was off until the child's exec */
        fprintf(stderr, ",\"events\":{");
        for (int i = 0; i < events.n; i++) {
            fprintf(stderr, "%s\"%s\":", i ? "," : "", events.name[i]);
            fprintf(stderr, isfinite(counted[i]) ? "%.17g" : "null", counted[i]);
        }
        fprintf(stderr, "}");
        events_print_errors(&events, stderr);
    }
#ifdef HAVE_TSC
    fprintf(stderr, ",\"tsc_ticks\":%llu,\"ratio_before\":%.6f,\"ratio_after\":%.6f", (unsigned long long)ticks,
            ratio_before, ratio_after);
#endif
    fprintf(stderr, "}\n");
    return 0;
}
