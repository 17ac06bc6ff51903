/* ref.h — straightforward fp64 CPU references of the kernels in kernels/ (the .cuh files), the
 * oracle of the GPU tests. Same argument order and layouts as the kernels (docs/kernels.md),
 * doubles instead of bf16/fp32. tests/unit/test_kernel_ref.c checks every backward here against
 * finite differences of its forward, so the GPU tests compare against derivatives known right. */
#ifndef STEPC_TESTS_REF_H
#define STEPC_TESTS_REF_H

#include <stdint.h>

void ref_embedding_forward(double *out, const int *tokens, const double *wte, const double *wpe, int N, int T,
                           int C, int V);
void ref_embedding_backward_token(double *dwte, const double *dout, const int *tokens, int N, int C, int V);
void ref_embedding_backward_position(double *dwpe, const double *dout, int B, int T, int C);

/* mean may be NULL (RMSNorm); bias may be NULL. */
void ref_norm_forward(double *out, double *mean, double *rstd, const double *x, const double *w, const double *b,
                      int N, int C, double eps);
/* dx overwritten; dw, db (db may be NULL) accumulated. layer: 1 LayerNorm, 0 RMSNorm. */
void ref_norm_backward(double *dx, double *dw, double *db, const double *dout, const double *x, const double *w,
                       int N, int C, double eps, int layer);

/* factor > 0: Llama 3's frequency scaling (low 1, high 4, original context 8192), written here from
 * Hugging Face's _compute_llama3_parameters; 0: none. */
void ref_rope(double *out, const double *in, int B, int T, int H, int D, double base, double factor, double sign);

void ref_softmax_causal_forward(double *p, const double *s, int BH, int T, double scale);
void ref_softmax_causal_backward(double *ds, const double *dp, const double *p, int BH, int T, double scale);

void ref_swiglu_forward(double *out, const double *in, int N, int F);
void ref_swiglu_backward(double *din, const double *dout, const double *in, int N, int F);
double ref_gelu(double x);
double ref_gelu_grad(double x);

/* Causal GQA attention; Q/O (B,T,H,D), K/V (B,T,Hkv,D), LSE (B,H,T). */
void ref_attention_forward(double *O, double *LSE, const double *Q, const double *K, const double *V, int B, int T,
                           int H, int Hkv, int D, double scale);
void ref_attention_backward(double *dQ, double *dK, double *dV, const double *dO, const double *Q, const double *K,
                            const double *V, int B, int T, int H, int Hkv, int D, double scale);

/* losses (N); dlogits (N, Vp). */
void ref_cross_entropy(double *losses, double *dlogits, const double *logits, const int *targets, int N, int V,
                       int Vp, double dloss);

/* One AdamW step on n elements, torch.optim.AdamW semantics (see kernels/optimizer.cuh). */
void ref_adamw(double *w, double *m, double *v, const double *g, long n, double lr, double b1, double b2,
               double eps, double wd, int step, double grad_scale);

/* Philox4x32-10 and the dropout keep decision of kernels/common.cuh, bit-exact. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
int ref_dropout_keep(uint64_t seed, uint32_t op_id, uint64_t i, float p);

/* Host bf16 (round to nearest even), as cvt.rn.bf16.f32 for finite values. */
uint16_t ref_f32_to_bf16(float f);
float ref_bf16_to_f32(uint16_t h);

#endif
