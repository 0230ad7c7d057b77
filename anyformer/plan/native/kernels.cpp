// anyformer's own fp32 CPU kernels: attention over a packed q/k/v projection, and GELU.
//
// Attention: softmax(Q K^T * scale) V over (B, H, N, D) heads, forward and backward, one (batch,
// head) pair per OpenMP iteration, so that a head's scores stay in the caches. Why it exists: SDPA's
// CPU flash kernel runs a small model's attention (tens to hundreds of tokens, heads of 16 to 64)
// slowly, because its inner products are blocked for long sequences and go through BLAS calls too
// small to pay (measured: docs/results.md, 'Measurements behind the code's choices'). Here four
// query rows are computed at once in registers (GCC vector extensions of the register's width, simd.h:
// 16 floats where the compiler is given AVX-512, 8 elsewhere), and the keys and values of one head are
// transposed once into a buffer. The forward saves log-sum-exp per row; the backward recomputes the
// probabilities from it (flash attention's recipe, at the granularity of a whole head).
//
// Built on the machine that runs it (anyformer/plan/native.py: g++ -O3 -march=native -fopenmp; the
// OpenMP runtime is the one torch already loaded) and used only where the speed plan measured it
// faster than the stock kernel and checked its results against it (anyformer/plan/choose.py).
//
// Attention layout: element (b, h, n, d) of q, k, v, o, the output gradient and the input gradients
// is at base + b*sb + h*sh + n*sn + d (d contiguous), so a layer's packed (B, N, 3, H, D) projection
// is read and its gradient written in place. Causal masks are bottom-right aligned (query i sees keys
// up to i + M - N, so M >= N). D must be 16, 32, 48 or 64. The functions return 0, or 1 for a head
// size they do not take, 2 for a causal call with fewer keys than queries, 3 where memory for
// a thread's buffers could not be allocated (the backward keeps two N x M matrices per thread).
#include "simd.h"

static const int RMAX = 4;  // rows in a block
static const float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
// Keys are padded to a whole register vector (8 with AVX2, 16 with AVX-512), not to the layouts' W = 16: a small
// ViT's 50 keys are then 56 with AVX2, not 64, an eighth less of the scores' and the softmax's work. The padded
// keys' probabilities are zeros either way, so every sum is the same (the same bits).
static const int KP = WN;
static inline long padded(long M) { return (M + KP - 1) / KP * KP; }
static const float ONES[RMAX] = {1.0f, 1.0f, 1.0f, 1.0f};  // outputs not scaled (x * 1 is x)

struct Head { const float *p; long sn; const float *row(long n) const { return p + n * sn; } };

// s[r][0..jn_end*WN) = scale * q_r . kt[:, j] for the R rows of a block   (kt: D x Mp, zero padded).
// Two key vectors at a time where there are two: an FMA takes 4 cycles and two issue per cycle, so
// R chains alone (R = 4) leave most of the multiply-add slots idle; 2R independent chains fill them.
// The key vectors are the register's (vn): 2R accumulators of 16 floats fit AVX-512's 32 registers, and
// of 8 floats AVX2's 16.
template <int DV, int R>
static inline void scores(const float *const *qr, const float *kt, long Mp, long jn_end, float scale, float *s) {
    const int D = DV * W;
    long jn = 0;
    for (; jn + 1 < jn_end; jn += 2) {
        vn a[R], b[R];
        for (int r = 0; r < R; r++) { a[r] = vn{}; b[r] = vn{}; }
        const float *k = kt + jn * WN;
        for (int d = 0; d < D; d++) {
            vn k0 = ld(k + d * Mp), k1 = ld(k + d * Mp + WN);
            for (int r = 0; r < R; r++) { float x = qr[r][d]; a[r] += k0 * x; b[r] += k1 * x; }
        }
        for (int r = 0; r < R; r++) { st(s + r * Mp + jn * WN, a[r] * scale); st(s + r * Mp + (jn + 1) * WN, b[r] * scale); }
    }
    for (; jn < jn_end; jn++) {
        vn a[R];
        for (int r = 0; r < R; r++) a[r] = vn{};
        const float *k = kt + jn * WN;
        for (int d = 0; d < D; d++) {
            vn kv = ld(k + d * Mp);
            for (int r = 0; r < R; r++) a[r] += kv * qr[r][d];
        }
        for (int r = 0; r < R; r++) st(s + r * Mp + jn * WN, a[r] * scale);
    }
}

