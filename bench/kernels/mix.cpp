// mix.cpp - a throughput-bound bench kernel in C++, whose true rate is known relative to
// its honest twin: bench/power.py's user C++ kernel (a [kernel] table, as a user writes one).
//
// Each repetition runs SplitMix64's finalizer (a templated function object) over 2000
// 64-bit words of a std::vector and reports 2000 elements of work; with INFLATE_PERCENT=1
// in the environment it mixes 2020 words and still reports 2000, so its true rate is
// 100/101 of the honest one (less the per-call overhead).  `point` only names a point.
#include "cpulab.h"

#include <cstdlib>
#include <vector>

namespace {

constexpr std::size_t WORDS = 2000, MAX_EXTRA = 200;  // 10%

template <typename T> struct Finalizer {
    T operator()(T z) const
    {
        z = (z ^ (z >> 30)) * T(0xbf58476d1ce4e5b9ull);
        z = (z ^ (z >> 27)) * T(0x94d049bb133111ebull);
        return z ^ (z >> 31);
    }
};

struct Ctx {
    std::vector<uint64_t> words;
    std::size_t count = WORDS;  // mixed per repetition
};

template <typename F> uint64_t mix_all(const std::vector<uint64_t> &w, std::size_t n, F f)
{
    uint64_t h = 0;
    for (std::size_t i = 0; i < n; i++)
        h += f(w[i]);
    return h;
}

}  // namespace

extern "C" {

const char k_unit[] = "elements";

void *k_setup(void)
{
    auto *c = new Ctx;
    const char *pct = std::getenv("INFLATE_PERCENT");
    double extra = pct ? std::atof(pct) * WORDS / 100 : 0;
    if (extra < 0 || extra > MAX_EXTRA || extra != (double)(std::size_t)extra) {
        k_fail("INFLATE_PERCENT must be a multiple of 0.05 within 0..10");
        delete c;
        return nullptr;
    }
    c->count = WORDS + (std::size_t)extra;
    k_note("point", (double)k_param_int("point", 0));
    for (std::size_t i = 0; i < WORDS + MAX_EXTRA; i++)
        c->words.push_back(0x9e3779b97f4a7c15ull * (i + 1));
    return c;
}

// SplitMix64 seeded with 0: its first output is the finalizer of the golden gamma.
int k_verify(void *)
{
    if (Finalizer<uint64_t>()(0x9e3779b97f4a7c15ull + K_BROKEN) != 0xe220a8397b1dcdafull) {
        k_fail("SplitMix64's first output is wrong");
        return 1;
    }
    return 0;
}

uint64_t k_run(void *p, uint64_t reps)
{
    auto *c = static_cast<Ctx *>(p);
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++)
        h ^= mix_all(c->words, c->count, Finalizer<uint64_t>()) + r;
    return h;
}

double k_work(const void *, uint64_t reps)
{
    return (double)WORDS * (double)reps;
}

}  // extern "C"
