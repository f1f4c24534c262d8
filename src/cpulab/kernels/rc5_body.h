/* rc5_body.h - one RC5-32/12/b key-check core, written once for any "vector" type.
 *
 * Included several times by rc5_72.c, each time with different definitions of:
 *
 *   RC5_FN       the function to define
 *   RC5_ATTR     its attributes (e.g. target("avx2")), may be empty
 *   RC5_C        key words c = ceil(b/4): 3 for the 72-bit contest keys, 4 for the
 *                16-byte keys of Rivest's published test vectors
 *   RC5_W        lanes (keys) per vector: 1 for the portable core
 *   RC5_NV       independent vectors interleaved (1 to 4) to hide latency
 *   V            the vector type (uint32_t for the portable core)
 *   V_LOAD(p) V_STORE(p,x) V_SET1(x) V_ADD(a,b) V_XOR(a,b) V_ROTL3(x) V_ROTLV(x,n)
 *   V_KEEP(x)    an optimisation barrier on x (or nothing)
 *   V_APART(x)   the barrier of passes 2 and 3 (or nothing): S + A apart from + B
 *   V_SAVE(m, x) store x to the subkey m (m = x, or a store the compiler cannot see through)
 *   V_SAVEL(m, x) the same for the key word m
 *   V_PQ(i)      the vector of pass 1's S[i] = P + i*Q (rc5_pq[i])
 *   RC5_UNROLL   a pragma for the loops over a pass's steps: unroll them whole or not
 *   rc5_lane     uint32_t[64] = 0, 1, 2, ...: each lane's offset in a run (`run`, below)
 *
 * With 72-bit keys (RC5_C == 3) the first 2.5 steps, which depend on L[0] and L[1] only,
 * were done by the caller, once for a run of 256 keys (as distributed.net clients do; only
 * L[2] changes in such a run): key[] then holds, after the 3 key words, the words S0 S1 S2
 * L0' L1' they produced (RC5_PRE).
 *
 * RC5_FN(key, run, pa, pb, ca, cb) runs the whole key schedule of RC5_NV*RC5_W keys and
 * encrypts the plaintext (pa, pb) with each; ciphertext words go to ca[], cb[].  The
 * vector cores of 72-bit keys (RC5_ONLY_A) stop at the first word: they leave cb[] alone
 * and the caller confirms the rare key whose ca matches (one in 2^32) with the reference.
 * That drops the last subkey, the L half of the step before it and the last half-round:
 * 9 of the ~530 operations of a vector (1.7%).
 * key[j * RC5_NV * RC5_W + lane] is word j of lane `lane`; with `run` set the lanes are
 * one run of consecutive keys and only lane 0's words are read.
 *
 * The steps go in groups of RC5_C, so that every key word index is a constant and L[],
 * A, B and the cipher state live in registers (only S[] goes to memory); a pass is a loop
 * over such groups, which RC5_UNROLL unrolls whole (every index then a constant too) or
 * not at all (a core whose unrolled code would not fit the instruction cache).
 * The key schedule is Rivest's: S[i] = P + i*Q; then 3*max(t, c) = 78 steps
 *     A = S[i] = (S[i] + A + B) <<< 3;   B = L[j] = (L[j] + A + B) <<< (A + B)
 * each depending on the previous one, so one key is a chain of 78 such steps.  The
 * third pass is merged with the encryption, which consumes S[0], S[1], ... in the
 * order that pass produces them, so the last 26 subkeys are never stored.
 */
#if RC5_NV == 1
#define RC5_EACH(X) X(0)
#elif RC5_NV == 2
#define RC5_EACH(X) X(0) X(1)
#elif RC5_NV == 3
#define RC5_EACH(X) X(0) X(1) X(2)
#else
#define RC5_EACH(X) X(0) X(1) X(2) X(3)
#endif
#define RC5_LANES (RC5_NV * RC5_W)

#define RC5_PRE (RC5_C == 3)
#define RC5_ONLY_A (RC5_C == 3 && RC5_W > 1)
#define RC5_LAST (RC5_ONLY_A ? RC5_T - 2 : RC5_T - 1) /* the step that makes the last word */

/* Word j of key[] for vector v: a word per lane, or with `run` (the batch is one run of
 * consecutive keys) one word for every lane, broadcast: the caller writes no word per
 * lane for the core to read back in vectors. */
