/* kernel_list.h — every extern "C" kernel of kernels/ (the .cuh files) with its parameters, in
 * order: the one place on the host side that says how a kernel is called. Adding a kernel is its
 * definition in a .cuh file and one row here (`build/tests/unit/kernel_sigs --print` prints the
 * row of every declared kernel); what the host needs is generated from the row, as listed below.
 *
 * An X-macro. Define STEPC_KERNEL(name, params) and, where params is used, STEPC_KARG(letter,
 * ctype, pname), then #include "kernels/kernel_list.h". Each parameter is one of
 *   KP(ctype, pname)  a pointer; ctype exactly as declared (`const bf16*`), 8 bytes
 *   KI int, KU unsigned (4 bytes), KL long, KQ unsigned long long (8 bytes), KF float, KD double
 * and expands to STEPC_KARG(letter, ctype, pname): letter is the signature letter p i u l q f d,
 * ctype the C type as spelled in the declaration, pname its name there.
 *
 * What is generated from it:
 *   - the handles RtKernel RT_K_<name> (runtime/rt.h; the row order is the handle, by which step.c
 *     launches, its kernel-list hash covering the order) and the names the module looks up
 *     (runtime/module.c);
 *   - the signature string, one letter a parameter ("ppppiif"), by which the runtime checks
 *     parameter sizes against the loaded cubin (cuFuncGetParamInfo), the step recorder
 *     (runtime/record.c) reads launch arguments and step.c prints them;
 *   - a typed launcher per kernel, rt_launch_<name>(d, grid, block, smem, <the parameters>)
 *     (runtime/cuda/launchers.h), which packs the argument array itself.
 * Names and types matter, not only sizes: the ctest unit.kernel_sigs compares every row, parameter
 * by parameter (type and name, in order), with the kernel's declaration in kernels/, so two
 * parameters of one size swapped in either place fail CI; tests/unit/test_nvrtc.c checks each name
 * is in the compiled cubin. The generated elementwise kernels (compiler/ew_fuse.h) are not here:
 * their signatures are built per step. */
#define KP(ctype, pname) STEPC_KARG(p, ctype, pname)
#define KI(pname) STEPC_KARG(i, int, pname)
#define KU(pname) STEPC_KARG(u, unsigned, pname)
#define KL(pname) STEPC_KARG(l, long, pname)
#define KQ(pname) STEPC_KARG(q, unsigned long long, pname)
#define KF(pname) STEPC_KARG(f, float, pname)
#define KD(pname) STEPC_KARG(d, double, pname)

STEPC_KERNEL(swiglu_forward, KP(bf16*, out) KP(const bf16*, inp) KI(N) KI(F))
STEPC_KERNEL(swiglu_backward, KP(bf16*, dinp) KP(const bf16*, dout) KP(const bf16*, inp) KI(N) KI(F))
STEPC_KERNEL(gelu_forward, KP(bf16*, out) KP(const bf16*, inp) KL(n))
STEPC_KERNEL(gelu_backward, KP(bf16*, dinp) KP(const bf16*, dout) KP(const bf16*, inp) KL(n))
STEPC_KERNEL(dropout_forward, KP(bf16*, out) KP(const bf16*, inp) KL(n) KF(p)
             KP(const unsigned long long*, seed) KU(op_id))
STEPC_KERNEL(dropout_backward, KP(bf16*, dinp) KP(const bf16*, dout) KL(n) KF(p)
             KP(const unsigned long long*, seed) KU(op_id))
STEPC_KERNEL(dropout_residual_forward, KP(bf16*, out) KP(const bf16*, residual) KP(const bf16*, inp) KL(n)
             KF(p) KP(const unsigned long long*, seed) KU(op_id))
STEPC_KERNEL(residual_add, KP(bf16*, out) KP(const bf16*, a) KP(const bf16*, b) KL(n))
STEPC_KERNEL(cast_f32_to_bf16, KP(bf16*, out) KP(const float*, inp) KL(n))
STEPC_KERNEL(cast_bf16_to_f32, KP(float*, out) KP(const bf16*, inp) KL(n))
STEPC_KERNEL(grad_accumulate_bf16, KP(float*, acc) KP(const bf16*, grad) KL(n))
STEPC_KERNEL(grad_accumulate_f32, KP(float*, acc) KP(const float*, grad) KL(n))
STEPC_KERNEL(scale_f32, KP(float*, x) KP(const float*, scale) KL(n))
STEPC_KERNEL(fill_f32, KP(float*, x) KF(value) KL(n))
STEPC_KERNEL(embedding_forward, KP(bf16*, out) KP(const int*, tokens) KP(const bf16*, wte)
             KP(const bf16*, wpe) KI(N) KI(T) KI(C) KI(V))