// out[r * osn + 0..D) = mult[r] * sum over rows j in [j0, j1) of w[r * rs + j * js] * x_j, for the first
// `live` of R outputs (D = DV*W floats a row): the forward's and dQ's P V (a block of R queries, w the N x Mp
// buffer row-major: rs = Mp, js = 1) and dV's and dK's P^T dO (R keys, read down the buffer's columns: rs = 1,
// js = Mp). A row's D floats are C register vectors at a time, so that the R x C accumulators stay within ACC
// registers (a 64-float row is 4 zmm, all at once, or 8 ymm, 2 at a time); where R*C chains are too few to fill
// the FMA slots (see scores), even and odd j go to two sets.
template <int DV, int R>
static inline void weighted_rows(const float *w, long rs, long js, long j0, long j1, const Head &x,
                                 float *out, long osn, const float (&mult)[R], int live) {
    constexpr int NV = DV * W / WN, C = NV < ACC / R ? NV : ACC / R, S = R * C < 8 ? 2 : 1;
    static_assert(NV % C == 0, "a row's vectors split into whole chunks");
    for (int c0 = 0; c0 < NV; c0 += C) {
        vn part[S][R][C];
        for (int t = 0; t < S; t++) for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) part[t][r][c] = vn{};
        long j = j0;
        for (; j + S <= j1; j += S) {
            for (int t = 0; t < S; t++) {
                const float *xj = x.row(j + t) + c0 * WN, *wj = w + (j + t) * js;
                float wr[R];
                for (int r = 0; r < R; r++) wr[r] = wj[r * rs];
                for (int c = 0; c < C; c++) {
                    vn xv = ld(xj + c * WN);
                    for (int r = 0; r < R; r++) part[t][r][c] += xv * wr[r];
                }
            }
        }
        for (; j < j1; j++) {
            const float *xj = x.row(j) + c0 * WN, *wj = w + j * js;
            for (int c = 0; c < C; c++) {
                vn xv = ld(xj + c * WN);
                for (int r = 0; r < R; r++) part[0][r][c] += xv * wj[r * rs];
            }
        }
        for (int r = 0; r < R; r++) {  // R, not live: a loop of constant length indexes `part` by constants,
            if (r >= live) break;       // which keeps it in registers
            for (int c = 0; c < C; c++) {
                vn acc = part[0][r][c];
                for (int t = 1; t < S; t++) acc += part[t][r][c];
                st(out + r * osn + (c0 + c) * WN, acc * mult[r]);
            }
        }
    }
}

// A WN x WN tile transposed in registers, in steps S (b = WN/2, ..., 1): rows i and i + b swap the b bit
// of their row and column index, by two two-source shuffles each (one vpermt2ps with AVX-512; vperm2f128,
// vshufps and vunpck with AVX2). SWAP[S]: the masks for the new rows i and i + b, indices into (row i,
// row i + b), WN and up the latter.
#ifdef __AVX512F__
static const int STEPS = 4;
static const vni SWAP[STEPS][2] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},  // b = 8
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}, {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},  // b = 4
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}, {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},  // b = 2
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}, {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},  // b = 1
};
#else
static const int STEPS = 3;
static const vni SWAP[STEPS][2] = {
    {{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}},  // b = 4
    {{0, 1, 8, 9, 4, 5, 12, 13}, {2, 3, 10, 11, 6, 7, 14, 15}},  // b = 2
    {{0, 8, 2, 10, 4, 12, 6, 14}, {1, 9, 3, 11, 5, 13, 7, 15}},  // b = 1
};
#endif
template <int S>
static inline void swap_bit(vn (&x)[WN]) {
    const int B = (WN / 2) >> S;
    for (int i = 0; i < WN; i++) {
        if (i & B) continue;
        vn a = x[i], b = x[i + B];
        x[i] = __builtin_shuffle(a, b, SWAP[S][0]);
        x[i + B] = __builtin_shuffle(a, b, SWAP[S][1]);
    }
}

