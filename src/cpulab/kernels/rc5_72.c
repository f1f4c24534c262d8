/* rc5_72.c - distributed.net RC5-72 key check: RC5-32/12/9, blocks of consecutive keys.
 *
 * Parameters:
 *   core  portable | simd (default simd).  Both do the first 2.5 key-schedule steps,
 *         which read only L0 and L1, once per run of 256 keys as distributed.net
 *         clients do (~75.5 dependent steps a key).  portable: plain C, one key at a
 *         time.  simd: several keys at once, the widest of AVX-512F (16 keys per
 *         vector), AVX2 (8) and SSE2 (4) the CPU has, chosen at run time; each path
 *         interleaves four independent vectors to hide the latency of the chain (with
 *         SSE2's and AVX2's 16 registers, their L words kept in memory, and the passes
 *         kept loops: unrolled, those cores outgrow the instruction cache), where the
 *         core is then bound by issue (on a Zen 4 guest about 20 cycles a key with
 *         AVX-512 and 41 with AVX2, against bounds of 16.4 and 33: bench/kernel_bounds.py).
 *         On other architectures the simd core is the portable one (note simd_lanes = 1).
 *   keys  keys checked per repetition (one block), default 4096.
 *   isa   auto | avx512 | avx2 | sse2 (default auto): force one simd path (tests);
 *         a path this CPU lacks is "skipped".
 * Unit: keys.  k_run(ctx, reps) checks reps consecutive blocks, continuing where the
 * previous call stopped, against a fixed plaintext/ciphertext pair whose key lies in
 * the first block; the checksum folds each block's XOR of ciphertext words and every
 * match found (its key number), so both cores return the same checksum for the same
 * calls.
 *
 * Keys.  A key is 9 bytes K[0..8], loaded little-endian into the key words
 *   L[0] = K0 | K1<<8 | K2<<16 | K3<<24,  L[1] = K4..K7,  L[2] = K8.
 * Key number n (a 72-bit counter) is the key whose bytes, read big-endian, are n:
 * K8 is the lowest digit.  So consecutive keys differ in K8 (the top byte of the
 * key, which distributed.net calls key.hi and also increments fastest), carrying
 * into K7, K6, ... K0.  In a run of 256 keys only L[2] changes.
 *
 * Known answers (k_verify, both cores, before anything is timed):
 *   1. The RC5-32/12/16 test vectors of R. L. Rivest, "The RC5 Encryption Algorithm"
 *      (revised 1997, people.csail.mit.edu/rivest/Rivest-rc5rev.pdf, "Test vectors"),
 *      through a textbook reference (loops, any key length b) and through each core's
 *      own key-schedule/encrypt code instantiated for c = 4 key words (b = 16).
 *   2. A planted key: the reference encrypts the plaintext with a key inside a block
 *      of 9-byte keys that crosses a 256-key boundary and ends in a partial vector;
 *      each core's block check must report exactly that key, the same XOR of
 *      ciphertexts as the reference, and no key in the following block.
 */
#include "cpulab.h"

#include <stdlib.h>
#include <string.h>

/* The vector cores, x86 only, and only in a build that may run them: cpulab compiles a
 * build with the `core` choices its experiment's points run (Param.compiled), and with
 * CPULAB_CORE_PORTABLE alone the vector cores are left out (1.4 of the file's 2.0 s of
 * compiling at -O2; the seeds' link formats run the portable core only). */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !(defined(CPULAB_CORE_PORTABLE) && !defined(CPULAB_CORE_SIMD))
#define RC5_VECTORS 1
#include <immintrin.h>
#endif

const char k_unit[] = "keys";

#define RC5_T 26          /* 2r + 2 subkeys for r = 12 rounds */
#define RC5_P 0xb7e15163u /* Odd((e - 2) 2^32), Rivest's magic constants */
#define RC5_Q 0x9e3779b9u /* Odd((phi - 1) 2^32) */

static inline uint32_t rotl32(uint32_t x, uint32_t n)
{
    n &= 31; /* compiles to one ROL */
    return (x << n) | (x >> ((32 - n) & 31));
}

/* ---- the textbook reference: any key length, loops, used only by k_verify ---------- */