STEPC_KERNEL(embedding_backward_token, KP(float*, dwte) KP(const bf16*, dout) KP(const int*, tokens) KI(N)
             KI(C) KI(V))
STEPC_KERNEL(embedding_backward_position, KP(float*, dwpe) KP(const bf16*, dout) KI(B) KI(T) KI(C))
STEPC_KERNEL(flash_attention_backward_preprocess, KP(float*, Dsum) KP(const bf16*, dO) KP(const bf16*, O)
             KI(B) KI(T) KI(H) KI(D))
STEPC_KERNEL(cross_entropy_forward_backward, KP(float*, losses) KP(bf16*, logits) KP(const int*, targets)
             KI(N) KI(V) KI(Vp) KF(dloss))
STEPC_KERNEL(cross_entropy_cluster, KP(float*, losses) KP(bf16*, logits) KP(const int*, targets) KI(N) KI(V) KI(Vp)
             KF(dloss))
STEPC_KERNEL(loss_reduce, KP(float*, out) KP(const float*, losses) KI(N) KF(scale))
STEPC_KERNEL(rmsnorm_forward, KP(bf16*, out) KP(float*, rstd) KP(const bf16*, inp) KP(const bf16*, weight)
             KI(N) KI(C) KF(eps))
STEPC_KERNEL(layernorm_forward, KP(bf16*, out) KP(float*, mean) KP(float*, rstd) KP(const bf16*, inp)
             KP(const bf16*, weight) KP(const bf16*, bias) KI(N) KI(C) KF(eps))
STEPC_KERNEL(residual_rmsnorm_forward, KP(bf16*, residual) KP(bf16*, out) KP(float*, rstd)
             KP(const bf16*, a) KP(const bf16*, b) KP(const bf16*, weight) KI(N) KI(C) KF(eps))
STEPC_KERNEL(residual_layernorm_forward, KP(bf16*, residual) KP(bf16*, out) KP(float*, mean)
             KP(float*, rstd) KP(const bf16*, a) KP(const bf16*, b) KP(const bf16*, weight)
             KP(const bf16*, bias) KI(N) KI(C) KF(eps))
STEPC_KERNEL(rmsnorm_backward_input, KP(bf16*, dinp) KP(const bf16*, dout) KP(const bf16*, inp)
             KP(const bf16*, weight) KP(const float*, rstd) KI(N) KI(C) KI(accumulate))
STEPC_KERNEL(layernorm_backward_input, KP(bf16*, dinp) KP(const bf16*, dout) KP(const bf16*, inp)
             KP(const bf16*, weight) KP(const float*, mean) KP(const float*, rstd) KI(N) KI(C)
             KI(accumulate))
STEPC_KERNEL(norm_backward_weight_partial, KP(float*, partial) KP(const bf16*, dout) KP(const bf16*, inp)
             KP(const float*, mean) KP(const float*, rstd) KI(N) KI(C))
STEPC_KERNEL(bias_backward_partial, KP(float*, partial) KP(const bf16*, dout) KI(N) KI(C))
STEPC_KERNEL(colsum_accumulate, KP(float*, out) KP(const float*, partial) KI(G) KI(C) KI(ld))
STEPC_KERNEL(norm_squared_partial, KP(float*, partial) KP(const float*, x) KL(n))
STEPC_KERNEL(global_norm_finalize, KP(float*, norm) KP(float*, scale) KP(const float*, partial) KI(count)
             KF(max_norm))
STEPC_KERNEL(adamw_update, KP(float*, master) KP(bf16*, param) KP(const float*, grad) KP(float*, m)
             KP(float*, v) KL(n) KP(const float*, hp) KP(const float*, grad_scale) KF(wd_mult))
STEPC_KERNEL(norm_squared_multi, KP(float*, partial) KP(const long long*, table) KI(rows) KL(chunk))
STEPC_KERNEL(adamw_multi, KP(const long long*, table) KI(rows) KL(chunk) KP(const float*, hp)
             KP(const float*, grad_scale))
STEPC_KERNEL(rope_forward, KP(bf16*, out) KP(const bf16*, inp) KI(B) KI(T) KI(H) KI(D) KF(base))
STEPC_KERNEL(rope_backward, KP(bf16*, dinp) KP(const bf16*, dout) KI(B) KI(T) KI(H) KI(D) KF(base))
STEPC_KERNEL(rope_split_qkv, KP(bf16*, q) KP(bf16*, k) KP(bf16*, v) KP(const bf16*, qkv) KL(N) KI(T) KI(H) KI(G) KI(D)
             KF(base))
STEPC_KERNEL(rope_concat_qkv, KP(bf16*, dqkv) KP(const bf16*, dq) KP(const bf16*, dk) KP(const bf16*, dv) KL(N) KI(T)
             KI(H) KI(G) KI(D) KF(base))