#define RC5_WORD(j, v) (run ? V_SET1(key[(j) * RC5_LANES]) : V_LOAD(key + (j) * RC5_LANES + (v) * RC5_W))
/* Per vector v: load key word j (words beyond RC5_C do not exist); in a run, L2 is the
 * first key's plus each lane's number. */
#define RC5_LOAD(v)                                                                   \
    L[J][v] = run && J == 2 ? V_ADD(V_SET1(key[2 * RC5_LANES]), V_LOAD(rc5_lane + (v) * RC5_W)) \
                            : RC5_WORD(J, v);
#define RC5_LOADJ(j) if ((j) < RC5_C) { enum { J = (j) < RC5_C ? (j) : 0 }; RC5_EACH(RC5_LOAD) }
/* The state after step 2's A half, precomputed (RC5_PRE). */
#define RC5_LOADPRE(v)                                                                \
    S[0][v] = RC5_WORD(3, v);                                                         \
    S[1][v] = RC5_WORD(4, v);                                                         \
    S[2][v] = A[v] = RC5_WORD(5, v);                                                  \
    L[0][v] = RC5_WORD(6, v);                                                         \
    L[1][v] = B[v] = RC5_WORD(7, v);

/* The L half of a step.  Written (L + B) + A, not L + (A + B): L + B is ready while A
 * is still being computed, so B depends on A through 2 operations (add, rotate)
 * instead of 3.  With A through the same 2 (add B, rotate by 3), a step is 4 dependent
 * operations: about 4 cycles a step for one key, 78 steps = ~310 cycles. */
#if RC5_NV <= 2
#define RC5_LMIX(v)                                                                   \
    B[v] = V_ROTLV(V_ADD(V_ADD(L[J][v], B[v]), A[v]), V_ADD(A[v], B[v]));            \
    V_SAVEL(L[J][v], B[v]);
#else
/* With three or four chains in flight the core is bound by issue, not by the chain: L +
 * (A + B) reuses the rotate count's sum, one add fewer per step (78 a key), at the cost
 * of a fifth dependent operation per step. */
#define RC5_LMIX(v)                                                                   \
    {                                                                                 \
        V ab = V_ADD(A[v], B[v]);                                                     \
        B[v] = V_ROTLV(V_ADD(L[J][v], ab), ab);                                       \
        V_SAVEL(L[J][v], B[v]);                                                       \
    }
#endif

/* The A half of a step of pass 1: S[i] is still the constant P + i*Q (V_PQ).  (P + iQ)
 * + A is computed apart from + B: merged, they become one 3-operand LEA, 2 cycles on Zen
 * instead of 1 on the chain; V_KEEP (an empty asm in the portable core) keeps them apart. */
#define RC5_A0(v)                                                                     \
    A[v] = V_ADD(V_PQ(i), A[v]);                                                      \
    V_KEEP(A[v]);                                                                     \
    A[v] = V_ROTL3(V_ADD(A[v], B[v]));                                                \
    V_SAVE(S[i][v], A[v]);
/* Passes 2 and 3: S[i] from the pass before (one load, off the critical path).  S + A is
 * kept apart from + B where V_APART is a barrier: gcc otherwise adds B first and S last,
 * one more operation on the chain. */
#define RC5_AS(v)                                                                     \
    A[v] = V_ADD(S[i][v], A[v]);                                                      \
    V_APART(A[v]);                                                                    \
    A[v] = V_ROTL3(V_ADD(A[v], B[v]));
#define RC5_A1(v) RC5_AS(v) V_SAVE(S[i][v], A[v]);
/* Pass 3: the new S[i] is used at once by the encryption, A = P0 + S[0], B = P1 + S[1],
 * then per round A = ((A ^ B) <<< B) + S[2r], B = ((B ^ A) <<< A) + S[2r+1]: every
 * half-round is new = ((P ^ Q) <<< Q) + S[i] of the word before last (P) and the last
 * (Q).  The half-round is 3 operations, the key schedule 8 per subkey pair, so the
 * cipher keeps up with the schedule. */
#define RC5_A2(v)                                                                     \
    RC5_AS(v)                                                                         \
    {                                                                                 \
        V new_ = V_ADD(V_ROTLV(V_XOR(P[v], Q[v]), Q[v]), A[v]);                       \
        P[v] = Q[v];                                                                  \
        Q[v] = new_;                                                                  \
    }
#define RC5_AP2(v) RC5_AS(v) P[v] = V_ADD(V_SET1(pa), A[v]); /* step 0 of pass 3 */
#define RC5_AQ2(v) RC5_AS(v) Q[v] = V_ADD(V_SET1(pb), A[v]); /* step 1 */