static void rc5_ref_encrypt(const uint8_t *k, int b, const uint32_t pt[2], uint32_t ct[2])
{
    uint32_t L[64] = {0}, S[RC5_T];
    int c = b > 0 ? (b + 3) / 4 : 1;
    for (int i = b - 1; i >= 0; i--)
        L[i / 4] = (L[i / 4] << 8) + k[i];
    S[0] = RC5_P;
    for (int i = 1; i < RC5_T; i++)
        S[i] = S[i - 1] + RC5_Q;
    uint32_t A = 0, B = 0;
    int n = 3 * (RC5_T > c ? RC5_T : c);
    for (int s = 0, i = 0, j = 0; s < n; s++, i = (i + 1) % RC5_T, j = (j + 1) % c) {
        A = S[i] = rotl32(S[i] + A + B, 3);
        B = L[j] = rotl32(L[j] + A + B, A + B);
    }
    A = pt[0] + S[0];
    B = pt[1] + S[1];
    for (int r = 1; r <= 12; r++) {
        A = rotl32(A ^ B, B) + S[2 * r];
        B = rotl32(B ^ A, A) + S[2 * r + 1];
    }
    ct[0] = A;
    ct[1] = B;
}

/* ---- the cores: rc5_body.h instantiated per vector type ---------------------------- */

typedef void (*rc5_core_fn)(const uint32_t *key, int run, uint32_t pa, uint32_t pb, uint32_t *ca, uint32_t *cb);
/* Each lane's number: a run's L2 words are the first key's plus these (rc5_body.h). */
static const uint32_t rc5_lane[64] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                      32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                      48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

/* A plain subkey store and no barrier in passes 2 and 3, except in the vector cores.
 * There gcc keeps a spilled A in no register of its own: it reloads it from the subkey
 * just stored, a store-to-load round trip on the key's chain; a store it cannot see
 * through (V_SAVE) leaves it a real spill.  And it adds S last (V_APART).  Zen 4, gcc
 * -O2, cycles a key: AVX-512 25.6 -> 24.7 (V_SAVE) -> 23.9 (V_APART); AVX2 74 -> 64
 * (both). */
#define V_SAVE(m, x) ((m) = (x))
#define V_SAVEL(m, x) ((m) = (x)) /* the same for an L word */
#define V_APART(x) ((void)0)
/* Pass 1's subkeys S[i] = P + i*Q.  -DCPULAB_BREAK_KAT flips the low bit of P here, in
 * every core (not in the reference). */
#define RC5_PQ(i) ((RC5_P ^ K_BROKEN) + RC5_Q * (uint32_t)(i))
static const uint32_t rc5_pq[RC5_T] = {
    RC5_PQ(0),  RC5_PQ(1),  RC5_PQ(2),  RC5_PQ(3),  RC5_PQ(4),  RC5_PQ(5),  RC5_PQ(6),
    RC5_PQ(7),  RC5_PQ(8),  RC5_PQ(9),  RC5_PQ(10), RC5_PQ(11), RC5_PQ(12), RC5_PQ(13),
    RC5_PQ(14), RC5_PQ(15), RC5_PQ(16), RC5_PQ(17), RC5_PQ(18), RC5_PQ(19), RC5_PQ(20),
    RC5_PQ(21), RC5_PQ(22), RC5_PQ(23), RC5_PQ(24), RC5_PQ(25)};
#define V_PQ(i) V_SET1(rc5_pq[i])
/* A pass's loop (rc5_body.h) unrolled whole, every index a constant, or kept a loop: the
 * SSE2 and AVX2 cores unrolled are 21-33 KB of code, as much as the 32 KB L1
 * instruction cache holds (a loop of 5,800 instructions of 5.5 bytes ran at 2.7 a cycle
 * on Zen 4 where 5,400 ran at 6: the loop probe); kept loops, 7-15 KB. */
#define RC5_UNROLLED _Pragma("GCC unroll 26")
#define RC5_ROLLED _Pragma("GCC unroll 1")

/* Portable C, one key at a time. */
#define V uint32_t
#define RC5_W 1
#define RC5_NV 1
#define RC5_UNROLL RC5_UNROLLED
#define RC5_ATTR
#define V_LOAD(p) (*(p))
#define V_STORE(p, x) (*(p) = (x))
#define V_SET1(x) ((uint32_t)(x))
#define V_ADD(a, b) ((a) + (b))
#define V_XOR(a, b) ((a) ^ (b))
#define V_ROTL3(x) rotl32((x), 3)
#define V_ROTLV(x, n) rotl32((x), (n))
#if defined(__GNUC__) || defined(__clang__)
#define V_KEEP(x) __asm__("" : "+r"(x)) /* empty: emits nothing, on any architecture */
#else
#define V_KEEP(x) ((void)0)
#endif
#define RC5_C 4
#define RC5_FN portable_c4
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#define RC5_C 3
#define RC5_FN portable_c3
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#undef V
#undef RC5_W
#undef RC5_NV
#undef RC5_UNROLL
#undef RC5_ATTR
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ADD
#undef V_XOR
#undef V_ROTL3
#undef V_ROTLV
#undef V_KEEP