// t = the head's first M rows transposed (D x Mp, zero past M), a WN x WN tile at a time. Element by
// element, every store went to another row Mp floats on: once t is larger than L1 (a char GPT's
// heads, 256 keys of 64) that took a quarter of the forward's time (measured: docs/results.md).
static void transpose(const Head &h, long M, long D, long Mp, float *t) {
    for (long j0 = 0; j0 < Mp; j0 += WN) {
        long rows = M - j0 < WN ? M - j0 : WN;
        for (long d0 = 0; d0 < D; d0 += WN) {
            vn x[WN];
            for (long jj = 0; jj < WN; jj++) x[jj] = jj < rows ? ld(h.row(j0 + jj) + d0) : vn{};
            swap_bit<0>(x); swap_bit<1>(x); swap_bit<2>(x);
            if constexpr (STEPS == 4) swap_bit<3>(x);
            for (int dd = 0; dd < WN; dd++) st(t + (d0 + dd) * Mp + j0, x[dd]);
        }
    }
}

// query i sees keys [0, keys_seen): all of them, or (causal, bottom-right aligned) up to i + M - N
static inline long keys_seen(long i, long N, long M, int causal) { return causal ? i + 1 + (M - N) : M; }

template <int DV, int R>
static void fwd_head(Head q, Head k, Head v, float *o, long osn, float *lse, long N, long M, float scale,
                     int causal, float *kt, float *s) {
    const long D = DV * W, Mp = padded(M);
    transpose(k, M, D, Mp, kt);
    for (long i0 = 0; i0 < N; i0 += R) {
        const float *qr[R]; long m[R];
        for (int r = 0; r < R; r++) { long i = i0 + r < N ? i0 + r : N - 1; qr[r] = q.row(i); m[r] = keys_seen(i, N, M, causal); }
        long mmax = m[R - 1] > m[0] ? m[R - 1] : m[0];
        long jn_end = padded(mmax) / WN;  // the key vectors the block's rows reach
        scores<DV, R>(qr, kt, Mp, jn_end, scale * LOG2E, s);  // scores in base 2 (vexp2_neg)
        float inv[R];
        for (int r = 0; r < R; r++) {
            float *sr = s + r * Mp;
            long je = (m[r] + WN - 1) / WN;  // the row's key vectors
            vn keep = lanes_below(m[r] - (je - 1) * WN);
            vn mx = bc(-INFINITY);
            for (long jn = 0; jn < je; jn++) {
                vn x = ld(sr + jn * WN);
                if (jn == je - 1) x = keep > 0 ? x : bc(-INFINITY);
                mx = vmax(x, mx);
            }
            float mr = hmax(mx); vn sum{};
            for (long jn = 0; jn < je; jn++) {
                vn e = vexp2_neg(ld(sr + jn * WN) - mr);
                if (jn == je - 1) e = keep > 0 ? e : vn{};  // select: inf * 0 would be NaN
                st(sr + jn * WN, e); sum += e;
            }
            for (long jn = je; jn < jn_end; jn++) st(sr + jn * WN, vn{});
            float tot = hsum(sum);
            inv[r] = 1.f / tot;
            if (i0 + r < N) lse[i0 + r] = (mr + std::log2(tot)) * LN2;  // saved in natural units
        }
        weighted_rows<DV, R>(s, Mp, 1, 0, mmax, v, o + i0 * osn, osn, inv, N - i0 < R ? N - i0 : R);
    }
}

