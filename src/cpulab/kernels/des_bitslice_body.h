/* des_bitslice_body.h - the bitslice DES key check, included by des.c once per word type.
 *
 * Bitslice: word bit (lane) i of every variable belongs to key i of the group, so one
 * word operation is BS_W one-bit operations, one per key.  The 64 data bits are 64
 * words (A, B: the two halves), the 56 key bits 56 words (k[m], m = 0 the most
 * significant bit of the key number); the key schedule is free - round r's key bit j
 * is just the word k[des_bs_ks[r][j]] - and the permutations E and P are free too
 * (they pick which word feeds an S-box and which word its output goes to).  What costs
 * is the S-box logic (des_sboxes_bitslice.h): per S-box ~68 binary or ~32 ternary
 * operations, plus 6 XORs with key bits and 4 XORs into the output half.
 *
 * The includer defines:
 *   V                  the word type; BS_W keys per word, BS_LOGW = log2(BS_W)
 *   BS_ATTR            target attribute of this instantiation (or nothing)
 *   BS_FN(name)        the name of this instantiation's copy of `name`
 *   V_ZERO, V_ONES     constant words (as expressions)
 *   V_LOADW(w)         a word from BS_W / 64 uint64_t (w[0] = lanes 0..63)
 *   V_STOREW(w, v)     the reverse
 *   V_ALL_ONES(v)      nonzero when every lane of v is 1
 *   DES_AND DES_OR DES_XOR DES_ANDN, and DES_NOT or else DES_TERN and DES_SB_TERNARY
 */
#define DES_V V
#define DES_INLINE static inline __attribute__((always_inline)) BS_ATTR
#define DES_SB(name) BS_FN(name)
#include "des_sboxes_bitslice.h"
#undef DES_V
#undef DES_INLINE
#undef DES_SB

/* S-box n (s = n - 1) of one round: its six inputs are the expansion E of src (bits
 * 4s .. 4s+5, 1-based, cyclic) XOR six round-key words; its four outputs go through P
 * and are XORed with base's words into dst's (base may be dst: a round in place).  Every
 * index is a compile-time constant except the key-bit numbers (the S-box XORs into o0-o3,
 * zero: the compiler drops those XORs). */
#define BS_SBOX(n, j, dst, base, src, k, ks)                                              \
    do {                                                                                  \
        V o0 = V_ZERO, o1 = V_ZERO, o2 = V_ZERO, o3 = V_ZERO;                             \
        BS_FN(s##n)(DES_XOR(src[(4 * j + 31) & 31], k[ks[6 * j + 0]]),                    \
                    DES_XOR(src[4 * j + 0], k[ks[6 * j + 1]]),                             \
                    DES_XOR(src[4 * j + 1], k[ks[6 * j + 2]]),                             \
                    DES_XOR(src[4 * j + 2], k[ks[6 * j + 3]]),                             \
                    DES_XOR(src[4 * j + 3], k[ks[6 * j + 4]]),                             \
                    DES_XOR(src[(4 * j + 4) & 31], k[ks[6 * j + 5]]), &o0, &o1, &o2, &o3); \
        dst[des_po[4 * j + 0]] = DES_XOR(base[des_po[4 * j + 0]], o0);                    \
        dst[des_po[4 * j + 1]] = DES_XOR(base[des_po[4 * j + 1]], o1);                    \
        dst[des_po[4 * j + 2]] = DES_XOR(base[des_po[4 * j + 2]], o2);                    \
        dst[des_po[4 * j + 3]] = DES_XOR(base[des_po[4 * j + 3]], o3);                    \
    } while (0)

/* X(n, j) for each S-box n = j + 1. */
#define BS_EACH_SBOX(X) X(1, 0) X(2, 1) X(3, 2) X(4, 3) X(5, 4) X(6, 5) X(7, 6) X(8, 7)

/* Lanes still alive after S-box s of round 13: a lane dies (bit set in m) as soon as
 * one of the R13 bits computed so far differs from the one the ciphertext gives. */
#define BS_MISS(s, m, A, T)                                                               \
    m = DES_OR(m, DES_OR(DES_OR(DES_XOR(A[des_po[4 * s + 0]], T[des_po[4 * s + 0]]),     \
                                DES_XOR(A[des_po[4 * s + 1]], T[des_po[4 * s + 1]])),    \
                         DES_OR(DES_XOR(A[des_po[4 * s + 2]], T[des_po[4 * s + 2]]),     \
                                DES_XOR(A[des_po[4 * s + 3]], T[des_po[4 * s + 3]]))))