#ifdef RC5_VECTORS
/* The vector cores keep S + A apart from + B and store their subkeys (and, but for
 * AVX-512 with its 32 registers, their L words) where the compiler cannot see. */
#undef V_APART
#define V_APART(x) V_KEEP(x)
#undef V_SAVEL
#define V_SAVEL(m, x) V_SAVE(m, x)

/* SSE2, 4 keys per vector.  SSE2 has no per-lane shift, so x <<< n is a multiply:
 * x * 2^n as a 64-bit product holds x << n in its low half and x >> (32 - n) in its
 * high half.  2^n comes from a float exponent (2^31 converts to 0x80000000, the
 * "integer indefinite", which is 2^31 read unsigned).  ~15 operations a rotate. */
__attribute__((target("sse2"), always_inline)) static inline __m128i sse2_rotlv(__m128i x, __m128i n)
{
    __m128i e = _mm_add_epi32(_mm_slli_epi32(_mm_and_si128(n, _mm_set1_epi32(31)), 23),
                              _mm_set1_epi32(0x3f800000));
    __m128i p = _mm_cvttps_epi32(_mm_castsi128_ps(e));                        /* 2^n */
    __m128i ev = _mm_mul_epu32(x, p);                                         /* lanes 0, 2 */
    __m128i od = _mm_mul_epu32(_mm_srli_epi64(x, 32), _mm_srli_epi64(p, 32)); /* lanes 1, 3 */
    ev = _mm_or_si128(ev, _mm_srli_epi64(ev, 32));                            /* lo|hi -> dwords 0, 2 */
    od = _mm_or_si128(od, _mm_slli_epi64(od, 32));                            /* lo|hi -> dwords 1, 3 */
    __m128i lo = _mm_set_epi32(0, -1, 0, -1);
    return _mm_or_si128(_mm_and_si128(lo, ev), _mm_andnot_si128(lo, od));
}
#define V __m128i
#define RC5_W 4
#define RC5_NV 4
#define RC5_UNROLL RC5_ROLLED
#define RC5_ATTR __attribute__((target("sse2")))
#define V_LOAD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define V_STORE(p, x) _mm_storeu_si128((__m128i *)(void *)(p), (x))
#define V_SET1(x) _mm_set1_epi32((int)(x))
#define V_ADD(a, b) _mm_add_epi32((a), (b))
#define V_XOR(a, b) _mm_xor_si128((a), (b))
#define V_ROTL3(x) _mm_or_si128(_mm_slli_epi32((x), 3), _mm_srli_epi32((x), 29))
#define V_ROTLV(x, n) sse2_rotlv((x), (n))
#define V_KEEP(x) __asm__("" : "+x"(x))
/* The store in the encoding of the code around it: a file built for AVX (-march=native)
 * has VEX code in this core too, and a legacy SSE instruction among VEX ones costs a
 * state transition on some Intel cores. */
#undef V_SAVE
#ifdef __AVX__
#define V_SAVE(m, x) __asm__("vmovdqa {%1, %0|%0, %1}" : "=m"(m) : "x"(x))
#else
#define V_SAVE(m, x) __asm__("movdqa {%1, %0|%0, %1}" : "=m"(m) : "x"(x))
#endif
/* Four vectors in flight, their L words in memory, as in the AVX2 core (below).  Zen 4
 * (isa=sse2), cycles a key: two vectors unrolled, gcc -O2 256, clang 228; four vectors
 * as loops, 187 and 178; with V_SAVE, V_SAVEL and V_APART, 174-176 and 174-175. */
#define RC5_C 3
#define RC5_FN sse2_c3
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#define RC5_C 4
#define RC5_FN sse2_c4
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#undef V
#undef RC5_W
#undef RC5_NV
#undef RC5_ATTR
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ADD
#undef V_XOR
#undef V_ROTL3
#undef V_ROTLV
#undef V_KEEP
#undef RC5_UNROLL

/* AVX2, 8 keys per vector: per-lane shifts exist, a variable rotate is 5 operations
 * (mask the count, shift left, shift right by 32 - n, or). */
