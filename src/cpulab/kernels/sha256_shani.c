/* sha256_shani.c - SHA-256 (FIPS 180-4) of an in-memory buffer with the x86 SHA
 * extensions (SHA256RNDS2, SHA256MSG1, SHA256MSG2).
 *
 * Parameters: size (bytes hashed per repetition, default 16384, as sha256.c).
 * Unit: bytes.  The block function is compiled with __attribute__((target)), so a
 * plain -O2 build contains it; k_setup asks CPUID (leaf 7, EBX bit 29) whether the CPU
 * can run it and skips otherwise, and on non-x86 builds.
 *
 * Verified before timing, through the same update/final code that k_run uses: the
 * FIPS 180-4 example vectors, the one-million-'a' vector fed in uneven pieces, and
 * agreement with the portable core (sha256_core.h) on every length 0..300 and on
 * the whole timed buffer.
 */
#include "cpulab.h"
#define SHA256_CORE_IS_REFERENCE /* the portable core checks this kernel: keep it whole */
#include "sha256_core.h"

#include <stdlib.h>
#include <string.h>

const char k_unit[] = "bytes";

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SHANI 1
#include <cpuid.h>
#include <immintrin.h>

/* SHA extensions need SHA (leaf 7 EBX bit 29), plus SSSE3 (PSHUFB for the byte swap)
 * and SSE4.1 (PBLENDW) from leaf 1 ECX bits 9 and 19. */
static int cpu_has_shani(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 9)) || !(c & (1u << 19)))
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1;
}

/* The round constants four at a time, in the order SHA256RNDS2 consumes them. */
#define K4(i) _mm_loadu_si128((const __m128i *)&sha256_k[4 * (i)])

/* Four rounds: SHA256RNDS2 does two rounds on the (ABEF, CDGH) halves of the state
 * with W+K from the low two dwords of its third operand; PSHUFD moves the upper pair
 * down for the next two.  RNDS2 is the critical path (about 3-4 cycles latency each on
 * current cores, 2 per 4 rounds): 32 of them per 64-byte block. */
#define QROUND(w, i)                                                         \
    do {                                                                     \
        __m128i wk = _mm_add_epi32((w), K4(i));                              \
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);                        \
        abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0e)); \
    } while (0)

/* The next four schedule words W[t+16..t+19] from w0 = W[t..t+3] .. w3 = W[t+12..t+15]:
 * MSG1 adds sigma0(W[t+1..t+4]), PALIGNR supplies W[t+9..t+12], MSG2 adds sigma1 of
 * W[t+14..t+17] (computing the last two from its own first two).  Off the critical path. */
#define SCHED(w0, w1, w2, w3) \
    _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32((w0), (w1)), _mm_alignr_epi8((w3), (w2), 4)), (w3))

__attribute__((target("sha,sse4.1")))
static void shani_blocks(uint32_t st[8], const uint8_t *p, size_t nblocks)
{
    /* The instructions want the state as ABEF and CDGH (A in the top dword). */
    __m128i dcba = _mm_loadu_si128((const __m128i *)&st[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&st[4]);
    __m128i badc = _mm_shuffle_epi32(dcba, 0xb1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1b);
    __m128i abef = _mm_alignr_epi8(badc, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, badc, 0xf0);
    /* PSHUFB mask: big-endian message words to little-endian dwords.  -DCPULAB_BREAK_KAT
     * reads byte 2 for byte 3 of the first word of each 16 bytes. */
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll ^ K_BROKEN);

    for (; nblocks--; p += 64) {
        __m128i abef0 = abef, cdgh0 = cdgh;
        __m128i w0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 0)), bswap);
        __m128i w1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), bswap);
        __m128i w2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 32)), bswap);
        __m128i w3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 48)), bswap);
        /* Rounds 0-47: use four words, then replace them with the ones 16 later. */
        for (int i = 0; i < 12; i += 4) {
            QROUND(w0, i + 0); w0 = SCHED(w0, w1, w2, w3);
            QROUND(w1, i + 1); w1 = SCHED(w1, w2, w3, w0);
            QROUND(w2, i + 2); w2 = SCHED(w2, w3, w0, w1);
            QROUND(w3, i + 3); w3 = SCHED(w3, w0, w1, w2);
        }
        /* Rounds 48-63: the schedule is complete. */
        QROUND(w0, 12);
        QROUND(w1, 13);
        QROUND(w2, 14);
        QROUND(w3, 15);
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }

    /* Back to A..H order in memory. */
    __m128i feba = _mm_shuffle_epi32(abef, 0x1b);
    __m128i ghcd = _mm_shuffle_epi32(cdgh, 0xb1);
    _mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(feba, ghcd, 0xf0));
    _mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(ghcd, feba, 8));
}
#endif /* x86 */

