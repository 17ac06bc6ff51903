/* ref.c — fp64 CPU references of the kernels (see ref.h). Written for clarity, not speed. */
#include "ref.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void ref_embedding_forward(double *out, const int *tokens, const double *wte, const double *wpe, int N, int T,
                           int C, int V) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      int t = tokens[n];
      double v = t >= 0 && t < V ? wte[(long)t * C + c] : 0.0;
      out[(long)n * C + c] = v + (wpe ? wpe[(long)(n % T) * C + c] : 0.0);
    }
}

void ref_embedding_backward_token(double *dwte, const double *dout, const int *tokens, int N, int C, int V) {
  for (int n = 0; n < N; n++)
    if (tokens[n] >= 0 && tokens[n] < V)
      for (int c = 0; c < C; c++) dwte[(long)tokens[n] * C + c] += dout[(long)n * C + c];
}

void ref_embedding_backward_position(double *dwpe, const double *dout, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) dwpe[(long)t * C + c] += dout[((long)b * T + t) * C + c];
}

void ref_norm_forward(double *out, double *mean, double *rstd, const double *x, const double *w, const double *b,
                      int N, int C, double eps) {
  for (int n = 0; n < N; n++) {
    const double *r = x + (long)n * C;
    double mu = 0, var = 0;
    if (mean) {
      for (int c = 0; c < C; c++) mu += r[c];
      mu /= C;
      mean[n] = mu;
    }
    for (int c = 0; c < C; c++) var += (r[c] - mu) * (r[c] - mu);
    double s = 1.0 / sqrt(var / C + eps);
    rstd[n] = s;
    for (int c = 0; c < C; c++) out[(long)n * C + c] = (r[c] - mu) * s * w[c] + (b ? b[c] : 0.0);
  }
}

void ref_norm_backward(double *dx, double *dw, double *db, const double *dout, const double *x, const double *w,
                       int N, int C, double eps, int layer) {
  for (int n = 0; n < N; n++) {
    const double *r = x + (long)n * C, *d = dout + (long)n * C;
    double mu = 0, var = 0;
    if (layer) {
      for (int c = 0; c < C; c++) mu += r[c];
      mu /= C;
    }
    for (int c = 0; c < C; c++) var += (r[c] - mu) * (r[c] - mu);
    double s = 1.0 / sqrt(var / C + eps), sg = 0, sgx = 0;
    for (int c = 0; c < C; c++) {
      double xh = (r[c] - mu) * s, g = d[c] * w[c];
      sg += g;
      sgx += g * xh;
      dw[c] += d[c] * xh;
      if (db) db[c] += d[c];
    }
    sg = layer ? sg / C : 0.0;
    sgx /= C;
    for (int c = 0; c < C; c++) dx[(long)n * C + c] = s * (d[c] * w[c] - sg - (r[c] - mu) * s * sgx);
  }
}

static double ref_llama3_freq(double w, double factor) {
  double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0, wavelen = 2 * M_PI / w;
  double scaled = wavelen > low_wavelen ? w / factor : w;
  double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
  bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
  return medium ? (1 - smooth) * scaled / factor + smooth * scaled : scaled;
}

void ref_rope(double *out, const double *in, int B, int T, int H, int D, double base, double factor, double sign) {
  int half = D / 2;
  for (long row = 0; row < (long)B * T * H; row++) {
    int t = (int)((row / H) % T);
    for (int k = 0; k < half; k++) {
      double w = pow(base, -2.0 * k / D);
      if (factor > 0) w = ref_llama3_freq(w, factor);
      double a = t * w, c = cos(a), s = sign * sin(a);
      double x1 = in[row * D + k], x2 = in[row * D + k + half];
      out[row * D + k] = x1 * c - x2 * s;
      out[row * D + k + half] = x2 * c + x1 * s;
    }
  }
}

void ref_softmax_causal_forward(double *p, const double *s, int BH, int T, double scale) {
  for (long r = 0; r < (long)BH * T; r++) {
    int i = (int)(r % T);
    double m = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) m = fmax(m, scale * s[r * T + j]);
    for (int j = 0; j <= i; j++) sum += exp(scale * s[r * T + j] - m);
    for (int j = 0; j < T; j++) p[r * T + j] = j <= i ? exp(scale * s[r * T + j] - m) / sum : 0.0;
  }
}

void ref_softmax_causal_backward(double *ds, const double *dp, const double *p, int BH, int T, double scale) {
  for (long r = 0; r < (long)BH * T; r++) {
    int i = (int)(r % T);
    double dot = 0;
    for (int j = 0; j <= i; j++) dot += p[r * T + j] * dp[r * T + j];
    for (int j = 0; j < T; j++) ds[r * T + j] = j <= i ? scale * p[r * T + j] * (dp[r * T + j] - dot) : 0.0;
  }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

void ref_swiglu_forward(double *out, const double *in, int N, int F) {
  for (long n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      double g = in[n * 2 * F + f], u = in[n * 2 * F + F + f];
      out[n * F + f] = g * sigmoid(g) * u;
    }
}

void ref_swiglu_backward(double *din, const double *dout, const double *in, int N, int F) {
  for (long n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      double g = in[n * 2 * F + f], u = in[n * 2 * F + F + f], d = dout[n * F + f], s = sigmoid(g);
      din[n * 2 * F + f] = d * u * s * (1 + g * (1 - s));
      din[n * 2 * F + F + f] = d * g * s;
    }
}

double ref_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

double ref_gelu_grad(double x) { return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI); }

