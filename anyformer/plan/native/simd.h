// The vector helpers anyformer's native kernels share (kernels.cpp, decode.cpp): the register's own vector
// of floats (GCC vector extensions), loads and stores, horizontal sums, a polynomial exp, and GELU's forms
// built on it.
//
// Every kernel computes in vn, the register's vector: WN = 16 floats (a zmm) where the compiler is given
// AVX-512, 8 (a ymm) elsewhere. A 16-float vector type built for AVX2 alone is no pair of ymm registers to
// GCC: it keeps such values in memory, reads and writes them through the stack at every operation, and
// lowers a select or a comparison on them to one scalar instruction a lane. Built that way (before
// 2026-11-30), the AVX2 code ran the attention kernel 30 times slower than the AVX-512 code, a decode
// step's products at half the rate, and the speed plan never chose the kernel on an AVX2 processor.
// The head's layout keeps W = 16 floats as its unit (a head is a whole number of W), a whole number of vn either
// way; the attention kernels pad keys to one vn (kernels.cpp, KP).
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

static const int W = 16;  // floats in the layouts' unit (a head's row chunk)
#ifdef __AVX512F__
typedef float vn __attribute__((vector_size(64)));
typedef int vni __attribute__((vector_size(64)));
// ACC: the accumulators a kernel keeps in registers at once, half the register file (32 zmm, 16 ymm), the
// rest for loads and broadcasts
static const int WN = 16, ACC = 16;
#else
typedef float vn __attribute__((vector_size(32)));
typedef int vni __attribute__((vector_size(32)));
static const int WN = 8, ACC = 8;
#endif
typedef float vnu __attribute__((vector_size(sizeof(vn)), aligned(4)));

static inline vn ld(const float *p) { return *(const vnu *)p; }
static inline void st(float *p, vn v) { *(vnu *)p = v; }
static inline vn bc(float x) { return vn{} + x; }
static inline vn vmax(vn a, vn b) { return a > b ? a : b; }

// 1.0 in lanes below n (n in 1..WN), else 0
static inline vn lanes_below(long n) {
    vn iota; for (int i = 0; i < WN; i++) iota[i] = (float)i;
    return iota < (float)n ? bc(1.0f) : vn{};
}

// Horizontal max and sum: a shuffle tree. A scalar loop is a chain of 16 dependent operations, and two of
// them a query row took about a quarter of the forward's time for 50 keys, a small ViT's (measured:
// docs/results.md, 'Measurements behind the code's choices').
#ifdef __AVX512F__
static inline float hmax(vn v) { return _mm512_reduce_max_ps((__m512)v); }
static inline float hsum(vn v) { return _mm512_reduce_add_ps((__m512)v); }
#else
static inline float hmax(vn m) {
    m = vmax(m, __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3));
    m = vmax(m, __builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5));
    return m[0] > m[1] ? m[0] : m[1];
}
static inline float hsum(vn s) {
    s += __builtin_shufflevector(s, s, 4, 5, 6, 7, 0, 1, 2, 3);
    s += __builtin_shufflevector(s, s, 2, 3, 0, 1, 6, 7, 4, 5);
    return s[0] + s[1];
}
#endif

