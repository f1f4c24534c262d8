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
 * into dst.  Every index is a compile-time constant except the key-bit numbers. */
#define BS_SBOX(n, j, dst, src, k, ks)                                                    \
    BS_FN(s##n)(DES_XOR(src[(4 * j + 31) & 31], k[ks[6 * j + 0]]),                        \
                DES_XOR(src[4 * j + 0], k[ks[6 * j + 1]]),                                 \
                DES_XOR(src[4 * j + 1], k[ks[6 * j + 2]]),                                 \
                DES_XOR(src[4 * j + 2], k[ks[6 * j + 3]]),                                 \
                DES_XOR(src[4 * j + 3], k[ks[6 * j + 4]]),                                 \
                DES_XOR(src[(4 * j + 4) & 31], k[ks[6 * j + 5]]),                          \
                &dst[des_po[4 * j + 0]], &dst[des_po[4 * j + 1]],                          \
                &dst[des_po[4 * j + 2]], &dst[des_po[4 * j + 3]])

/* Lanes still alive after S-box s of round 15: a lane dies (bit set in m) as soon as
 * one of the R15 bits computed so far differs from the target's. */
#define BS_MISS(s, m, A, T)                                                               \
    m = DES_OR(m, DES_OR(DES_OR(DES_XOR(A[des_po[4 * s + 0]], T[des_po[4 * s + 0]]),     \
                                DES_XOR(A[des_po[4 * s + 1]], T[des_po[4 * s + 1]])),    \
                         DES_OR(DES_XOR(A[des_po[4 * s + 2]], T[des_po[4 * s + 2]]),     \
                                DES_XOR(A[des_po[4 * s + 3]], T[des_po[4 * s + 3]]))))

/* One DES round: dst ^= f(src, K_r).  Not inlined: ~600 operations already. */
BS_ATTR __attribute__((noinline)) static void BS_FN(round)(V *restrict dst, const V *restrict src,
                                                          const V *restrict k, const uint8_t *ks)
{
    BS_SBOX(1, 0, dst, src, k, ks);
    BS_SBOX(2, 1, dst, src, k, ks);
    BS_SBOX(3, 2, dst, src, k, ks);
    BS_SBOX(4, 3, dst, src, k, ks);
    BS_SBOX(5, 4, dst, src, k, ks);
    BS_SBOX(6, 5, dst, src, k, ks);
    BS_SBOX(7, 6, dst, src, k, ks);
    BS_SBOX(8, 7, dst, src, k, ks);
}

/* Check keys first .. first + nkeys - 1 (first and nkeys multiples of BS_W) against the
 * pair p; store up to max matching key numbers in found; return how many matched. */
BS_ATTR static int BS_FN(check)(const struct des_pair *p, uint64_t first, uint64_t nkeys,
                                uint64_t *found, int max)
{
    V k[56], A[32], B[32], L0[32], R0[32], T15[32], T16[32];
    uint64_t w[BS_W / 64];
    int nf = 0;

    /* Constant words: the plaintext after IP, and the target halves R15, R16. */
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

    for (uint64_t v = 0; v < nkeys; v += BS_W) {
        const uint64_t base = first + v;
        for (int q = BS_LOGW; q < 56; q++) /* the group's common key bits */
            k[55 - q] = (base >> q) & 1 ? V_ONES : V_ZERO;
        memcpy(A, L0, sizeof A);
        memcpy(B, R0, sizeof B);
        /* Rounds 1-14: A holds L, B holds R, and the halves swap roles each round. */
        for (int r = 0; r < 14; r += 2) {
            BS_FN(round)(A, B, k, des_bs_ks[r]);
            BS_FN(round)(B, A, k, des_bs_ks[r + 1]);
        }
        /* Round 15, one S-box at a time: A becomes R15, which the target fixes (it is
         * L16, half of the output).  Each S-box gives 4 bits, so after 3 S-boxes a lane
         * survives with probability 2^-12: almost every group stops here (early abort). */
        V m = V_ZERO;
        const uint8_t *ks = des_bs_ks[14];
        BS_SBOX(1, 0, A, B, k, ks);
        BS_MISS(0, m, A, T15);
        BS_SBOX(2, 1, A, B, k, ks);
        BS_MISS(1, m, A, T15);
        BS_SBOX(3, 2, A, B, k, ks);
        BS_MISS(2, m, A, T15);
        if (V_ALL_ONES(m))
            continue;
        BS_SBOX(4, 3, A, B, k, ks);
        BS_MISS(3, m, A, T15);
        BS_SBOX(5, 4, A, B, k, ks);
        BS_MISS(4, m, A, T15);
        BS_SBOX(6, 5, A, B, k, ks);
        BS_MISS(5, m, A, T15);
        BS_SBOX(7, 6, A, B, k, ks);
        BS_MISS(6, m, A, T15);
        BS_SBOX(8, 7, A, B, k, ks);
        BS_MISS(7, m, A, T15);
        if (V_ALL_ONES(m))
            continue;
        /* Round 16 for the rare survivors: B becomes R16; all 64 bits must match. */
        BS_FN(round)(B, A, k, des_bs_ks[15]);
        for (int i = 0; i < 32; i++)
            m = DES_OR(m, DES_XOR(B[i], T16[i]));
        V_STOREW(w, m);
        for (int j = 0; j < BS_W / 64; j++)
            for (uint64_t hit = ~w[j]; hit; hit &= hit - 1) {
                if (nf < max)
                    found[nf] = base + 64 * (uint64_t)j + (uint64_t)__builtin_ctzll(hit);
                nf++;
            }
    }
    return nf;
}

#undef BS_SBOX
#undef BS_MISS