__attribute__((target("avx2"), always_inline)) static inline __m256i avx2_rotlv(__m256i x, __m256i n)
{
    n = _mm256_and_si256(n, _mm256_set1_epi32(31));
    return _mm256_or_si256(_mm256_sllv_epi32(x, n),
                           _mm256_srlv_epi32(x, _mm256_sub_epi32(_mm256_set1_epi32(32), n)));
}
#define V __m256i
#define RC5_W 8
#define RC5_NV 4
#define RC5_UNROLL RC5_ROLLED
#define RC5_ATTR __attribute__((target("avx2")))
#define V_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define V_STORE(p, x) _mm256_storeu_si256((__m256i *)(void *)(p), (x))
#define V_SET1(x) _mm256_set1_epi32((int)(x))
#define V_ADD(a, b) _mm256_add_epi32((a), (b))
#define V_XOR(a, b) _mm256_xor_si256((a), (b))
#define V_ROTL3(x) _mm256_or_si256(_mm256_slli_epi32((x), 3), _mm256_srli_epi32((x), 29))
#define V_ROTLV(x, n) avx2_rotlv((x), (n))
#define V_KEEP(x) __asm__("" : "+x"(x))
#undef V_SAVE
#define V_SAVE(m, x) __asm__("vmovdqa {%1, %0|%0, %1}" : "=m"(m) : "x"(x))
/* Four vectors in flight (32 keys), their L words in memory too: 16 registers hold the
 * chains' A and B and the temporaries, and a step's L word is read again only 3 steps
 * later.  Left to the compilers, gcc spilled whatever it chose (~480 more stack
 * accesses).  The chain of a step is 8 operations (A: add, shift, or; B: add, mask,
 * 32 - n, shift, or) of its 12; on Zen 4, 12-step loops of the bare steps in the loop
 * probe took 4.2 cycles a vector-step with 3 vectors, 3.7 with 4, 3.6 with 5 (at 4
 * operations a cycle, 3.0).  Zen 4 (isa=avx2), cycles a key: gcc -O2 57.4 -> 47
 * (3 vectors unrolled; 4 unrolled 49-52, 30 KB of code) -> 40.5-40.9 (4 as loops; 5 as
 * loops 41.5, but a batch of 40 keys straddles the runs of 256 that check_block hands
 * over whole), clang 52.7 -> 46.1 -> 40.7-40.8. */
#define RC5_C 3
#define RC5_FN avx2_c3
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#define RC5_C 4
#define RC5_FN avx2_c4
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#undef V
#undef RC5_W
#undef RC5_NV
#undef RC5_ATTR
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ADD
#undef V_XOR
#undef V_ROTL3
#undef V_ROTLV
#undef V_KEEP
#undef RC5_UNROLL
#undef V_SAVEL
#define V_SAVEL(m, x) ((m) = (x))

/* AVX-512F, 16 keys per vector: VPROLD / VPROLVD rotate in one instruction, by an
 * immediate or per lane (the count taken mod 32 by the hardware). */
#define V __m512i
#define RC5_W 16
#define RC5_NV 4
#define RC5_UNROLL RC5_UNROLLED /* 17 KB: as loops, no faster (gcc 1% slower) */
#define RC5_ATTR __attribute__((target("avx512f")))
#define V_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define V_STORE(p, x) _mm512_storeu_si512((void *)(p), (x))
#define V_SET1(x) _mm512_set1_epi32((int)(x))
#define V_ADD(a, b) _mm512_add_epi32((a), (b))
#define V_XOR(a, b) _mm512_xor_si512((a), (b))
#define V_ROTL3(x) _mm512_rol_epi32((x), 3)
#define V_ROTLV(x, n) _mm512_rolv_epi32((x), (n))
#define V_KEEP(x) __asm__("" : "+v"(x))
#undef V_SAVE
#define V_SAVE(m, x) __asm__("vmovdqa64 {%1, %0|%0, %1}" : "=m"(m) : "v"(x))
/* gcc makes each from an immediate in a general register, two operations more on a vector
 * pipe; a broadcast from memory is a load.  (clang folds V_SET1 of the table into the add
 * as an embedded broadcast, better still.) */
#ifndef __clang__
#undef V_PQ
#define V_PQ(i)                                                                           \
    __extension__({                                                                       \
        __m512i pq_;                                                                      \
        __asm__("vpbroadcastd {%1, %0|%0, %1}" : "=v"(pq_) : "m"(rc5_pq[i]));              \
        pq_;                                                                              \
    })