// sum of a[i] b[i] over n floats, in independent chains so that an FMA's latency does not bound the loop:
// two accumulators of 16 floats with AVX-512, four of 8 with AVX2.
static inline float dot(const float *a, const float *b, long n) {
    constexpr int K = 32 / WN;  // chains
    vn acc[K] = {};
    long i = 0;
    for (; i + K * WN <= n; i += K * WN)
        for (int c = 0; c < K; c++) acc[c] += ld(a + i + c * WN) * ld(b + i + c * WN);
    for (; i + WN <= n; i += WN) acc[0] += ld(a + i) * ld(b + i);
    for (int step = 1; step < K; step *= 2)  // a tree: (a0 + a1) + (a2 + a3)
        for (int c = 0; c + step < K; c += 2 * step) acc[c] += acc[c + step];
    float s = hsum(acc[0]);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// y[r] = w_r . x for the k <= ROWS consecutive rows w_r of w (n floats each) from its first: each row's sum
// in one chain of vectors, then its lanes (hsum), then the tail, so that a row's bits do not depend on how
// many rows came with it. A matrix-vector product is bound by reading its weights from memory, once, and
// what bounds that is how many rows stream at once: each vector of x is loaded once for ROWS rows, and
// ROWS is the accumulators the register file holds (16 zmm, 8 ymm), one independent FMA chain a row,
// enough to hide the FMA's latency. Two rows of four chains each (AVX2) read a char GPT's decode step's
// weights in 2.34 ms, eight rows of one chain in 1.58 ms; with AVX-512, four rows of two chains 2.19 ms,
// sixteen of one 1.77 ms (2-core Zen 4, bench_generate.py's shape, alternated rounds; 12 or 16 rows under
// AVX2 were no faster than 8). One row at a time read them at 69% of the bandwidth (2-core Intel Xeon).
static const int ROWS = ACC;
static inline void dots(const float *w, long n, const float *x, long k, float *y) {
    vn acc[ROWS] = {};
    long i = 0;
    if (k == ROWS) {  // the bound known to the compiler: the accumulators stay in registers
        for (; i + WN <= n; i += WN) {
            const vn xv = ld(x + i);
            for (int r = 0; r < ROWS; r++) acc[r] += ld(w + r * n + i) * xv;
        }
    } else {  // the last rows of a matrix: the same sums in the same order
        for (; i + WN <= n; i += WN) {
            const vn xv = ld(x + i);
            for (long r = 0; r < k; r++) acc[r] += ld(w + r * n + i) * xv;
        }
    }
    for (long r = 0; r < k; r++) {
        float s = hsum(acc[r]);
        for (long j = i; j < n; j++) s += w[r * n + j] * x[j];
        y[r] = s;
    }
}

// exp(x), about 1 ulp, x clamped to [-87, 88] (so that the exponent built below stays finite):
// x = n ln2 + r, exp(r) by a degree-6 polynomial (Cephes expf)
static inline vn vexp(vn x) {
    x = x < -87.0f ? bc(-87.0f) : x;
    x = x > 88.0f ? bc(88.0f) : x;
    vn n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
    vn r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vn p = bc(1.9875691500E-4f);
    p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f; p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f; p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    vni e = (__builtin_convertvector(n, vni) + 127) << 23;
    return p * (vn)e;
}


// 2^x for x <= 0 (a softmax's scores less their maximum or their log-sum-exp, in base 2: 0 at most, or a rounding
// above it), about 1 ulp. x is clamped to -126 (2^-126, the smallest normal float, stands for anything smaller);
// past 127 the result is not 2^x, so the kernels select away the lanes of keys a row does not see after it, never
// multiply them. n = round(x) lands in the low bits of x + 1.5 * 2^23 + 127 (the exponent's bias), whence 2^n by
// a shift alone; 2^r for r = x - n in [-1/2, 1/2] by a degree-6 polynomial (fitted to the relative error at
// Chebyshev nodes: 2.2e-9 in exact arithmetic, under 1 ulp in floats). Six operations fewer than vexp's (no product
// by log2 e, no two-part reduction, no conversion to integers): the exp was about 40% of the attention forward at
// a small ViT's heads (16 floats, 50 keys).
static inline vn vexp2_neg(vn x) {
    x = x < -126.0f ? bc(-126.0f) : x;
    const vn t = x + 12583039.0f;  // 1.5 * 2^23 + 127
    const vn r = x - (t - 12583039.0f);
    vn p = bc(1.5370704932138324e-4f);
    p = p * r + 1.3399848248809576e-3f; p = p * r + 9.618373587727547e-3f; p = p * r + 5.550329014658928e-2f;
    p = p * r + 2.4022647738456726e-1f; p = p * r + 6.931471824645996e-1f; p = p * r + 1.0f;
    return p * (vn)((vni)t << 23);
}

// erfc(|z|) by Numerical Recipes' erfcc (fractional error below 1.2e-7 everywhere)
static inline vn verfc_abs(vn az) {
    vn t = 1.0f / (1.0f + 0.5f * az);
    vn p = bc(0.17087277f);
    p = p * t - 0.82215223f; p = p * t + 1.48851587f; p = p * t - 1.13520398f; p = p * t + 0.27886807f;
    p = p * t - 0.18628806f; p = p * t + 0.09678418f; p = p * t + 0.37409196f; p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * vexp(p - az * az);
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2
static inline vn vphi(vn x) {
    vn az = x * 0.70710678118654752f;
    az = az < 0 ? -az : az;
    vn half_erfc = 0.5f * verfc_abs(az);
    return x < 0 ? half_erfc : 1.0f - half_erfc;
}

// tanh(u) from exp(-2|u|) <= 1
static inline vn vtanh(vn u) {
    vn au = u < 0 ? -u : u;
    vn e = vexp(-2.0f * au);
    vn t = (1.0f - e) / (1.0f + e);
    return u < 0 ? -t : t;
}

static const float SQRT_2_OVER_PI = 0.79788456080286536f, GELU_C = 0.044715f, INV_SQRT_2PI = 0.39894228040143268f;

template <bool TANH>
static inline vn gelu_fwd_v(vn x) {
    if (TANH) return 0.5f * x * (1.0f + vtanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
    return x * vphi(x);
}

template <bool TANH>
static inline vn gelu_bwd_v(vn x, vn g) {
    if (TANH) {
        vn t = vtanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x));
        return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * x * x));
    }
    return g * (vphi(x) + x * INV_SQRT_2PI * vexp(-0.5f * x * x));
}