/* P for one (b, h) into p (T, T), and LSE. */
static void attn_probs(double *p, double *lse, const double *Q, const double *K, int b, int h, int T, int H, int Hkv,
                       int D, double scale) {
  int hk = h / (H / Hkv);
  for (int i = 0; i < T; i++) {
    const double *q = Q + (((long)b * T + i) * H + h) * D;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
      const double *k = K + (((long)b * T + j) * Hkv + hk) * D;
      double s = 0;
      for (int d = 0; d < D; d++) s += q[d] * k[d];
      p[(long)i * T + j] = s * scale;
      m = fmax(m, s * scale);
    }
    for (int j = 0; j <= i; j++) sum += exp(p[(long)i * T + j] - m);
    for (int j = 0; j < T; j++) p[(long)i * T + j] = j <= i ? exp(p[(long)i * T + j] - m) / sum : 0.0;
    if (lse) lse[((long)b * H + h) * T + i] = m + log(sum);
  }
}

void ref_attention_forward(double *O, double *LSE, const double *Q, const double *K, const double *V, int B, int T,
                           int H, int Hkv, int D, double scale) {
  double *p = malloc(sizeof *p * (size_t)T * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      int hk = h / (H / Hkv);
      attn_probs(p, LSE, Q, K, b, h, T, H, Hkv, D, scale);
      for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++) {
          double o = 0;
          for (int j = 0; j <= i; j++) o += p[(long)i * T + j] * V[(((long)b * T + j) * Hkv + hk) * D + d];
          O[(((long)b * T + i) * H + h) * D + d] = o;
        }
    }
  free(p);
}

void ref_attention_backward(double *dQ, double *dK, double *dV, const double *dO, const double *Q, const double *K,
                            const double *V, int B, int T, int H, int Hkv, int D, double scale) {
  double *p = malloc(sizeof *p * (size_t)T * T), *dp = malloc(sizeof *dp * (size_t)T);
  memset(dK, 0, sizeof *dK * (size_t)B * T * Hkv * D);
  memset(dV, 0, sizeof *dV * (size_t)B * T * Hkv * D);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      int hk = h / (H / Hkv);
      attn_probs(p, NULL, Q, K, b, h, T, H, Hkv, D, scale);
      for (int i = 0; i < T; i++) {
        const double *doi = dO + (((long)b * T + i) * H + h) * D;
        double dot = 0;
        for (int j = 0; j <= i; j++) {
          const double *v = V + (((long)b * T + j) * Hkv + hk) * D;
          double s = 0;
          for (int d = 0; d < D; d++) s += doi[d] * v[d];
          dp[j] = s;
          dot += p[(long)i * T + j] * s;
        }
        double *dq = dQ + (((long)b * T + i) * H + h) * D;
        for (int d = 0; d < D; d++) dq[d] = 0;
        for (int j = 0; j <= i; j++) {
          double pij = p[(long)i * T + j], ds = pij * (dp[j] - dot) * scale;
          long kv = (((long)b * T + j) * Hkv + hk) * D;
          const double *qi = Q + (((long)b * T + i) * H + h) * D;
          for (int d = 0; d < D; d++) {
            dq[d] += ds * K[kv + d];
            dK[kv + d] += ds * qi[d];
            dV[kv + d] += pij * doi[d];
          }
        }
      }
    }
  free(p);
  free(dp);
}

void ref_cross_entropy(double *losses, double *dlogits, const double *logits, const int *targets, int N, int V,
                       int Vp, double dloss) {
  for (long n = 0; n < N; n++) {
    const double *x = logits + n * Vp;
    int y = targets[n];
    int valid = y >= 0 && y < V;
    double m = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) m = fmax(m, x[j]);
    for (int j = 0; j < V; j++) s += exp(x[j] - m);
    losses[n] = valid ? log(s) + m - x[y] : 0.0;
    for (int j = 0; j < Vp; j++)
      dlogits[n * Vp + j] = j < V && valid ? dloss * (exp(x[j] - m) / s - (j == y)) : 0.0;
  }
}

void ref_adamw(double *w, double *m, double *v, const double *g, long n, double lr, double b1, double b2,
               double eps, double wd, int step, double grad_scale) {
  double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
  for (long i = 0; i < n; i++) {
    double gi = g[i] * grad_scale;
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    w[i] *= 1 - lr * wd;
    w[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
  }
}

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1,
             n3 = (uint32_t)p0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

int ref_dropout_keep(uint64_t seed, uint32_t op_id, uint64_t i, float p) {
  uint64_t g = i >> 2;
  uint32_t ctr[4] = {(uint32_t)g, (uint32_t)(g >> 32), op_id, 0}, key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)},
           out[4];
  ref_philox4x32_10(ctr, key, out);
  return (out[i & 3] >> 8) >= (uint32_t)(p * 16777216.0f);
}

uint16_t ref_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float ref_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