STEPC_KERNEL(softmax_causal_forward, KP(bf16*, probs) KP(const bf16*, scores) KI(BH) KI(T) KF(scale))
STEPC_KERNEL(softmax_causal_backward, KP(bf16*, dscores) KP(const bf16*, dprobs) KP(const bf16*, probs)
             KI(BH) KI(T) KF(scale))
STEPC_KERNEL(causal_mask_fill, KP(bf16*, out) KP(const bf16*, inp) KL(rows) KI(T) KI(fill_zero))
STEPC_KERNEL(transpose_bthd_to_bhtd, KP(bf16*, out) KP(const bf16*, inp) KI(B) KI(T) KI(H) KI(D))
STEPC_KERNEL(transpose_bhtd_to_bthd, KP(bf16*, out) KP(const bf16*, inp) KI(B) KI(T) KI(H) KI(D))
STEPC_KERNEL(flash_attention_forward_d64, KP(bf16*, O) KP(float*, LSE) KP(const bf16*, Q) KP(const bf16*, K)
             KP(const bf16*, V) KI(B) KI(T) KI(H) KI(Hkv) KF(scale))
STEPC_KERNEL(flash_attention_forward_d128, KP(bf16*, O) KP(float*, LSE) KP(const bf16*, Q)
             KP(const bf16*, K) KP(const bf16*, V) KI(B) KI(T) KI(H) KI(Hkv) KF(scale))
STEPC_KERNEL(flash_attention_backward_dkdv_d64, KP(bf16*, dK) KP(bf16*, dV) KP(const bf16*, Q)
             KP(const bf16*, K) KP(const bf16*, V) KP(const bf16*, dO) KP(const float*, LSE)
             KP(const float*, Dsum) KI(B) KI(T) KI(H) KI(Hkv) KF(scale))
STEPC_KERNEL(flash_attention_backward_dkdv_d128, KP(bf16*, dK) KP(bf16*, dV) KP(const bf16*, Q)
             KP(const bf16*, K) KP(const bf16*, V) KP(const bf16*, dO) KP(const float*, LSE)
             KP(const float*, Dsum) KI(B) KI(T) KI(H) KI(Hkv) KF(scale))
STEPC_KERNEL(flash_attention_backward_dq_d64, KP(bf16*, dQ) KP(const bf16*, Q) KP(const bf16*, K)
             KP(const bf16*, V) KP(const bf16*, dO) KP(const float*, LSE) KP(const float*, Dsum) KI(B) KI(T)
             KI(H) KI(Hkv) KF(scale))
STEPC_KERNEL(flash_attention_backward_dq_d128, KP(bf16*, dQ) KP(const bf16*, Q) KP(const bf16*, K)
             KP(const bf16*, V) KP(const bf16*, dO) KP(const float*, LSE) KP(const float*, Dsum) KI(B) KI(T)
             KI(H) KI(Hkv) KF(scale))
STEPC_KERNEL(split_qkv, KP(bf16*, q) KP(bf16*, k) KP(bf16*, v) KP(const bf16*, qkv) KL(N) KI(H) KI(G) KI(D))
STEPC_KERNEL(concat_qkv, KP(bf16*, qkv) KP(const bf16*, q) KP(const bf16*, k) KP(const bf16*, v) KL(N) KI(H)
             KI(G) KI(D))
STEPC_KERNEL(pos_add, KP(bf16*, out) KP(const bf16*, x) KP(const bf16*, P) KL(N) KI(T) KI(C))
STEPC_KERNEL(lr_schedule, KP(int*, step) KP(float*, lr) KD(lr0) KD(min_lr) KL(warmup) KL(decay) KI(style))
STEPC_KERNEL(adamw_hparams, KP(float*, hp) KP(const int*, step) KP(const float*, lr) KF(b1) KF(b2) KF(eps))
STEPC_KERNEL(init_normal, KP(float*, f32) KP(bf16*, b16) KL(n) KQ(key) KD(std))
STEPC_KERNEL(attn_plain_forward, KP(bf16*, O) KP(float*, LSE) KP(const bf16*, Q) KP(const bf16*, K)
             KP(const bf16*, V) KI(B) KI(T) KI(H) KI(G) KI(D) KF(scale))
STEPC_KERNEL(attn_plain_backward_q, KP(bf16*, dQ) KP(float*, Dsum) KP(const bf16*, Q) KP(const bf16*, K)
             KP(const bf16*, V) KP(const bf16*, O) KP(const bf16*, dO) KP(const float*, LSE) KI(B) KI(T)
             KI(H) KI(G) KI(D) KF(scale))