#endif
#define RC5_C 3
#define RC5_FN avx512_c3
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#define RC5_C 4
#define RC5_FN avx512_c4
#include "rc5_body.h"
#undef RC5_C
#undef RC5_FN
#undef V
#undef RC5_W
#undef RC5_NV
#undef RC5_ATTR
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ADD
#undef V_XOR
#undef V_ROTL3
#undef V_ROTLV
#undef V_KEEP
#undef V_APART
#undef V_SAVE
#undef V_PQ
#undef RC5_UNROLL
#endif /* RC5_VECTORS */

struct isa {
    const char *name;
    int lanes;          /* keys per vector */
    int batch;          /* keys per call of the core: lanes x interleaved vectors */
    rc5_core_fn c3, c4; /* 72-bit keys (vector cores: ca only); 16-byte keys (Rivest's vectors) */
};

/* Portable blocks go through check_block_portable (portable_c3), not c3. */
static const struct isa isa_portable = {"portable", 1, 1, NULL, portable_c4};
#ifdef RC5_VECTORS
static const struct isa isa_list[] = {
    {"avx512", 16, 64, avx512_c3, avx512_c4},
    {"avx2", 8, 32, avx2_c3, avx2_c4},
    {"sse2", 4, 16, sse2_c3, sse2_c4},
};

