/* events.h - named counters (perf_event_open) read around a window: each sample's timed
 * call in the harness, a whole process in the launcher.
 *
 * The spec is cpulab's (machine/events.py resolves names as `perf list` does):
 *     NAME=TYPE:CONFIG[:CONFIG1[:CONFIG2]],...     numbers in decimal or 0x hex
 * Each event is opened on its own (no group: an event the machine cannot count fails
 * alone, and names why), except the top-down metrics of Intel cores since Ice Lake,
 * which count only in a group led by `slots`: a `topdown-*` event after `slots` joins it; user space only (exclude_kernel: allowed at
 * perf_event_paranoid 2; a page fault is counted at the user instruction that took it),
 * and read with the times it was enabled and running, so that a multiplexed hardware
 * counter is scaled to its whole window.  Reading one costs a read() syscall, about
 * 0.5 us, outside the timed window.
 *
 * inherit (the launcher): the counter starts disabled, is inherited by the child it
 * spawns and enabled when the child execs (enable_on_exec); after the child is reaped the
 * parent's read includes it, and nothing of the launcher's own work. */
#ifndef CPULAB_EVENTS_H
#define CPULAB_EVENTS_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/perf_event.h>) && __has_include(<sys/syscall.h>)
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#define EVENTS_HAVE_PERF 1
#endif
#endif

#define MAX_EVENTS 16

struct events {
    int n;
    int fd[MAX_EVENTS];                /* -1: not counted here, why[i] says why */
    char name[MAX_EVENTS][64];
    char why[MAX_EVENTS][160];
    uint64_t at[MAX_EVENTS][3];        /* value, time enabled, time running at the last mark */
};

/* Open every event of `spec` (a copy is parsed); -1 only on a malformed spec (why in
 * `error`), else 0 whether or not each event opened. */
static inline int events_open(struct events *e, const char *spec, int inherit, char *error, size_t error_size)
{
    char buf[2048];
    e->n = 0;
    if (strlen(spec) >= sizeof buf) {
        snprintf(error, error_size, "--events: longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    strcpy(buf, spec);
    int slots = -1; /* the open `slots` event, leader of the top-down metrics after it */
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        unsigned long long v[4] = {0, 0, 0, 0};
        int got = eq ? sscanf(eq + 1, "%lli:%lli:%lli:%lli", &v[0], &v[1], &v[2], &v[3]) : 0;
        if (!eq || eq == item || (size_t)(eq - item) >= sizeof e->name[0] || got < 2 || e->n == MAX_EVENTS) {
            snprintf(error, error_size, "--events: %s is not NAME=TYPE:CONFIG (at most %d events)", item, MAX_EVENTS);
            return -1;
        }
        int i = e->n++;
        memcpy(e->name[i], item, (size_t)(eq - item));
        e->name[i][eq - item] = '\0';
        e->fd[i] = -1;
        e->why[i][0] = '\0';
#ifdef EVENTS_HAVE_PERF
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.type = (uint32_t)v[0];
        a.config = v[1];
        a.config1 = v[2];
        a.config2 = v[3];
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
        a.inherit = inherit != 0;
        a.disabled = inherit != 0;
        a.enable_on_exec = inherit != 0;
        int leader = slots >= 0 && strncmp(e->name[i], "topdown-", 8) == 0 ? slots : -1;
        e->fd[i] = (int)syscall(SYS_perf_event_open, &a, 0, -1, leader, PERF_FLAG_FD_CLOEXEC);
        if (strcmp(e->name[i], "slots") == 0)
            slots = e->fd[i];
        if (e->fd[i] < 0)
            snprintf(e->why[i], sizeof e->why[i], "perf_event_open: %s", strerror(errno));
#else
        (void)inherit;
        snprintf(e->why[i], sizeof e->why[i], "perf_event_open is not available in this build");
#endif
    }
    return 0;
}

/* Note where every counter is now (before the window). */
static inline void events_mark(struct events *e)
{
    for (int i = 0; i < e->n; i++)
        if (e->fd[i] < 0 || read(e->fd[i], e->at[i], sizeof e->at[i]) != sizeof e->at[i])
            e->at[i][0] = e->at[i][1] = e->at[i][2] = 0;
}

/* What each counter counted since its mark, scaled to the window where it was
 * multiplexed (NAN: not counted, or never running in the window); the mark moves on. */
static inline void events_since(struct events *e, double *out)
{
    for (int i = 0; i < e->n; i++) {
        uint64_t now[3];
        if (e->fd[i] < 0 || read(e->fd[i], now, sizeof now) != sizeof now) {
            out[i] = NAN;
            continue;
        }
        uint64_t value = now[0] - e->at[i][0], enabled = now[1] - e->at[i][1], running = now[2] - e->at[i][2];
        out[i] = running == 0 ? (value == 0 && enabled == 0 ? 0.0 : NAN)
                 : running == enabled ? (double)value : (double)value * ((double)enabled / (double)running);
        memcpy(e->at[i], now, sizeof now);
    }
}

/* ,"event_errors":{"NAME":"why",...} for the events that did not open (nothing if all did). */
static inline void events_print_errors(const struct events *e, FILE *f)
{
    int first = 1;
    for (int i = 0; i < e->n; i++) {
        if (e->fd[i] >= 0)
            continue;
        fprintf(f, "%s\"%s\":\"", first ? ",\"event_errors\":{" : ",", e->name[i]);
        for (const char *c = e->why[i]; *c; c++)
            fputc(*c == '"' || *c == '\\' ? '\'' : *c, f);
        fputc('"', f);
        first = 0;
    }
    if (!first)
        fputc('}', f);
}

#endif
