// One new token through a GPT's pre-norm blocks, for each of B sequences: a generation step's whole
// backbone in one call, its keys and values written into the cache on the way.
//
// Why it exists: a cached step computes one position, so its arithmetic is small and it is bound by
// reading every weight once; run as torch operations it pays a dispatch (some microseconds) for each
// of the dozens of small operations a block makes, and a char GPT's eager step took three to four times
// the time its weights take to read (bench_generate.py: 4.98 ms against 1.30 ms on 2026-11-24; 1.91 ms
// against 0.54 ms on a Zen 5, 2026-11-30). torch.compile fuses them, but costs seconds before the first
// token; this costs nothing after the library is built (plan/native.py). One OpenMP region runs every
// layer; its threads split each product's output rows (each weight row read once, from memory, for
// the B rows), and the attention's (sequence, head) pairs, with a barrier between the phases.
//
// Per layer, x (B, D) the residual stream, updated in place:
//   h = LN1(x);  q | k | v = h Wqkv^T + bqkv, k and v written at cache position p;
//   a = softmax(q k[0..p]^T / sqrt(Dh)) v[0..p] per head;  x += a Wproj^T + bproj;
//   h = LN2(x);  u = act(h Wfc1^T + bfc1);  x += u Wfc2^T + bfc2.
// The caller gives, per layer, SLOTS addresses in the order of the enum below (a bias may be null), the
// cache buffers (B, H, M, Dh) contiguous float32, and scratch of B * (2 D + F) + B * H * M floats.
#include "simd.h"

enum Slot { LN1_W, LN1_B, QKV_W, QKV_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC1_W, FC1_B, FC2_W, FC2_B, K_CACHE,
            V_CACHE, SLOTS };
static_assert(WN % ROWS == 0, "FC1 takes a vector's outputs in whole groups of ROWS rows");
enum Activation { GELU = 0, GELU_TANH = 1, RELU = 2 };

// y = (x - mean) / sqrt(var + eps) * w + b over D floats, the moments summed in double
static void layer_norm(const float *x, const float *w, const float *b, float *y, long D, float eps) {
    double sum = 0, sq = 0;
    for (long i = 0; i < D; i++) sum += x[i];
    const double mean = sum / D;
    for (long i = 0; i < D; i++) { double c = x[i] - mean; sq += c * c; }
    const float m = (float)mean, r = (float)(1.0 / std::sqrt(sq / D + eps));
    for (long i = 0; i < D; i++) y[i] = (x[i] - m) * r * w[i] + (b ? b[i] : 0.0f);
}

static inline vn activate(vn u, int act) {
    if (act == GELU_TANH) return gelu_fwd_v<true>(u);
    if (act == GELU) return gelu_fwd_v<false>(u);
    return u < 0 ? vn{} : u;
}

// o = softmax(scale * q k_j^T over j = 0..n-1) summed over v_j: one head's query against its n cached
// keys (rows of Dh floats), s the n scores' buffer
static void attend_one(const float *q, const float *k, const float *v, long n, long Dh, float scale, float *s,
                       float *o) {
    float top = -INFINITY;
    for (long j = 0; j < n; j++) { s[j] = dot(q, k + j * Dh, Dh) * scale; top = s[j] > top ? s[j] : top; }
    float total = 0;
    long j = 0;
    for (; j + WN <= n; j += WN) { vn e = vexp(ld(s + j) - top); st(s + j, e); total += hsum(e); }
    for (; j < n; j++) { s[j] = std::exp(s[j] - top); total += s[j]; }
    for (long d = 0; d < Dh; d++) o[d] = 0.0f;
    for (j = 0; j < n; j++) {
        const float w = s[j] / total, *vj = v + j * Dh;
        for (long d = 0; d < Dh; d++) o[d] += w * vj[d];
    }
}

// x[b, o] += W[o] . src[b] + bias[o] (bias may be null) for the up to ROWS output rows o from o0 and each of the B
// rows: a branch's output product added to the residual stream, W (D, n), src (B, n), x (B, D)
static void add_rows(float *x, const float *W, const float *bias, const float *src, long B, long D, long n, long o0) {
    const long k = D - o0 < ROWS ? D - o0 : ROWS;
    for (long b = 0; b < B; b++) {
        float y[ROWS];
        dots(W + o0 * n, n, src + b * n, k, y);
        for (long r = 0; r < k; r++) x[b * D + o0 + r] += y[r] + (bias ? bias[o0 + r] : 0.0f);
    }
}