// Two passes per head. First, by blocks of R queries: the probabilities P and dS = P * (dP - delta)
// (times the scale) into N x Mp buffers, and dQ = dS K. Then, by blocks of R keys, dV = P^T dO and
// dK = dS^T Q, accumulated in registers over the queries that see those keys.
template <int DV, int R>
static void bwd_head(Head q, Head k, Head v, Head o, Head g, const float *lse, float *dq, long dqsn,
                     float *dk, long dksn, float *dv, long dvsn, long N, long M, float scale, int causal,
                     float *kt, float *vt, float *pm, float *dsm) {
    const long D = DV * W, Mp = padded(M);
    transpose(k, M, D, Mp, kt); transpose(v, M, D, Mp, vt);
    for (long i0 = 0; i0 < N; i0 += R) {
        const float *qr[R], *gr[R]; long m[R]; float l[R], delta[R]; bool live[R];
        for (int r = 0; r < R; r++) {
            live[r] = i0 + r < N;
            long i = live[r] ? i0 + r : N - 1;
            qr[r] = q.row(i); gr[r] = g.row(i); m[r] = keys_seen(i, N, M, causal); l[r] = lse[i] * LOG2E;
            vn dl{}; for (int c = 0; c < DV * W / WN; c++) dl += ld(gr[r] + c * WN) * ld(o.row(i) + c * WN);
            delta[r] = hsum(dl);
        }
        long mmax = m[R - 1] > m[0] ? m[R - 1] : m[0];
        long jn_end = padded(mmax) / WN;  // the key vectors the block's rows reach
        float *p = pm + i0 * Mp, *dp = dsm + i0 * Mp;  // rows i0..i0+3 (the buffers have room past N)
        scores<DV, R>(qr, kt, Mp, jn_end, scale * LOG2E, p);
        scores<DV, R>(gr, vt, Mp, jn_end, 1.0f, dp);
        for (int r = 0; r < R; r++) {
            float *pr = p + r * Mp, *dpr = dp + r * Mp;
            long je = live[r] ? (m[r] + WN - 1) / WN : 0;  // the row's key vectors
            vn keep = lanes_below(m[r] - (je - 1) * WN);
            for (long jn = 0; jn < je; jn++) {
                vn e = vexp2_neg(ld(pr + jn * WN) - l[r]);
                if (jn == je - 1) e = keep > 0 ? e : vn{};  // select: inf * 0 would be NaN
                st(pr + jn * WN, e);
                st(dpr + jn * WN, e * (ld(dpr + jn * WN) - delta[r]) * scale);
            }
            for (long jn = je; jn < Mp / WN; jn++) { st(pr + jn * WN, vn{}); st(dpr + jn * WN, vn{}); }
        }
        weighted_rows<DV, R>(dp, Mp, 1, 0, mmax, k, dq + i0 * dqsn, dqsn, ONES, N - i0 < R ? N - i0 : R);
    }
    for (long j0 = 0; j0 < M; j0 += R) {
        // the first query that sees key j0 (causal: i + M - N >= j0); earlier rows hold zeros there
        long first = causal ? (j0 - (M - N) > 0 ? j0 - (M - N) : 0) : 0;
        const int keys = M - j0 < R ? M - j0 : R;
        weighted_rows<DV, R>(pm + j0, 1, Mp, first, N, g, dv + j0 * dvsn, dvsn, ONES, keys);
        weighted_rows<DV, R>(dsm + j0, 1, Mp, first, N, q, dk + j0 * dksn, dksn, ONES, keys);
    }
}

static float *buf(long n) { return (float *)std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64 + 64); }


// ---------------------------------------------------------------------------------------------
// GELU, exact (erf) and tanh-approximated, forward and backward over contiguous fp32 arrays.
// ATen's CPU kernels run these slowly enough that the backward of a char GPT's MLP took as long as
// a quarter of its attention (measured: docs/results.md); these use the polynomial exp above.
//   exact:  y = x Phi(x),  dy/dx = Phi(x) + x phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
//   tanh:   y = x (1 + tanh u) / 2,  u = sqrt(2/pi) (x + 0.044715 x^3)
//           dy/dx = (1 + tanh u) / 2 + x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2

// one pass over n elements in chunks of a vector (the tail through a zero-padded vector)
template <typename F>
static void elementwise(long n, int nthreads, F f) {
    const long chunks = (n + WN - 1) / WN;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long c = 0; c < chunks; c++) f(c * WN, n - c * WN < WN ? n - c * WN : WN);
}

