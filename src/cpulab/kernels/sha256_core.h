/* sha256_core.h - portable SHA-256 (FIPS 180-4), shared by the in-memory and the
 * file-hashing kernels.  Header-only so that each kernel is still one translation
 * unit built with the variant's flags.
 */
#ifndef SHA256_CORE_H
#define SHA256_CORE_H

#include "cpulab.h"

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct sha256_state {
    uint32_t h[8];
    uint64_t length;   /* bytes absorbed */
    uint8_t block[64]; /* partial block */
    size_t fill;
};

/* -DCPULAB_BREAK_KAT flips the low bit of the first round constant (cpulab.h), where the
 * core is the timed code (sha256.c, sha256_file.c).  sha256_shani.c and sha256_openssl.c
 * use it as their reference: they define SHA256_CORE_IS_REFERENCE and break their own code. */
#ifdef SHA256_CORE_IS_REFERENCE
#define SHA256_CORE_BROKEN 0
#else
#define SHA256_CORE_BROKEN K_BROKEN
#endif

static const uint32_t sha256_k[64] = {
    0x428a2f98 ^ SHA256_CORE_BROKEN, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t sha256_ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t sha256_load_be(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One round: 2 rotate-xor trees, Ch and Maj; about 30 simple ops on the critical path
 * of a and e, which is what bounds the portable code near 10-12 cycles/byte. */
#define SHA256_ROUND(a, b, c, d, e, f, g, h, k, w)                                           \
    do {                                                                                      \
        uint32_t t1 = h + (sha256_ror(e, 6) ^ sha256_ror(e, 11) ^ sha256_ror(e, 25)) +       \
                      ((e & f) ^ (~e & g)) + k + w;                                           \
        uint32_t t2 = (sha256_ror(a, 2) ^ sha256_ror(a, 13) ^ sha256_ror(a, 22)) +           \
                      ((a & b) ^ (a & c) ^ (b & c));                                          \
        d += t1;                                                                              \
        h = t1 + t2;                                                                          \
    } while (0)

static void sha256_blocks(uint32_t st[8], const uint8_t *p, size_t nblocks)
{
    for (; nblocks--; p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = sha256_load_be(p + 4 * i);
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = sha256_ror(w[i - 15], 7) ^ sha256_ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = sha256_ror(w[i - 2], 17) ^ sha256_ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
        uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
        /* Eight rounds per step with the roles rotated instead of the variables moved. */
        for (int i = 0; i < 64; i += 8) {
            SHA256_ROUND(a, b, c, d, e, f, g, h, sha256_k[i + 0], w[i + 0]);
            SHA256_ROUND(h, a, b, c, d, e, f, g, sha256_k[i + 1], w[i + 1]);
            SHA256_ROUND(g, h, a, b, c, d, e, f, sha256_k[i + 2], w[i + 2]);
            SHA256_ROUND(f, g, h, a, b, c, d, e, sha256_k[i + 3], w[i + 3]);
            SHA256_ROUND(e, f, g, h, a, b, c, d, sha256_k[i + 4], w[i + 4]);
            SHA256_ROUND(d, e, f, g, h, a, b, c, sha256_k[i + 5], w[i + 5]);
            SHA256_ROUND(c, d, e, f, g, h, a, b, sha256_k[i + 6], w[i + 6]);
            SHA256_ROUND(b, c, d, e, f, g, h, a, sha256_k[i + 7], w[i + 7]);
        }
        st[0] += a, st[1] += b, st[2] += c, st[3] += d;
        st[4] += e, st[5] += f, st[6] += g, st[7] += h;
    }
}

static inline void sha256_init(struct sha256_state *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->length = 0;
    s->fill = 0;
}

static inline void sha256_update(struct sha256_state *s, const uint8_t *p, size_t n)
{
    s->length += n;
    if (s->fill) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->block + s->fill, p, take);
        s->fill += take, p += take, n -= take;
        if (s->fill < 64)
            return;
        sha256_blocks(s->h, s->block, 1);
        s->fill = 0;
    }
    sha256_blocks(s->h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    memcpy(s->block, p, n);
    s->fill = n;
}

static inline void sha256_final(struct sha256_state *s, uint8_t out[32])
{
    uint64_t bits = s->length * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = (s->fill < 56 ? 56 : 120) - s->fill;
    for (int i = 0; i < 8; i++)
        pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i + 0] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

static inline void sha256(const uint8_t *p, size_t n, uint8_t out[32])
{
    struct sha256_state s;
    sha256_init(&s);
    sha256_update(&s, p, n);
    sha256_final(&s, out);
}

static inline int sha256_hex_equals(const uint8_t d[32], const char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++)
        if (hex[2 * i] != digits[d[i] >> 4] || hex[2 * i + 1] != digits[d[i] & 15])
            return 0;
    return 1;
}

/* FIPS 180-4 example vectors (and the 10^6 x 'a' one); 0 = all match. */
static int sha256_self_test(void)
{
    static const struct { const char *msg; const char *hex; } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    uint8_t d[32];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sha256((const uint8_t *)v[i].msg, strlen(v[i].msg), d);
        if (!sha256_hex_equals(d, v[i].hex))
            return 1;
    }
    /* One million 'a', fed in uneven pieces to exercise the partial-block path. */
    struct sha256_state s;
    uint8_t a[997];
    memset(a, 'a', sizeof a);
    sha256_init(&s);
    for (size_t left = 1000000; left;) {
        size_t n = left < sizeof a ? left : sizeof a;
        sha256_update(&s, a, n);
        left -= n;
    }
    sha256_final(&s, d);
    return !sha256_hex_equals(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* The message the in-memory kernels hash: `size` bytes (param, default 16384) from a
 * 64-bit LCG, the same for every kernel and variant.  NULL (with k_fail) on bad input. */
static inline uint8_t *sha256_message(size_t *size_out)
{
    int64_t size = k_param_int("size", 16384);
    if (size < 1) {
        k_fail("size must be at least 1 byte, got %lld", (long long)size);
        return NULL;
    }
    uint8_t *buf = malloc((size_t)size);
    if (!buf) {
        k_fail("cannot allocate %lld bytes", (long long)size);
        return NULL;
    }
    uint64_t x = 0x0123456789abcdefull;
    for (int64_t i = 0; i < size; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
    k_note("working_set_bytes", (double)size);
    *size_out = (size_t)size;
    return buf;
}

#endif
