/* module.c — the kernels module: the artifact's cubin loaded with cuModuleLoadData, every kernel of
 * kernels/kernel_list.h looked up once, and the flash kernels allowed their shared memory. */
#include <stdio.h>
#include <string.h>

#include "kernels/launch.h"
#include "runtime/rt.h"

const char *const rt_kernel_name[RT_K_COUNT] = {
#define STEPC_KERNEL(name, params) #name,
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
};

/* one letter a parameter, from each row's parameter list ("" so that a kernel without any
 * still gives a string) */
const char *const rt_kernel_sig[RT_K_COUNT] = {
#define STEPC_KARG(letter, ctype, pname) #letter
#define STEPC_KERNEL(name, params) "" params,
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
#undef STEPC_KARG
};

const char *rt_kname(const RtDevice *d, int k) {
  if (k >= 0 && k < RT_K_COUNT) return rt_kernel_name[k];
  return d && d->gen && k >= RT_K_COUNT && k < RT_K_COUNT + d->gen->n ? d->gen->k[k - RT_K_COUNT].name : "?";
}
const char *rt_ksig(const RtDevice *d, int k) {
  if (k >= 0 && k < RT_K_COUNT) return rt_kernel_sig[k];
  return d && d->gen && k >= RT_K_COUNT && k < RT_K_COUNT + d->gen->n ? d->gen->k[k - RT_K_COUNT].sig : "";
}

int rt_karg_bytes(const RtDevice *d, int k, int i) {
  const char *s = rt_ksig(d, k);
  if (i < 0 || i >= (int)strlen(s)) return 0;
  return strchr("iuf", s[i]) ? 4 : 8;
}

/* FNV-1a 64 (the runtime's own copy of the basis and prime: the device layer needs nothing of ir/) */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

/* FNV-1a of s with its terminator: "ab"+"c" differs from "a"+"bc" */
static uint64_t hash_str(uint64_t h, const char *s) { return fnv(h, s, strlen(s) + 1); }

uint64_t rt_kernel_list_hash(const RtGenKernels *gen) {
#define RT_GS_I(f) "I" #f " "
#define RT_GS_P(f) "P" #f " "
#define RT_GS_F(f) "F" #f " "
  static const char GEMM_FIELDS[] = RT_GEMM_FIELDS(RT_GS_I, RT_GS_P, RT_GS_F);
  static const char SDPA_FIELDS[] = RT_SDPA_FIELDS(RT_GS_I, RT_GS_P, RT_GS_F);
#undef RT_GS_I
#undef RT_GS_P
#undef RT_GS_F
  uint64_t h = fnv(14695981039346656037ull, GEMM_FIELDS, strlen(GEMM_FIELDS));
  h = fnv(h, SDPA_FIELDS, strlen(SDPA_FIELDS));
  for (int k = 0; k < RT_K_COUNT; k++)
    h = hash_str(hash_str(h, rt_kernel_name[k]), rt_kernel_sig[k]);
  /* the generated kernels by name (which carries a hash of the chain's signature) and signature */
  for (int k = 0; gen && k < gen->n; k++)
    h = hash_str(hash_str(h, gen->k[k].name), gen->k[k].sig);
  return h;
}

/* The loaded kernel's parameters against the signature: each listed one's size. (Asking for the
 * parameter past the last would catch an extra one, but the driver answers that with an error that
 * compute-sanitizer reports; unit.kernel_sigs checks the count against the declarations.) */
static int check_params(RtDevice *d, int k) {
  if (!d->cuFuncGetParamInfo) return RT_OK;
  const char *s = rt_ksig(d, k);
  size_t n = strlen(s), off = 0, size = 0;
  for (size_t i = 0; i < n; i++) {
    if (d->cuFuncGetParamInfo(d->fn[k], i, &off, &size) != CUDA_SUCCESS)
      return rt_fail(d, "kernel %s has %zu parameters, its signature says \"%s\"", rt_kname(d, k), i, s);
    if (size != (size_t)rt_karg_bytes(d, k, (int)i))
      return rt_fail(d, "kernel %s parameter %zu is %zu bytes, its signature says '%c'", rt_kname(d, k), i,
                     size, s[i]);
  }
  return RT_OK;
}

int rt_module_load(RtDevice *d, const void *cubin) {
  if (rt_check(d, d->cuModuleLoadData(&d->mod, cubin), "cuModuleLoadData")) return RT_ERROR;
  /* the static kernels, then the executor's generated ones (d->gen), by name */
  int nk = RT_K_COUNT + (d->gen ? d->gen->n : 0);
  for (int k = 0; k < nk; k++) {
    char what[160];
    snprintf(what, sizeof what, "cuModuleGetFunction(%s)", rt_kname(d, k));
    if (rt_check(d, d->cuModuleGetFunction(&d->fn[k], d->mod, rt_kname(d, k)), what) || check_params(d, k))
      return RT_ERROR;
  }
  /* Dynamic shared memory above 48 KiB must be allowed per function, once. */
  int wg = stepc_flash_wg(d->cc_major);
  struct {
    RtKernel k;
    unsigned smem;
  } big[] = {{RT_K_flash_attention_forward_d64, stepc_flash_fwd_smem(64, wg)},
             {RT_K_flash_attention_forward_d128, stepc_flash_fwd_smem(128, wg)},
             {RT_K_flash_attention_backward_dkdv_d64, stepc_flash_dkdv_smem(64, wg)},
             {RT_K_flash_attention_backward_dkdv_d128, stepc_flash_dkdv_smem(128, wg)},
             {RT_K_flash_attention_backward_dq_d64, stepc_flash_dq_smem(64, wg)},
             {RT_K_flash_attention_backward_dq_d128, stepc_flash_dq_smem(128, wg)},
             {RT_K_grouped_linear_forward_tc, stepc_moe_tc_smem()},
             {RT_K_grouped_linear_dgrad_tc, stepc_moe_tc_smem()},
             {RT_K_grouped_linear_wgrad_tc, stepc_moe_tc_smem()},
             {RT_K_grouped_linear_forward_ws, stepc_moe_ws_smem()},
             {RT_K_grouped_linear_dgrad_ws, stepc_moe_ws_smem()},
             {RT_K_grouped_linear_wgrad_ws, stepc_moe_ws_smem()},
             {RT_K_grouped_fp8_tn_ws, stepc_moe_ws_smem()},
             {RT_K_grouped_fp8_wgrad_ws, stepc_moe_ws_smem()},
             {RT_K_rmsnorm_backward, STEPC_NORM_BWD_SMEM},
             {RT_K_layernorm_backward, STEPC_NORM_BWD_SMEM},
             {RT_K_mamba_scan_forward, STEPC_MAMBA_SMEM_MAX},
             {RT_K_mamba_scan_states, STEPC_MAMBA_SMEM_MAX},
             {RT_K_mamba_chunk_backward, STEPC_MAMBA_SMEM_MAX}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
    if (big[i].smem > 48 * 1024 &&
        rt_check(d,
                 d->cuFuncSetAttribute(d->fn[big[i].k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       (int)big[i].smem),
                 "cuFuncSetAttribute(max dynamic shared memory)"))
      return RT_ERROR;
  return RT_OK;
}