/* One DES round: dst = base ^ f(src, K_r), base dst itself (in place) or a kept half (no
 * copy of it first).  Not inlined: ~600 operations already. */
BS_ATTR __attribute__((noinline)) static void BS_FN(round)(V *dst, const V *base, const V *restrict src,
                                                          const V *restrict k, const uint8_t *ks)
{
#define BS_ROUND_SBOX(n, j) BS_SBOX(n, j, dst, base, src, k, ks);
    BS_EACH_SBOX(BS_ROUND_SBOX)
#undef BS_ROUND_SBOX
}

/* A kept round, out = base ^ f(src, K_r): recompute the S-boxes that are both wanted and
 * stale (bit j = S-box j + 1), and return the words of out rewritten (bit i = word i). */
BS_ATTR __attribute__((noinline)) static uint32_t BS_FN(refresh)(V *restrict out, const V *restrict base,
                                                                const V *restrict src, const V *restrict k,
                                                                const uint8_t *ks, unsigned *stale,
                                                                unsigned want)
{
    unsigned redo = *stale & want;
    uint32_t words = 0;
    *stale &= ~redo;
    des_bs_sboxes += (uint64_t)__builtin_popcount(redo);
    for (unsigned r = redo; r; r &= r - 1)
        for (int i = 4 * __builtin_ctz(r); i < 4 * __builtin_ctz(r) + 4; i++)
            words |= 1u << des_po[i];
#define BS_REFRESH_SBOX(n, j)                                                             \
    if (redo >> j & 1)                                                                    \
        BS_SBOX(n, j, out, base, src, k, ks);
    BS_EACH_SBOX(BS_REFRESH_SBOX)
#undef BS_REFRESH_SBOX
    return words;
}

/* Round 13's S-box n against R13 from the ciphertext side (brought up to date for that
 * S-box first); the group is done once every lane has missed. */
#define BS_CHECK(n, j)                                                                    \
    if (stale15 >> j & 1)                                                                 \
        BS_FN(refresh)(T13, T15, T14, k, des_bs_ks[14], &stale15, 1u << j);               \
    BS_SBOX(n, j, A, A, B, k, des_bs_ks[12]);                                             \
    des_bs_sboxes++;                                                                      \
    BS_MISS(j, m, A, T13);                                                                \
    if (V_ALL_ONES(m))                                                                    \
        continue

/* Check keys first .. first + nkeys - 1 (first and nkeys multiples of BS_W) against the
 * pair p; store up to max matching key numbers in found (ascending); return how many
 * matched.
 *
 * Meet in the middle.  The plaintext fixes L0 and R0, the ciphertext R15 (= L16) and
 * R16, so rounds 1 and 2 forward and rounds 16 and 15 backward (R14 = R16 ^ f(R15, K16),
 * R13 = R15 ^ f(R14, K15)) depend on the key alone.  From one group to the next only
 * key bits above the lane bits change, mostly one, so those four rounds are kept across
 * groups and an S-box of theirs is recomputed only when one of its key or input bits
 * changed (`stale`; of round 15 only the S-boxes checked so far): about 8 S-boxes a group
 * instead of 32.  Rounds 3-12 are computed whole, then round 13 S-box by S-box against
 * the backward R13: after 3 S-boxes (12 bits) a lane survives with
 * probability 2^-12, a group of 512 with 1/8.  A lane that matches all of R13 and then
 * R14 has the whole state of the forward and backward halves equal: its key encrypts the
 * plaintext to the ciphertext.  About 11.4 rounds a key (the note rounds_per_key). */