STEPC_KERNEL(attn_plain_backward_kv, KP(bf16*, dK) KP(bf16*, dV) KP(const bf16*, Q) KP(const bf16*, K)
             KP(const bf16*, V) KP(const bf16*, dO) KP(const float*, LSE) KP(const float*, Dsum) KI(B) KI(T)
             KI(H) KI(G) KI(D) KF(scale))

STEPC_KERNEL(mla_head_split, KP(bf16*, p1) KP(bf16*, p2) KP(const bf16*, joined) KL(ntok) KI(H) KI(a) KI(b) KI(H2))
STEPC_KERNEL(mla_head_concat, KP(bf16*, joined) KP(const bf16*, p1) KP(const bf16*, p2) KL(ntok) KI(H) KI(a) KI(b)
             KI(H2))
STEPC_KERNEL(router_linear_forward, KP(bf16*, out) KP(const bf16*, inp) KP(const float*, weight) KI(N) KI(E) KI(C))
STEPC_KERNEL(router_linear_dgrad, KP(bf16*, dinp) KP(const bf16*, dout) KP(const float*, weight) KI(N) KI(E) KI(C))
STEPC_KERNEL(router_topk_forward, KP(bf16*, probs) KP(int*, idx) KP(const bf16*, x) KI(N) KI(E) KI(k) KI(mode))
STEPC_KERNEL(router_topk_backward, KP(bf16*, dx) KP(const bf16*, dprobs) KP(const bf16*, probs) KP(const int*, idx)
             KI(N) KI(E) KI(k) KI(mode))
STEPC_KERNEL(softmax_rows_forward, KP(bf16*, out) KP(const bf16*, inp) KL(rows) KI(E))
STEPC_KERNEL(softmax_rows_backward, KP(bf16*, dinp) KP(const bf16*, dout) KP(const bf16*, probs) KL(rows) KI(E))
STEPC_KERNEL(moe_aux_loss_forward, KP(float*, loss) KP(const bf16*, scores) KP(const int*, idx) KI(T) KI(E) KI(k)
             KF(coeff))
STEPC_KERNEL(moe_aux_loss_backward, KP(bf16*, dscores) KP(const float*, dloss) KP(const int*, idx) KI(T) KI(E) KI(k)
             KF(coeff))
STEPC_KERNEL(moe_dispatch, KP(int*, row_of) KP(int*, seg) KP(int*, tpe) KP(const int*, idx) KL(n) KI(E) KI(cap)
             KI(pad))
STEPC_KERNEL(moe_scatter_rows, KP(bf16*, xp) KP(bf16*, pp) KP(const bf16*, x) KP(const bf16*, probs)
             KP(const int*, row_of) KL(n) KI(k) KI(C))
STEPC_KERNEL(moe_gather_rows, KP(bf16*, dx) KP(bf16*, dprobs) KP(const bf16*, dxp) KP(const bf16*, dpp)
             KP(const int*, row_of) KL(T) KI(k) KI(C))
STEPC_KERNEL(grouped_linear_forward, KP(bf16*, y) KP(const bf16*, x) KP(const bf16*, W) KP(const int*, seg) KI(Nout)
             KI(K))
STEPC_KERNEL(grouped_linear_dgrad, KP(bf16*, dx) KP(const bf16*, dy) KP(const bf16*, W) KP(const int*, seg) KI(Nout)
             KI(K))
STEPC_KERNEL(grouped_linear_wgrad, KP(bf16*, dw) KP(float*, acc_f32) KP(const bf16*, dy) KP(const bf16*, x)
             KP(const int*, seg) KI(Nout) KI(K))
STEPC_KERNEL(grouped_linear_forward_tc, KP(bf16*, y) KP(const bf16*, x) KP(const bf16*, W) KP(const int*, seg)
             KI(Nout) KI(K) KI(E))
STEPC_KERNEL(grouped_linear_dgrad_tc, KP(bf16*, dx) KP(const bf16*, dy) KP(const bf16*, W) KP(const int*, seg)
             KI(Nout) KI(K) KI(E))
STEPC_KERNEL(grouped_linear_wgrad_tc, KP(bf16*, dw) KP(float*, acc_f32) KP(const bf16*, dy) KP(const bf16*, x)
             KP(const int*, seg) KI(Nout) KI(K))
STEPC_KERNEL(moe_act_forward, KP(bf16*, y) KP(const bf16*, h) KP(const bf16*, p) KI(N) KI(F) KI(glu) KI(act))
STEPC_KERNEL(moe_act_backward, KP(bf16*, dh) KP(bf16*, dp) KP(const bf16*, dy) KP(const bf16*, h) KP(const bf16*, p)
             KI(N) KI(F) KI(glu) KI(act))

#undef KP
#undef KI
#undef KU
#undef KL
#undef KQ
#undef KF
#undef KD