extern "C" {
// Returns 0, or 1 for sizes it does not take (heads that do not divide the width or of more than 512 floats,
// a position past the cache, an unknown activation).
int gpt_decode_blocks(float *x, long B, long D, long H, long F, long L, const void *const *table, long M, long p,
                      float eps, int act, float *scratch, int nthreads) {
    if (B < 1 || D < 1 || H < 1 || D % H || F < 1 || L < 1 || p < 0 || p >= M || act < GELU || act > RELU || D / H > 512)
        return 1;
    const long Dh = D / H, n = p + 1;
    const float scale = 1.0f / std::sqrt((float)Dh);
    float *h = scratch, *q = h + B * D, *u = q + B * D, *a = q, *s = u + B * F;  // a: q's rows, once read
    #pragma omp parallel num_threads(nthreads)
    for (long l = 0; l < L; l++) {
        const float *const *w = (const float *const *)(table + l * SLOTS);
        float *kc = (float *)w[K_CACHE], *vc = (float *)w[V_CACHE];
        #pragma omp single
        for (long b = 0; b < B; b++) layer_norm(x + b * D, w[LN1_W], w[LN1_B], h + b * D, D, eps);
        #pragma omp for schedule(static)
        for (long g = 0; g < (3 * D + ROWS - 1) / ROWS; g++) {  // ROWS output rows at a time (simd.h's dots)
            const long o0 = g * ROWS, k = 3 * D - o0 < ROWS ? 3 * D - o0 : ROWS;
            for (long b = 0; b < B; b++) {
                float y[ROWS];
                dots(w[QKV_W] + o0 * D, D, h + b * D, k, y);
                for (long r = 0; r < k; r++) {
                    const long o = o0 + r, part = o / D, j = o % D, at = ((j / Dh) * M + p) * Dh + j % Dh;  // k, v: (head, p, d)
                    const float yo = y[r] + (w[QKV_B] ? w[QKV_B][o] : 0.0f);
                    if (part == 0) q[b * D + j] = yo;
                    else (part == 1 ? kc : vc)[b * H * M * Dh + at] = yo;
                }
            }
        }
        #pragma omp for schedule(static)
        for (long bh = 0; bh < B * H; bh++) {
            const long b = bh / H, hd = bh % H, head = (b * H + hd) * M * Dh;
            float o[512];  // Dh floats (checked above: at most 512)
            attend_one(q + b * D + hd * Dh, kc + head, vc + head, n, Dh, scale, s + bh * M, o);
            // q's own head is read: its output can take its place
            std::memcpy(a + b * D + hd * Dh, o, Dh * sizeof(float));
        }
        #pragma omp for schedule(static)
        for (long g = 0; g < (D + ROWS - 1) / ROWS; g++)
            add_rows(x, w[PROJ_W], w[PROJ_B], a, B, D, D, g * ROWS);
        #pragma omp single
        for (long b = 0; b < B; b++) layer_norm(x + b * D, w[LN2_W], w[LN2_B], h + b * D, D, eps);
        #pragma omp for schedule(static)
        for (long c = 0; c < (F + WN - 1) / WN; c++) {  // a vector's outputs at a time, activated as one
            const long o0 = c * WN, k = F - o0 < WN ? F - o0 : WN;
            for (long b = 0; b < B; b++) {
                vn y{};
                for (long i = 0; i < k; i += ROWS) {
                    float yr[ROWS];
                    const long kr = k - i < ROWS ? k - i : ROWS;
                    dots(w[FC1_W] + (o0 + i) * D, D, h + b * D, kr, yr);
                    for (long r = 0; r < kr; r++) y[i + r] = yr[r] + (w[FC1_B] ? w[FC1_B][o0 + i + r] : 0.0f);
                }
                y = activate(y, act);
                for (long i = 0; i < k; i++) u[b * F + o0 + i] = y[i];
            }
        }
        #pragma omp for schedule(static)
        for (long g = 0; g < (D + ROWS - 1) / ROWS; g++)
            add_rows(x, w[FC2_W], w[FC2_B], u, B, D, F, g * ROWS);
    }
    return 0;
}
}
