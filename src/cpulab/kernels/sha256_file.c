/* sha256_file.c - SHA-256 of a whole file, as sha256deep does it: ordinary read()
 * calls into one buffer, each chunk fed to the portable core (sha256_core.h).
 *
 * Parameters:
 *   path    the file to hash (the workload's prepare hook makes one and fills this in)
 *   expect  its SHA-256 in hex, computed by Python's hashlib (also from prepare)
 *   size    the file size in bytes the point is about (default 10000000); if given it
 *           must match the file, so a stale path cannot pass for another size
 *   buffer  bytes per read() call (default 1 MiB)
 *   cache   warm: the file stays in the page cache (measures hashing + copying out of
 *           the cache); cold: its cached pages are dropped before every pass (adds the
 *           device reads)
 * Unit: bytes; one repetition is one pass over the whole file.  The harness reports
 * user_s and sys_s per sample beside ns: real, user and sys as time(1) would.
 *
 * k_verify hashes the file once and compares with `expect`, and runs the FIPS 180-4
 * self-test of the core.
 */
#define _FILE_OFFSET_BITS 64 /* i386 builds: files over 2 GiB */
#define _POSIX_C_SOURCE 200809L
#include "cpulab.h"
#include "sha256_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char k_unit[] = "bytes";

struct ctx {
    int fd;
    int cold;
    const char *path;
    const char *expect;
    uint64_t file_bytes;
    size_t bufsize;
    uint8_t *buf;
};

/* One pass: rewind, read() until end of file, hash what arrives.  0 = ok, else errno. */
static int hash_file(struct ctx *c, uint8_t out[32], uint64_t *total)
{
    struct sha256_state s;
    uint64_t got = 0;
    if (lseek(c->fd, 0, SEEK_SET) != 0)
        return errno ? errno : EIO;
    sha256_init(&s);
    for (;;) {
        ssize_t n = read(c->fd, c->buf, c->bufsize); /* a system call + copy from the page cache */
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        sha256_update(&s, c->buf, (size_t)n); /* ~10 cycles/byte: the dominant cost when warm */
        got += (uint64_t)n;
    }
    sha256_final(&s, out);
    *total = got;
    return 0;
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->path = k_param_str("path", "");
    c->expect = k_param_str("expect", "");
    const char *cache = k_param_str("cache", "warm");
    int64_t bufsize = k_param_int("buffer", 1048576);
    if (!c->path[0]) {
        k_fail("no file: parameter path is empty (the workload's prepare hook sets it)");
        return NULL;
    }
    if (strcmp(cache, "warm") != 0 && strcmp(cache, "cold") != 0) {
        k_fail("cache must be warm or cold, got %s", cache);
        return NULL;
    }
    c->cold = strcmp(cache, "cold") == 0;
    if (bufsize < 1 || bufsize > (int64_t)1 << 30) {
        k_fail("buffer must be 1 byte .. 1 GiB, got %lld", (long long)bufsize);
        return NULL;
    }
    c->bufsize = (size_t)bufsize;
    c->fd = open(c->path, O_RDONLY);
    if (c->fd < 0) {
        k_fail("cannot open %s: %s", c->path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(c->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        k_fail("%s is not a regular file", c->path);
        return NULL;
    }
    c->file_bytes = (uint64_t)st.st_size;
    int64_t size = k_param_int("size", -1); /* -1: not given */
    if (size >= 0 && (uint64_t)size != c->file_bytes) {
        k_fail("%s has %llu bytes, parameter size says %lld", c->path, (unsigned long long)c->file_bytes,
               (long long)size);
        return NULL;
    }
    /* Page-aligned, as a stdio or sha256deep buffer from malloc of 1 MiB would be. */
    void *p = NULL;
    if (posix_memalign(&p, 4096, c->bufsize) != 0) {
        k_fail("cannot allocate a %zu-byte buffer", c->bufsize);
        return NULL;
    }
    c->buf = p;
    memset(c->buf, 0, c->bufsize);
    /* Dirty pages (a file just written) cannot be dropped: write them back first. */
    if (c->cold)
        fdatasync(c->fd);
    k_note("working_set_bytes", (double)c->bufsize);
    k_note("file_bytes", (double)c->file_bytes);
    return c;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    uint8_t d[32];
    uint64_t total = 0;
    if (sha256_self_test()) {
        k_fail("portable core fails the FIPS 180-4 vectors");
        return 1;
    }
    if (strlen(c->expect) != 64) {
        k_fail("parameter expect must be a 64-digit hex SHA-256 (the prepare hook sets it), got '%s'", c->expect);
        return 1;
    }
    int err = hash_file(c, d, &total);
    if (err) {
        k_fail("reading %s: %s", c->path, strerror(err));
        return 1;
    }
    char lower[65];
    for (int i = 0; i < 64; i++)
        lower[i] = (char)(c->expect[i] >= 'A' && c->expect[i] <= 'F' ? c->expect[i] - 'A' + 'a' : c->expect[i]);
    lower[64] = 0;
    if (total != c->file_bytes || !sha256_hex_equals(d, lower)) {
        k_fail("SHA-256 of %s (%llu bytes read) does not match expect %s", c->path,
               (unsigned long long)total, c->expect);
        return 1;
    }
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint8_t digest[32];
    uint64_t h = 0, total = 0;
    for (uint64_t r = 0; r < reps; r++) {
        /* Cold: drop the file's (clean) pages so this pass reads the device.  This call is
         * timed; it costs about a microsecond per MB dropped, little against reading the
         * same pages back from the device. */
        if (c->cold)
            posix_fadvise(c->fd, 0, 0, POSIX_FADV_DONTNEED);
        int err = hash_file(c, digest, &total);
        if (err || total != c->file_bytes) {
            /* The file verified a moment ago; a failure now means it changed under us. */
            fprintf(stderr, "sha256_file: reading %s failed: %s\n", c->path, err ? strerror(err) : "short file");
            exit(3);
        }
        uint64_t w;
        memcpy(&w, digest, sizeof w);
        h = k_mix(h, w);
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)c->file_bytes * (double)reps;
}