BS_ATTR static int BS_FN(check)(const struct des_pair *p, uint64_t first, uint64_t nkeys,
                                uint64_t *found, int max)
{
    V k[56], A[32], B[32], L0[32], R0[32], R1[32], R2[32], T13[32], T14[32], T15[32], T16[32];
    uint64_t w[BS_W / 64];
    unsigned stale1 = 0xff, stale2 = 0xff, stale16 = 0xff, stale15 = 0xff;
    int nf = 0;

    /* Constant words: the plaintext after IP, and the ciphertext's halves R15, R16. */
    for (int i = 0; i < 32; i++) {
        L0[i] = (p->l0 >> (31 - i)) & 1 ? V_ONES : V_ZERO;
        R0[i] = (p->r0 >> (31 - i)) & 1 ? V_ONES : V_ZERO;
        T15[i] = (p->r15 >> (31 - i)) & 1 ? V_ONES : V_ZERO;
        T16[i] = (p->r16 >> (31 - i)) & 1 ? V_ONES : V_ZERO;
    }
    /* Key-number bits 0 .. BS_LOGW-1 are the lane number: fixed patterns. */
    for (int q = 0; q < BS_LOGW; q++) {
        for (int j = 0; j < BS_W / 64; j++)
            w[j] = q < 6 ? des_lane_pattern[q] : ((j >> (q - 6)) & 1 ? ~0ull : 0);
        k[55 - q] = V_LOADW(w);
    }

    /* The groups: the first power-of-two run of them in Gray-code order, so that from one
     * group to the next a single key bit changes (bit BS_LOGW every second group, the
     * next every fourth...) instead of two on average: the kept rounds redo about 7.75
     * S-boxes a group instead of 11.5 (512 lanes, 32 groups a block). */
    const uint64_t groups = nkeys / BS_W;
    uint64_t gray = 1, last = 0;
    while (2 * gray <= groups)
        gray *= 2;
    for (uint64_t i = 0; i < groups; i++) {
        const uint64_t base = first + BS_W * (i < gray ? i ^ (i >> 1) : i);
        /* The group's common key bits: only those that changed since the last group. */
        const uint64_t changed = (i ? base ^ last : ~0ull) & (((1ull << 56) - 1) & ~(uint64_t)(BS_W - 1));
        last = base;
        for (uint64_t c = changed; c; c &= c - 1) {
            int q = __builtin_ctzll(c);
            k[55 - q] = (base >> q) & 1 ? V_ONES : V_ZERO;
        }
        stale1 |= des_sboxes_keyed(0, changed);
        stale2 |= des_sboxes_keyed(1, changed) |
                  des_sboxes_reading(BS_FN(refresh)(R1, L0, R0, k, des_bs_ks[0], &stale1, 0xff));
        BS_FN(refresh)(R2, R0, R1, k, des_bs_ks[1], &stale2, 0xff);
        stale16 |= des_sboxes_keyed(15, changed);
        stale15 |= des_sboxes_keyed(14, changed) |
                   des_sboxes_reading(BS_FN(refresh)(T14, T16, T15, k, des_bs_ks[15], &stale16, 0xff));

        /* Rounds 3-12: A and B take turns as the half that changes. */
        BS_FN(round)(A, R1, R2, k, des_bs_ks[2]);
        BS_FN(round)(B, R2, A, k, des_bs_ks[3]);
        for (int r = 4; r < 12; r += 2) {
            BS_FN(round)(A, A, B, k, des_bs_ks[r]);
            BS_FN(round)(B, B, A, k, des_bs_ks[r + 1]);
        }
        des_bs_sboxes += 80;
        /* Round 13 into A (R11 -> R13) S-box by S-box; first the three whose backward
         * S-boxes are rarely stale. */
        V m = V_ZERO;
        BS_CHECK(1, 0);
        BS_CHECK(3, 2);
        BS_CHECK(8, 7);
        BS_CHECK(2, 1);
        BS_CHECK(4, 3);
        BS_CHECK(5, 4);
        BS_CHECK(6, 5);
        BS_CHECK(7, 6);
        /* All of R13 matches: R14 must match as well (B: R12 -> R14). */
        BS_FN(round)(B, B, A, k, des_bs_ks[13]);
        des_bs_sboxes += 8;
        for (int i = 0; i < 32; i++)
            m = DES_OR(m, DES_XOR(B[i], T14[i]));
        V_STOREW(w, m);
        for (int j = 0; j < BS_W / 64; j++)
            for (uint64_t hit = ~w[j]; hit; hit &= hit - 1) {
                if (nf < max)
                    found[nf] = base + 64 * (uint64_t)j + (uint64_t)__builtin_ctzll(hit);
                nf++;
            }
    }
    des_sort(found, nf < max ? nf : max);
    return nf;
}

#undef BS_SBOX
#undef BS_EACH_SBOX
#undef BS_MISS
#undef BS_CHECK
