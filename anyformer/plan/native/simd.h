// The vector helpers anyformer's native kernels share (kernels.cpp, decode.cpp): GCC vector
// extensions of 16 floats (AVX-512 where the compiler is given it, two AVX2 halves elsewhere),
// loads and stores, horizontal sums, a polynomial exp, and GELU's forms built on it.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(64)));
typedef float vfu __attribute__((vector_size(64), aligned(4)));
typedef int vi __attribute__((vector_size(64)));
static const int W = 16;  // floats a vector

static inline vf ld(const float *p) { return *(const vfu *)p; }
static inline void st(float *p, vf v) { *(vfu *)p = v; }
static inline vf bc(float x) { return vf{} + x; }
// Horizontal max and sum of a row's vector: a shuffle tree where AVX-512 is there. The scalar loop
// is a chain of 16 dependent operations, and two of them a query row took about a quarter of the
// forward's time for 50 keys, a small ViT's (measured: docs/results.md, 'Measurements behind the code's choices').
#ifdef __AVX512F__
static inline float hmax(vf v) { return _mm512_reduce_max_ps((__m512)v); }
static inline float hsum(vf v) { return _mm512_reduce_add_ps((__m512)v); }
#else
static inline float hmax(vf v) { float m = v[0]; for (int i = 1; i < W; i++) m = v[i] > m ? v[i] : m; return m; }
static inline float hsum(vf v) { float s = 0; for (int i = 0; i < W; i++) s += v[i]; return s; }
#endif

// sum of a[i] b[i] over n floats, in independent chains so that an FMA's latency does not bound the loop.
// With AVX-512, two accumulators of 16 floats. Without it, four of 8 (ymm registers): GCC keeps 16-float
// vector variables in memory when it splits them for AVX2, and a loop that reads and writes its accumulators
// through the stack ran a decode step's products at half the rate on a Zen 5 built for AVX2 alone.
#ifdef __AVX512F__
static inline float dot(const float *a, const float *b, long n) {
    vf a0{}, a1{};
    long i = 0;
    for (; i + 2 * W <= n; i += 2 * W) { a0 += ld(a + i) * ld(b + i); a1 += ld(a + i + W) * ld(b + i + W); }
    for (; i + W <= n; i += W) a0 += ld(a + i) * ld(b + i);
    float s = hsum(a0 + a1);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
#else
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));
static inline v8 ld8(const float *p) { return *(const v8u *)p; }
static inline float dot(const float *a, const float *b, long n) {
    v8 a0{}, a1{}, a2{}, a3{};
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 += ld8(a + i) * ld8(b + i); a1 += ld8(a + i + 8) * ld8(b + i + 8);
        a2 += ld8(a + i + 16) * ld8(b + i + 16); a3 += ld8(a + i + 24) * ld8(b + i + 24);
    }
    for (; i + 8 <= n; i += 8) a0 += ld8(a + i) * ld8(b + i);
    v8 t = (a0 + a1) + (a2 + a3);
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
#endif

// exp(x), about 1 ulp, x clamped to [-87, 88] (so that the exponent built below stays finite):
// x = n ln2 + r, exp(r) by a degree-6 polynomial (Cephes expf)
static inline vf vexp(vf x) {
    x = x < -87.0f ? bc(-87.0f) : x;
    x = x > 88.0f ? bc(88.0f) : x;
    vf n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf p = bc(1.9875691500E-4f);
    p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f; p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f; p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)e;
}


// erfc(|z|) by Numerical Recipes' erfcc (fractional error below 1.2e-7 everywhere)
static inline vf verfc_abs(vf az) {
    vf t = 1.0f / (1.0f + 0.5f * az);
    vf p = bc(0.17087277f);
    p = p * t - 0.82215223f; p = p * t + 1.48851587f; p = p * t - 1.13520398f; p = p * t + 0.27886807f;
    p = p * t - 0.18628806f; p = p * t + 0.09678418f; p = p * t + 0.37409196f; p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * vexp(p - az * az);
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2
static inline vf vphi(vf x) {
    vf az = x * 0.70710678118654752f;
    az = az < 0 ? -az : az;
    vf half_erfc = 0.5f * verfc_abs(az);
    return x < 0 ? half_erfc : 1.0f - half_erfc;
}

// tanh(u) from exp(-2|u|) <= 1
static inline vf vtanh(vf u) {
    vf au = u < 0 ? -u : u;
    vf e = vexp(-2.0f * au);
    vf t = (1.0f - e) / (1.0f + e);
    return u < 0 ? -t : t;
}

static const float SQRT_2_OVER_PI = 0.79788456080286536f, GELU_C = 0.044715f, INV_SQRT_2PI = 0.39894228040143268f;

template <bool TANH>
static inline vf gelu_fwd_v(vf x) {
    if (TANH) return 0.5f * x * (1.0f + vtanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
    return x * vphi(x);
}

template <bool TANH>
static inline vf gelu_bwd_v(vf x, vf g) {
    if (TANH) {
        vf t = vtanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x));
        return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * x * x));
    }
    return g * (vphi(x) + x * INV_SQRT_2PI * vexp(-0.5f * x * x));
}