template <bool TANH>
static void gelu_fwd_t(const float *x, float *y, long n, int nthreads) {
    elementwise(n, nthreads, [=](long i, long k) {
        if (k == WN) { st(y + i, gelu_fwd_v<TANH>(ld(x + i))); return; }
        vn a{}; for (long j = 0; j < k; j++) a[j] = x[i + j];
        vn r = gelu_fwd_v<TANH>(a); for (long j = 0; j < k; j++) y[i + j] = r[j];
    });
}

template <bool TANH>
static void gelu_bwd_t(const float *x, const float *g, float *dx, long n, int nthreads) {
    elementwise(n, nthreads, [=](long i, long k) {
        if (k == WN) { st(dx + i, gelu_bwd_v<TANH>(ld(x + i), ld(g + i))); return; }
        vn a{}, b{}; for (long j = 0; j < k; j++) { a[j] = x[i + j]; b[j] = g[i + j]; }
        vn r = gelu_bwd_v<TANH>(a, b); for (long j = 0; j < k; j++) dx[i + j] = r[j];
    });
}

// y[r] = W x[r] (+ b) for a few rows x (a generation step's products): one pass over W (out x in,
// row-major), each thread a contiguous block of its rows, ROWS of them streamed at once (simd.h's dots)
// and kept in L1 for the few x rows.
static void rows_linear(const float *x, const float *w, const float *b, float *y, long rows, long in, long out,
                        long xs, long ys, int nthreads) {
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long g = 0; g < (out + ROWS - 1) / ROWS; g++) {
        const long o0 = g * ROWS, k = out - o0 < ROWS ? out - o0 : ROWS;
        for (long r = 0; r < rows; r++) {
            float s[ROWS];
            dots(w + o0 * in, in, x + r * xs, k, s);
            for (long j = 0; j < k; j++) y[r * ys + o0 + j] = b ? s[j] + b[o0 + j] : s[j];
        }
    }
}

