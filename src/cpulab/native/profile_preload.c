/* profile_preload.c - where a whole program spends its CPU time, without a PMU.
 *
 * Loaded with LD_PRELOAD into a program cpulab runs for `explain --program`.  When
 * CPULAB_PROFILE_OUT names a file, a constructor arms ITIMER_PROF (CPU time of the whole
 * process, one tick per PROFILE_PERIOD_US of it, at the scheduler tick's resolution) and
 * the SIGPROF handler records the interrupted instruction address from the signal
 * context.  At exit a destructor writes the addresses and /proc/self/maps to the file
 * named CPULAB_PROFILE_OUT.PID (every process the command starts writes its own, the
 * launcher too), so cpulab can map each address into the program's own binary (a PIE
 * loads anywhere).
 * A program that leaves with _exit() or a signal writes nothing; cpulab says so.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "profile.h"

#define PROFILE_PERIOD_US 1000
#define MAX_PCS (1 << 20)

static uintptr_t pcs[MAX_PCS];
static volatile unsigned n_pcs; /* SIGPROF may hit any thread: slots are taken atomically */
static const char *out_path;

static void on_tick(int sig, siginfo_t *info, void *uc_)
{
    (void)sig;
    (void)info;
    unsigned i = __atomic_fetch_add(&n_pcs, 1, __ATOMIC_RELAXED);
    if (i < MAX_PCS)
        pcs[i] = signal_pc(uc_);
}

__attribute__((constructor)) static void profile_start(void)
{
    out_path = getenv("CPULAB_PROFILE_OUT");
    if (!out_path)
        return;
    arm_sampler(ITIMER_PROF, SIGPROF, on_tick, PROFILE_PERIOD_US);
}

__attribute__((destructor)) static void profile_stop(void)
{
    if (!out_path)
        return;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    char name[4096];
    snprintf(name, sizeof name, "%s.%ld", out_path, (long)getpid());
    FILE *f = fopen(name, "w");
    if (!f)
        return;
    unsigned n = n_pcs < MAX_PCS ? n_pcs : MAX_PCS;
    fprintf(f, "period_us %d\n", PROFILE_PERIOD_US);
    for (unsigned i = 0; i < n; i++)
        fprintf(f, "pc %llx\n", (unsigned long long)pcs[i]);
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    while (maps && fgets(line, sizeof line, maps))
        fprintf(f, "map %s", line);
    if (maps)
        fclose(maps);
    fclose(f);
}