static int isa_supported(const struct isa *s)
{
    __builtin_cpu_init();
    if (strcmp(s->name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f");
    if (strcmp(s->name, "avx2") == 0)
        return __builtin_cpu_supports("avx2");
    return __builtin_cpu_supports("sse2");
}
#endif
#define MAX_BATCH 64

/* ---- key numbers and blocks ----------------------------------------------------------- */

/* A 72-bit key number: hi = K0 (bits 64..71), lo = K1..K8 (K8 lowest). */
struct keyno {
    uint64_t lo;
    uint32_t hi;
};

static struct keyno keyno_add(struct keyno k, uint64_t n)
{
    uint64_t lo = k.lo + n;
    k.hi = (k.hi + (lo < k.lo)) & 0xff;
    k.lo = lo;
    return k;
}

static void keyno_bytes(struct keyno k, uint8_t K[9])
{
    K[0] = (uint8_t)k.hi;
    for (int i = 1; i < 9; i++)
        K[i] = (uint8_t)(k.lo >> (8 * (8 - i)));
}

/* The key words of key number k (see the header: K8 in L2, K4..K7 in L1, K0..K3 in L0). */
static void keyno_words(struct keyno k, uint32_t *L0, uint32_t *L1, uint32_t *L2)
{
    *L2 = (uint32_t)(k.lo & 0xff);
    *L1 = __builtin_bswap32((uint32_t)(k.lo >> 8));
    *L0 = __builtin_bswap32((uint32_t)(k.lo >> 40)) | k.hi;
}

struct block_result {
    uint32_t matches;  /* keys whose ciphertext equals the target */
    uint64_t first;    /* index in the block of the first match */
    uint32_t digest;   /* XOR of the first ciphertext word of every key checked */
};

/* Steps 0, 1 and the A half of step 2 of the key schedule of a 72-bit key read only
 * L0 and L1, the same for a run of 256 keys: done once per run, as in distributed.net
 * clients.  pre[] = S0 S1 S2 L0' L1' (after those steps, A = S2 and B = L1'). */
static void rc5_prefix(uint32_t L0, uint32_t L1, uint32_t pre[5])
{
    uint32_t A, B;
    A = pre[0] = rotl32(RC5_P, 3);                           /* step 0, A = B = 0 */
    B = pre[3] = rotl32(L0 + A, A);
    A = pre[1] = rotl32(RC5_P + RC5_Q + A + B, 3);           /* step 1 */
    B = pre[4] = rotl32(L1 + A + B, A + B);
    pre[2] = rotl32(RC5_P + 2 * RC5_Q + A + B, 3);           /* step 2, A half */
}

/* XOR into *digest the first ciphertext word of keys 0 .. count - 1, and count those
 * whose first word is ct[0]: candidates, the key (or one in 2^32 of the others).
 * Inlined with a constant count, a loop the compiler vectorizes at -O2 too. */
static inline __attribute__((always_inline)) void tally(const uint32_t *ca, int count, uint32_t ct0,
                                                        uint32_t *digest, uint32_t *candidates)
{
    for (int l = 0; l < count; l++) {
        *digest ^= ca[l];
        *candidates += ca[l] == ct0;
    }
}

/* Check n keys from `start` against (pt -> ct) with one core.  The core takes a batch of
 * `batch` keys (a constant at each call: check_with); lanes past the end of the block are
 * ignored.  In the common case the batch lies in one run of 256 keys, and it reaches the
 * core as three words and the run's prefix, broadcast there: a key array written a word
 * at a time and read back in vectors cost ~1 cycle a key beside the AVX-512 core's ~20
 * (the loads waited for the stores).  The core gives each key's first ciphertext word;
 * a key whose first word matches is confirmed by the reference. */
static inline __attribute__((always_inline)) struct block_result
check_block(const struct isa *s, const int batch, struct keyno start, uint64_t n, const uint32_t pt[2],
            const uint32_t ct[2])
{
    struct block_result r = {0, 0, 0};
    uint32_t key[8 * MAX_BATCH], ca[MAX_BATCH], cb[MAX_BATCH]; /* L0 L1 L2, then the prefix */
    for (uint64_t done = 0; done < n; done += (uint64_t)batch) {
        struct keyno k = keyno_add(start, done);
        uint32_t L0, L1, L2;
        keyno_words(k, &L0, &L1, &L2);
        const int run = L2 + (uint32_t)batch <= 256;
        uint32_t pre[5];
        if (run) {
            key[0] = L0;
            key[batch] = L1;
            key[2 * batch] = L2;
            rc5_prefix(L0, L1, pre);
            for (int w = 0; w < 5; w++)
                key[(3 + w) * batch] = pre[w];
        } else {
            for (int l = 0; l < batch; l++) {
                keyno_words(keyno_add(k, (uint64_t)l), &key[l], &key[batch + l], &key[2 * batch + l]);
                rc5_prefix(key[l], key[batch + l], pre);
                for (int w = 0; w < 5; w++)
                    key[(3 + w) * batch + l] = pre[w];
            }
        }
        s->c3(key, run, pt[0], pt[1], ca, cb); /* the work: ~78 dependent steps per key */
        const int count = n - done >= (uint64_t)batch ? batch : (int)(n - done);
        uint32_t digest = 0, candidates = 0;
        if (count == batch)
            tally(ca, batch, ct[0], &digest, &candidates);
        else /* the block's last, partial batch */
            tally(ca, count, ct[0], &digest, &candidates);
        r.digest ^= digest;
        if (candidates) /* rare */
            for (int l = 0; l < count; l++)
                if (ca[l] == ct[0]) {
                    uint8_t K[9];
                    uint32_t c2[2];
                    keyno_bytes(keyno_add(k, (uint64_t)l), K);
                    rc5_ref_encrypt(K, 9, pt, c2);
                    if (c2[1] == ct[1] && r.matches++ == 0)
                        r.first = done + (uint64_t)l;
                }
    }
    return r;
}

/* check_block with the core's batch as a constant. */
static struct block_result check_with(const struct isa *s, struct keyno start, uint64_t n, const uint32_t pt[2],
                                      const uint32_t ct[2])
{
    switch (s->batch) {
    case 64:
        return check_block(s, 64, start, n, pt, ct);
    case 32:
        return check_block(s, 32, start, n, pt, ct);
    default:
        return check_block(s, 16, start, n, pt, ct);
    }
}

/* check_block for the portable core: one key at a time, the prefix redone when L2
 * wraps (every 256 keys).  Per key: ~75.5 dependent steps of ~4 cycles. */
static struct block_result check_block_portable(struct keyno start, uint64_t n, const uint32_t pt[2],
                                                const uint32_t ct[2])
{
    struct block_result r = {0, 0, 0};
    uint32_t key[8], ca, cb; /* L0 L1 L2, then the prefix */
    keyno_words(start, &key[0], &key[1], &key[2]);
    rc5_prefix(key[0], key[1], key + 3);
    for (uint64_t i = 0; i < n; i++) {
        portable_c3(key, 0, pt[0], pt[1], &ca, &cb);
        r.digest ^= ca;
        if (ca == ct[0] && cb == ct[1] && r.matches++ == 0)
            r.first = i;
        if (++key[2] == 256) { /* K8 wrapped: carry into K7, new L0/L1, new prefix */
            keyno_words(keyno_add(start, i + 1), &key[0], &key[1], &key[2]);
            rc5_prefix(key[0], key[1], key + 3);
        }
    }
    return r;
}

static struct block_result check(const struct isa *s, struct keyno start, uint64_t n,
                                 const uint32_t pt[2], const uint32_t ct[2])
{
    return s == &isa_portable ? check_block_portable(start, n, pt, ct) : check_with(s, start, n, pt, ct);
}

/* ---- the kernel -------------------------------------------------------------------- */

struct ctx {
    const struct isa *core;
    uint64_t keys;
    struct keyno next; /* first key of the next block k_run checks */
    uint32_t pt[2], ct[2];
};

/* The timed key space starts here; the secret key is 1234 keys in. */
static const struct keyno RUN_START = {0x0123456789abcd00ull, 0xe5};
#define RUN_SECRET_OFFSET 1234

void *k_setup(void)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const char *core = k_param_str("core", "simd");
    const char *isa = k_param_str("isa", "auto");
    int64_t keys = k_param_int("keys", 4096);
    if (keys < 1) {
        k_fail("keys must be at least 1, got %lld", (long long)keys);
        return NULL;
    }
    c->keys = (uint64_t)keys;
    if (strcmp(core, "portable") == 0) {
        c->core = &isa_portable;
    } else if (strcmp(core, "simd") == 0) {
        c->core = &isa_portable; /* no SIMD path on this architecture */
#ifdef RC5_VECTORS
        int known = strcmp(isa, "auto") == 0;
        for (size_t i = 0; i < sizeof isa_list / sizeof isa_list[0]; i++) {
            if (strcmp(isa, "auto") != 0 && strcmp(isa, isa_list[i].name) != 0)
                continue;
            known = 1;
            if (isa_supported(&isa_list[i])) {
                c->core = &isa_list[i];
                break;
            }
            if (strcmp(isa, "auto") != 0) {
                k_skip("this CPU lacks %s", isa);
                return NULL;
            }
        }
        if (!known) {
            k_fail("isa must be auto, avx512, avx2 or sse2, got '%s'", isa);
            return NULL;
        }
#elif defined(CPULAB_CORE_PORTABLE)
        (void)isa;
        k_fail("this build holds the portable core alone (its experiment runs no other)");
        return NULL;
#else
        if (strcmp(isa, "auto") != 0) {
            k_skip("isa=%s needs an x86 CPU", isa);
            return NULL;
        }
#endif
    } else {
        k_fail("core must be portable or simd, got '%s'", core);
        return NULL;
    }
    k_note("simd_lanes", c->core->lanes);
    k_note("keys_per_batch", c->core->batch);
    /* Per batch: S[26] per key on the stack plus the batch's key words and ciphertexts. */
    k_note("working_set_bytes", (double)(c->core->batch * (RC5_T + 3 + 2) * 4));

    /* The known plaintext ("The unkn", the contest's first plaintext bytes) and its
     * ciphertext under the secret key, made by the reference. */
    static const uint8_t text[8] = {'T', 'h', 'e', ' ', 'u', 'n', 'k', 'n'};
    c->pt[0] = (uint32_t)text[0] | (uint32_t)text[1] << 8 | (uint32_t)text[2] << 16 | (uint32_t)text[3] << 24;
    c->pt[1] = (uint32_t)text[4] | (uint32_t)text[5] << 8 | (uint32_t)text[6] << 16 | (uint32_t)text[7] << 24;
    uint8_t K[9];
    keyno_bytes(keyno_add(RUN_START, RUN_SECRET_OFFSET), K);
    rc5_ref_encrypt(K, 9, c->pt, c->ct);
    c->next = RUN_START;
    return c;
}

/* Rivest, "The RC5 Encryption Algorithm" (rev. 1997), test vectors for RC5-32/12/16:
 * key, plaintext, ciphertext as the paper prints them (bytes in order). */
static const char *const rivest[5][3] = {
    {"00000000000000000000000000000000", "0000000000000000", "21A5DBEE154B8F6D"},
    {"915F4619BE41B2516355A50110A9CE91", "21A5DBEE154B8F6D", "F7C013AC5B2B8952"},
    {"783348E75AEB0F2FD7B169BB8DC16787", "F7C013AC5B2B8952", "2F42B3B70369FC92"},
    {"DC49DB1375A5584F6485B413B5F12BAF", "2F42B3B70369FC92", "65C178B284D197CC"},
    {"5269F149D41BA0152497574D7F153125", "65C178B284D197CC", "EB44E415DA319824"},
};

static int hexval(char ch)
{
    return ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
}

static void unhex(const char *s, uint8_t *out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = (uint8_t)(hexval(s[2 * i]) * 16 + hexval(s[2 * i + 1]));
}

static void bytes_to_words(const uint8_t *b, uint32_t *w, int nwords)
{
    for (int i = 0; i < nwords; i++)
        w[i] = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
               (uint32_t)b[4 * i + 3] << 24;
}

/* Rivest's vectors through the reference and through one core's c = 4 instance (every
 * lane of the batch gets the vector's key). */
static int verify_rivest(const struct isa *s)
{
    for (int v = 0; v < 5; v++) {
        uint8_t key[16], p[8], q[8];
        uint32_t pt[2], want[2], got[2], kw[4 * MAX_BATCH], ca[MAX_BATCH], cb[MAX_BATCH];
        unhex(rivest[v][0], key, 16);
        unhex(rivest[v][1], p, 8);
        unhex(rivest[v][2], q, 8);
        bytes_to_words(p, pt, 2);
        bytes_to_words(q, want, 2);
        rc5_ref_encrypt(key, 16, pt, got);
        if (got[0] != want[0] || got[1] != want[1]) {
            k_fail("reference: Rivest vector %d gives %08x %08x, want %08x %08x", v + 1,
                   got[0], got[1], want[0], want[1]);
            return 1;
        }
        uint32_t L[4];
        bytes_to_words(key, L, 4);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < s->batch; l++)
                kw[j * s->batch + l] = L[j];
        s->c4(kw, 0, pt[0], pt[1], ca, cb);
        for (int l = 0; l < s->batch; l++)
            if (ca[l] != want[0] || cb[l] != want[1]) {
                k_fail("%s core: Rivest vector %d lane %d gives %08x %08x, want %08x %08x", s->name,
                       v + 1, l, ca[l], cb[l], want[0], want[1]);
                return 1;
            }
    }
    return 0;
}