/* Step i of pass p, whose key word is the constant J; its vectors one after another. */
#define RC5_STEP_(p, v) RC5_A##p(v) RC5_LMIX(v)
#define RC5_STEP0(v) RC5_STEP_(0, v)
#define RC5_STEP1(v) RC5_STEP_(1, v)
#define RC5_STEP2(v) RC5_STEP_(2, v)
#define RC5_STEPP2(v) RC5_STEP_(P2, v)
#define RC5_STEPQ2(v) RC5_STEP_(Q2, v)
#define RC5_STEP(p, at, j)                                                            \
    {                                                                                 \
        const int i = (at);                                                           \
        enum { J = (j) % RC5_C };                                                     \
        RC5_EACH(RC5_STEP##p)                                                         \
    }
/* Steps from .. to - 1 of pass p: a loop over groups of RC5_C steps (step `from`'s key
 * word is (26p + from) mod c, and again after each group), then the 0 to c - 1 left. */
#define RC5_RUN(p, from, to)                                                          \
    {                                                                                 \
        enum { J0 = (RC5_T * (p) + (from)) % RC5_C, LEFT = ((to) - (from)) % RC5_C };  \
        int g = (from);                                                               \
        RC5_UNROLL                                                                    \
        for (; g + RC5_C <= (to); g += RC5_C) {                                       \
            RC5_STEP(p, g, J0) RC5_STEP(p, g + 1, J0 + 1) RC5_STEP(p, g + 2, J0 + 2)  \
            if (RC5_C > 3) RC5_STEP(p, g + 3, J0 + 3)                                 \
        }                                                                             \
        if (LEFT > 0) RC5_STEP(p, g, J0)                                              \
        if (LEFT > 1) RC5_STEP(p, g + 1, J0 + 1)                                      \
        if (LEFT > 2) RC5_STEP(p, g + 2, J0 + 2)                                      \
    }

#define RC5_ZERO(v) A[v] = B[v] = V_SET1(0u);
#define RC5_OUT(v)                                                                    \
    if (RC5_ONLY_A) {                                                                 \
        V_STORE(ca + (v) * RC5_W, Q[v]);                                              \
    } else {                                                                          \
        V_STORE(ca + (v) * RC5_W, P[v]);                                              \
        V_STORE(cb + (v) * RC5_W, Q[v]);                                              \
    }

static RC5_ATTR void RC5_FN(const uint32_t *restrict key, int run, uint32_t pa, uint32_t pb,
                            uint32_t *restrict ca, uint32_t *restrict cb)
{
    V S[RC5_T][RC5_NV], L[4][RC5_NV], A[RC5_NV], B[RC5_NV], P[RC5_NV], Q[RC5_NV];
    RC5_LOADJ(0) RC5_LOADJ(1) RC5_LOADJ(2) RC5_LOADJ(3)
    RC5_EACH(RC5_ZERO)
    if (RC5_PRE) { /* steps 0, 1 and step 2's A half done: its L half, then steps 3 on */
        RC5_EACH(RC5_LOADPRE)
        { enum { J = 2 }; RC5_EACH(RC5_LMIX) }
        RC5_RUN(0, 3, RC5_T)
    } else {
        RC5_RUN(0, 0, RC5_T)
    }
    RC5_RUN(1, 0, RC5_T)
    RC5_STEP(P2, 0, 2 * RC5_T)
    RC5_STEP(Q2, 1, 2 * RC5_T + 1)
    RC5_RUN(2, 2, RC5_LAST)
    { const int i = RC5_LAST; RC5_EACH(RC5_A2) } /* the last word: no L half */
    RC5_EACH(RC5_OUT)
}

#undef RC5_EACH
#undef RC5_LANES
#undef RC5_PRE
#undef RC5_ONLY_A
#undef RC5_LAST
#undef RC5_WORD
#undef RC5_LOAD
#undef RC5_LOADJ
#undef RC5_LOADPRE
#undef RC5_LMIX
#undef RC5_A0
#undef RC5_AS
#undef RC5_A1
#undef RC5_A2
#undef RC5_AP2
#undef RC5_AQ2
#undef RC5_STEP_
#undef RC5_STEP0
#undef RC5_STEP1
#undef RC5_STEP2
#undef RC5_STEPP2
#undef RC5_STEPQ2
#undef RC5_STEP
#undef RC5_RUN
#undef RC5_ZERO
#undef RC5_OUT