#ifdef HAVE_SHANI
/* Streaming update and padding, the same logic as sha256_core.h but calling the
 * SHA-NI block function; used by both k_verify and k_run. */
static void shani_update(struct sha256_state *s, const uint8_t *p, size_t n)
{
    s->length += n;
    if (s->fill) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->block + s->fill, p, take);
        s->fill += take, p += take, n -= take;
        if (s->fill < 64)
            return;
        shani_blocks(s->h, s->block, 1);
        s->fill = 0;
    }
    if (n >= 64)
        shani_blocks(s->h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    memcpy(s->block, p, n);
    s->fill = n;
}

static void shani_final(struct sha256_state *s, uint8_t out[32])
{
    uint64_t bits = s->length * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = (s->fill < 56 ? 56 : 120) - s->fill;
    for (int i = 0; i < 8; i++)
        pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
    shani_update(s, pad, padlen + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i + 0] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

static void shani_sha256(const uint8_t *p, size_t n, uint8_t out[32])
{
    struct sha256_state s;
    sha256_init(&s);
    shani_update(&s, p, n);
    shani_final(&s, out);
}
#endif

struct ctx {
    size_t size;
    uint8_t *buf;
};

void *k_setup(void)
{
#ifndef HAVE_SHANI
    k_skip("SHA extensions are x86 only");
    return NULL;
#else
    if (!cpu_has_shani()) {
        k_skip("CPU has no SHA extensions");
        return NULL;
    }
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->buf = sha256_message(&c->size);
    if (!c->buf)
        return NULL;
    return c;
#endif
}

int k_verify(void *ctx)
{
#ifndef HAVE_SHANI
    (void)ctx;
    return sha256_self_test(); /* never reached: k_setup skipped */
#else
    struct ctx *c = ctx;
    static const struct { const char *msg; const char *hex; } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    uint8_t d[32], ref[32];
    if (sha256_self_test()) {
        k_fail("portable core fails the FIPS 180-4 vectors");
        return 1;
    }
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        shani_sha256((const uint8_t *)v[i].msg, strlen(v[i].msg), d);
        if (!sha256_hex_equals(d, v[i].hex)) {
            k_fail("SHA-NI digest of FIPS 180-4 vector %zu is wrong", i);
            return 1;
        }
    }
    /* One million 'a' in uneven pieces: partial blocks and multi-block runs. */
    struct sha256_state s;
    uint8_t a[997];
    memset(a, 'a', sizeof a);
    sha256_init(&s);
    for (size_t left = 1000000; left;) {
        size_t n = left < sizeof a ? left : sizeof a;
        shani_update(&s, a, n);
        left -= n;
    }
    shani_final(&s, d);
    if (!sha256_hex_equals(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")) {
        k_fail("SHA-NI digest of one million 'a' is wrong");
        return 1;
    }
    /* Cross-check against the portable core: every short length (all padding cases)
     * and the whole pseudo-random buffer k_run hashes. */
    for (size_t n = 0; n <= 300 && n <= c->size; n++) {
        sha256(c->buf, n, ref);
        shani_sha256(c->buf, n, d);
        if (memcmp(d, ref, 32) != 0) {
            k_fail("SHA-NI and portable digests differ at length %zu", n);
            return 1;
        }
    }
    sha256(c->buf, c->size, ref);
    shani_sha256(c->buf, c->size, d);
    if (memcmp(d, ref, 32) != 0) {
        k_fail("SHA-NI and portable digests differ on the %zu-byte buffer", c->size);
        return 1;
    }
    return 0;
#endif
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    uint64_t h = 0;
#ifdef HAVE_SHANI
    struct ctx *c = ctx;
    uint8_t digest[32];
    for (uint64_t r = 0; r < reps; r++) {
        c->buf[0] ^= (uint8_t)r; /* a new message each time: nothing to hoist */
        shani_sha256(c->buf, c->size, digest);
        uint64_t w;
        memcpy(&w, digest, sizeof w);
        h = k_mix(h, w);
    }
#else
    (void)ctx, (void)reps;
#endif
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)c->size * (double)reps;
}
