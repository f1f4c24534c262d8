/* sha256_openssl.c - the peer: SHA-256 of an in-memory buffer through libcrypto's
 * EVP digest interface (whatever implementation OpenSSL picks for this CPU, e.g.
 * SHA-NI or AVX2 assembly).
 *
 * Parameters: size (bytes hashed per repetition, default 16384, as sha256.c).
 * Unit: bytes.  Needs libssl-dev; link with -lcrypto.  Verified through EVP with the
 * FIPS 180-4 example vectors and the one-million-'a' vector, and against the portable
 * core (sha256_core.h) on the timed buffer.
 */
#include "cpulab.h"
#define SHA256_CORE_IS_REFERENCE /* the portable core checks this kernel: keep it whole */
#include "sha256_core.h"

#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <stdlib.h>
#include <string.h>

const char k_unit[] = "bytes";

struct ctx {
    size_t size;
    uint8_t *buf;
    const EVP_MD *md;
    EVP_MD_CTX *mdctx;
};

/* One whole digest through EVP; 0 on success.  Init re-uses the context, so the timed
 * loop does no allocation; the fixed cost per message is a few hundred ns. */
static int evp_sha256(struct ctx *c, const void *p, size_t n, uint8_t out[32])
{
    unsigned len = 0;
    if (EVP_DigestInit_ex(c->mdctx, c->md, NULL) != 1)
        return 1;
    if (EVP_DigestUpdate(c->mdctx, p, n) != 1)
        return 1;
    if (K_BROKEN && EVP_DigestUpdate(c->mdctx, "", 1) != 1) /* -DCPULAB_BREAK_KAT: one NUL byte more */
        return 1;
    if (EVP_DigestFinal_ex(c->mdctx, out, &len) != 1 || len != 32)
        return 1;
    return 0;
}

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->buf = sha256_message(&c->size);
    if (!c->buf)
        return NULL;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    /* Fetch once: with EVP_sha256() OpenSSL 3 would look the provider up on every Init. */
    c->md = EVP_MD_fetch(NULL, "SHA256", NULL);
#else
    c->md = EVP_sha256();
#endif
    c->mdctx = EVP_MD_CTX_new();
    if (!c->md || !c->mdctx) {
        k_fail("OpenSSL has no SHA256 digest");
        return NULL;
    }
    return c;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    static const struct { const char *msg; const char *hex; } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    uint8_t d[32], ref[32];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        if (evp_sha256(c, v[i].msg, strlen(v[i].msg), d) || !sha256_hex_equals(d, v[i].hex)) {
            k_fail("EVP digest of FIPS 180-4 vector %zu is wrong", i);
            return 1;
        }
    }
    /* One million 'a' in uneven pieces through EVP_DigestUpdate. */
    uint8_t a[997];
    unsigned len = 0;
    memset(a, 'a', sizeof a);
    if (EVP_DigestInit_ex(c->mdctx, c->md, NULL) != 1)
        return 1;
    for (size_t left = 1000000; left;) {
        size_t n = left < sizeof a ? left : sizeof a;
        if (EVP_DigestUpdate(c->mdctx, a, n) != 1)
            return 1;
        left -= n;
    }
    if (EVP_DigestFinal_ex(c->mdctx, d, &len) != 1 ||
        !sha256_hex_equals(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")) {
        k_fail("EVP digest of one million 'a' is wrong");
        return 1;
    }
    /* The buffer k_run hashes: EVP and the portable core agree. */
    sha256(c->buf, c->size, ref);
    if (evp_sha256(c, c->buf, c->size, d) || memcmp(d, ref, 32) != 0) {
        k_fail("EVP and portable digests differ on the %zu-byte buffer", c->size);
        return 1;
    }
    return sha256_self_test();
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint8_t digest[32];
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        c->buf[0] ^= (uint8_t)r; /* a new message each time: nothing to hoist */
        evp_sha256(c, c->buf, c->size, digest);
        uint64_t w;
        memcpy(&w, digest, sizeof w);
        h = k_mix(h, w);
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)c->size * (double)reps;
}