extern "C" {
int linear_rows(const float *x, const float *w, const float *b, float *y, long rows, long in, long out, long xs,
                long ys, int nthreads) {
    rows_linear(x, w, b, y, rows, in, out, xs, ys, nthreads);
    return 0;
}

int attn_fwd(const float *q, const float *k, const float *v, float *o, float *lse,
             long B, long H, long N, long M, long D,
             long qsb, long qsh, long qsn, long ksb, long ksh, long ksn, long vsb, long vsh, long vsn,
             long osb, long osh, long osn, float scale, int causal, int nthreads) {
    if (D <= 0 || D % W || D / W > 4) return 1;
    if (causal && M < N) return 2;
    const long Mp = padded(M);
    volatile int failed = 0;  // a thread's buffers could not be allocated
    #pragma omp parallel num_threads(nthreads)
    {
        float *kt = buf(D * Mp), *s = buf(RMAX * Mp);
        bool ok = kt && s;
        if (!ok) failed = 1;
        #pragma omp for schedule(static)
        for (long bh = 0; bh < B * H; bh++) {
            if (!ok) continue;
            long b = bh / H, h = bh % H;
            Head hq{q + b * qsb + h * qsh, qsn}, hk{k + b * ksb + h * ksh, ksn}, hv{v + b * vsb + h * vsh, vsn};
            float *ob = o + b * osb + h * osh, *lb = lse + bh * N;
            switch (D / W) {
                case 1: fwd_head<1, 4>(hq, hk, hv, ob, osn, lb, N, M, scale, causal, kt, s); break;
                case 2: fwd_head<2, 4>(hq, hk, hv, ob, osn, lb, N, M, scale, causal, kt, s); break;
                case 3: fwd_head<3, 4>(hq, hk, hv, ob, osn, lb, N, M, scale, causal, kt, s); break;
                case 4: fwd_head<4, 4>(hq, hk, hv, ob, osn, lb, N, M, scale, causal, kt, s); break;
            }
        }
        std::free(kt); std::free(s);
    }
    return failed ? 3 : 0;
}

int attn_bwd(const float *q, const float *k, const float *v, const float *o, const float *g,
             const float *lse, float *dq, float *dk, float *dv,
             long B, long H, long N, long M, long D,
             long qsb, long qsh, long qsn, long ksb, long ksh, long ksn, long vsb, long vsh, long vsn,
             long osb, long osh, long osn, long gsb, long gsh, long gsn,
             long dqsb, long dqsh, long dqsn, long dksb, long dksh, long dksn, long dvsb, long dvsh, long dvsn,
             float scale, int causal, int nthreads) {
    if (D <= 0 || D % W || D / W > 4) return 1;
    if (causal && M < N) return 2;
    const long Mp = padded(M);
    volatile int failed = 0;  // a thread's buffers could not be allocated
    #pragma omp parallel num_threads(nthreads)
    {
        float *kt = buf(D * Mp), *vt = buf(D * Mp), *pm = buf((N + RMAX) * Mp), *dsm = buf((N + RMAX) * Mp);
        bool ok = kt && vt && pm && dsm;
        if (!ok) failed = 1;
        #pragma omp for schedule(static)
        for (long bh = 0; bh < B * H; bh++) {
            if (!ok) continue;
            long b = bh / H, h = bh % H;
            Head hq{q + b * qsb + h * qsh, qsn}, hk{k + b * ksb + h * ksh, ksn}, hv{v + b * vsb + h * vsh, vsn};
            Head ho{o + b * osb + h * osh, osn}, hg{g + b * gsb + h * gsh, gsn};
            float *dqb = dq + b * dqsb + h * dqsh, *dkb = dk + b * dksb + h * dksh, *dvb = dv + b * dvsb + h * dvsh;
            const float *lb = lse + bh * N;
            switch (D / W) {
                case 1: bwd_head<1, 4>(hq, hk, hv, ho, hg, lb, dqb, dqsn, dkb, dksn, dvb, dvsn, N, M, scale, causal, kt, vt, pm, dsm); break;
                case 2: bwd_head<2, 4>(hq, hk, hv, ho, hg, lb, dqb, dqsn, dkb, dksn, dvb, dvsn, N, M, scale, causal, kt, vt, pm, dsm); break;
                case 3: bwd_head<3, 4>(hq, hk, hv, ho, hg, lb, dqb, dqsn, dkb, dksn, dvb, dvsn, N, M, scale, causal, kt, vt, pm, dsm); break;
                case 4: bwd_head<4, 4>(hq, hk, hv, ho, hg, lb, dqb, dqsn, dkb, dksn, dvb, dvsn, N, M, scale, causal, kt, vt, pm, dsm); break;
            }
        }
        std::free(kt); std::free(vt); std::free(pm); std::free(dsm);
    }
    return failed ? 3 : 0;
}

// dst (cols x rows, row-major) = the transpose of src (rows x cols, rows `xs` floats apart). oneDNN reads
// a transposed first operand by copying it to rows, and ATen's strided copy of a (6400, 128) float32
// matrix took 0.56 ms warm, 0.89 cold, where these 32 x 32 tiles (one of each side fits L1) take 0.14 and
// 0.28 (2 threads, Zen 5): a linear layer's weight gradient, dy^T x, pays for one such copy every step.
int transpose_rows(const float *src, float *dst, long rows, long cols, long xs, int nthreads) {
    const long T = 32;
    #pragma omp parallel for collapse(2) num_threads(nthreads) schedule(static)
    for (long i0 = 0; i0 < rows; i0 += T)
        for (long j0 = 0; j0 < cols; j0 += T) {
            const long i1 = i0 + T < rows ? i0 + T : rows, j1 = j0 + T < cols ? j0 + T : cols;
            for (long j = j0; j < j1; ++j)
                for (long i = i0; i < i1; ++i)
                    dst[j * rows + i] = src[i * xs + j];
        }
    return 0;
}

int gelu_fwd(const float *x, float *y, long n, int tanh_approx, int nthreads) {
    if (tanh_approx) gelu_fwd_t<true>(x, y, n, nthreads); else gelu_fwd_t<false>(x, y, n, nthreads);
    return 0;
}

int gelu_bwd(const float *x, const float *g, float *dx, long n, int tanh_approx, int nthreads) {
    if (tanh_approx) gelu_bwd_t<true>(x, g, dx, n, nthreads); else gelu_bwd_t<false>(x, g, dx, n, nthreads);
    return 0;
}
}