/* A planted 9-byte key: found exactly, with the reference's digest; the next block
 * (same size, without the key) reports nothing, nor does a target that shares only its
 * first word with the key's ciphertext. */
static int verify_planted(const struct isa *s, const uint32_t pt[2])
{
    /* 101 keys from ...f0: crosses the 256-key boundary at index 16, ends mid-vector. */
    const struct keyno start = {0xfedcba98765432f0ull, 0x3c};
    const uint64_t n = 101, planted = 77;
    uint32_t ct[2], c2[2], digest = 0;
    uint8_t K[9];
    for (uint64_t i = 0; i < n; i++) {
        keyno_bytes(keyno_add(start, i), K);
        rc5_ref_encrypt(K, 9, pt, c2);
        digest ^= c2[0];
        if (i == planted)
            ct[0] = c2[0], ct[1] = c2[1];
    }
    struct block_result r = check(s, start, n, pt, ct);
    if (r.matches != 1 || r.first != planted || r.digest != digest) {
        k_fail("%s core: planted key %llu: %u matches, first %llu, digest %08x (want 1, %llu, %08x)",
               s->name, (unsigned long long)planted, r.matches, (unsigned long long)r.first, r.digest,
               (unsigned long long)planted, digest);
        return 1;
    }
    r = check(s, keyno_add(start, n), n, pt, ct);
    if (r.matches != 0) {
        k_fail("%s core: %u matches in a block without the planted key", s->name, r.matches);
        return 1;
    }
    const uint32_t half[2] = {ct[0], ~ct[1]}; /* the planted key's first word only */
    r = check(s, start, n, pt, half);
    if (r.matches != 0) {
        k_fail("%s core: a key whose first ciphertext word alone matches counted as found", s->name);
        return 1;
    }
    return 0;
}

int k_verify(void *ctx)
{
    struct ctx *c = ctx;
    /* Both cores: the timed one first (a failure then names it), then the portable one. */
    if (verify_rivest(c->core) || verify_planted(c->core, c->pt))
        return 1;
    if (c->core != &isa_portable && (verify_rivest(&isa_portable) || verify_planted(&isa_portable, c->pt)))
        return 1;
    return 0;
}

uint64_t k_run(void *ctx, uint64_t reps)
{
    struct ctx *c = ctx;
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) {
        struct block_result b = check(c->core, c->next, c->keys, c->pt, c->ct);
        h = k_mix(h, b.digest);
        h = k_mix(h, b.matches);
        if (b.matches) /* which key: the key number of the first match */
            h = k_mix(h, keyno_add(c->next, b.first).lo);
        c->next = keyno_add(c->next, c->keys); /* the next block of the key space */
    }
    return h;
}

double k_work(const void *ctx, uint64_t reps)
{
    const struct ctx *c = ctx;
    return (double)c->keys * (double)reps;
}
