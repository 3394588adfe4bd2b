// Public C API of the microtrain kernels. Pure C99, no MicroPython include:
// compile and test them alone (tests/c/). One source file per op family,
// named by op. Every global symbol starts with mt_ (firmware links us next
// to ESP-IDF, pico-sdk and other user modules); a kernel is named mt_ + its
// Python name (_microtrain.relu_s8_forward -> mt_relu_s8_forward), i.e.
// mt_<op>_<dtype>_<direction>. Bit-exact definitions are
// in docs/numerics.md. Kernels never allocate and never check arguments:
// the mt_*_check functions (and the binding) do that before any call.
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "mt_quant.h"

// ---- geometry / quantisation descriptors (field order = the Python array('i')) ----
typedef struct {
    int32_t in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top, pad_left, groups, in_zp,
        out_zp, act_min, act_max;
} mt_conv2d_params_t;
#define MT_CONV2D_NPARAMS 17
// A dilated conv2d: the conv2d descriptor then dil_h, dil_w (19 ints).
typedef struct {
    mt_conv2d_params_t c;
    int32_t dil_h, dil_w;
} mt_conv2d_dil_params_t;
#define MT_CONV2D_DIL_NPARAMS 19

typedef struct {
    int32_t in_n, out_n, in_zp, out_zp, act_min, act_max;
} mt_linear_params_t;
#define MT_LINEAR_NPARAMS 6

typedef struct {
    int32_t in_h, in_w, c, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left;
} mt_pool_params_t;
#define MT_POOL_NPARAMS 11

typedef struct {
    int32_t n, in1_zp, in2_zp, out_zp, m1, sh1, m2, sh2, m_out, sh_out, left_shift, act_min, act_max;
} mt_add_params_t;
#define MT_ADD_NPARAMS 13

typedef struct {
    int32_t hw, c1, c2, in1_zp, in2_zp, out_zp, m1, sh1, m2, sh2;
} mt_concat_params_t;
#define MT_CONCAT_NPARAMS 10

typedef struct {
    int32_t in_h, in_w, c, out_h, out_w, f_h, f_w, mode, zp;
} mt_upsample_params_t;
#define MT_UPSAMPLE_NPARAMS 9

// A descriptor as its array('i') is copied in (the binding, the C test driver).
typedef union {
    mt_conv2d_params_t s;
    mt_conv2d_dil_params_t d;
    int32_t a[MT_CONV2D_DIL_NPARAMS];
} mt_conv2d_desc_u;
typedef union {
    mt_linear_params_t s;
    int32_t a[MT_LINEAR_NPARAMS];
} mt_linear_desc_u;
typedef union {
    mt_pool_params_t s;
    int32_t a[MT_POOL_NPARAMS];
} mt_pool_desc_u;
typedef union {
    mt_add_params_t s;
    int32_t a[MT_ADD_NPARAMS];
} mt_add_desc_u;
typedef union {
    mt_concat_params_t s;
    int32_t a[MT_CONCAT_NPARAMS];
} mt_concat_desc_u;
typedef union {
    mt_upsample_params_t s;
    int32_t a[MT_UPSAMPLE_NPARAMS];
} mt_upsample_desc_u;

// Element-wise mul (mul_s8.c): x1 holds hw x c, x2 hw2 x c2 with hw2 in {1, hw}
// and c2 in {1, c} (broadcast over positions / channels).
typedef struct {
    int32_t hw, c, hw2, c2, in1_zp, in2_zp, out_zp, m, sh, act_min, act_max;
} mt_mul_params_t;
#define MT_MUL_NPARAMS 11
typedef union {
    mt_mul_params_t s;
    int32_t a[MT_MUL_NPARAMS];
} mt_mul_desc_u;

// Product of two activations (matmul_s8.c): a rows x inner, b inner x cols (tb 0)
// or cols x inner (tb 1), y rows x cols; with heads > 1, one such product per head
// (the head layouts of docs/numerics.md, "matmul").
typedef struct {
    int32_t rows, inner, cols, tb, a_zp, b_zp, out_zp, mult, sh, act_min, act_max, heads;
} mt_matmul_params_t;
#define MT_MATMUL_NPARAMS 12
typedef union {
    mt_matmul_params_t s;
    int32_t a[MT_MATMUL_NPARAMS];
} mt_matmul_desc_u;

// Softmax over one dimension (softmax_s8.c): outer x n x inner, over the n.
typedef struct {
    int32_t outer, n, inner;
} mt_softmax_params_t;
#define MT_SOFTMAX_NPARAMS 3
typedef union {
    mt_softmax_params_t s;
    int32_t a[MT_SOFTMAX_NPARAMS];
} mt_softmax_desc_u;

// LayerNorm's normalisation (layernorm_s8.c): rows x c, over each row's c.
typedef struct {
    int32_t rows, c, in_zp, out_zp, eps_q, m, sh;
} mt_layernorm_params_t;
#define MT_LAYERNORM_NPARAMS 7
typedef union {
    mt_layernorm_params_t s;
    int32_t a[MT_LAYERNORM_NPARAMS];
} mt_layernorm_desc_u;

// GRU over a sequence (gru_s8_forward.c, gru_s8_backward.c): x T x D, y T x H,
// w 3H x (D + H), gates r, z, n; the backward factors and truncation k.
typedef struct {
    int32_t t, d, h, x_zp, m_rn, sh_rn, k, m_h, sh_h, m_hn, sh_hn, m_w, sh_w;
} mt_gru_params_t;
#define MT_GRU_NPARAMS 13
typedef union {
    mt_gru_params_t s;
    int32_t a[MT_GRU_NPARAMS];
} mt_gru_desc_u;

// LSTM over a sequence (lstm_s8_forward.c, lstm_s8_backward.c): x T x D, y T x H,
// w 4H x (D + H), gates i, f, g, o, an int8 cell state c; backward factors and truncation k.
typedef struct {
    int32_t t, d, h, x_zp, m_ig, sh_ig, k, m_h, sh_h, m_c, sh_c, m_w, sh_w;
} mt_lstm_params_t;
#define MT_LSTM_NPARAMS 13
typedef union {
    mt_lstm_params_t s;
    int32_t a[MT_LSTM_NPARAMS];
} mt_lstm_desc_u;

// Sizes follow from a checked descriptor and stay below 2^26.
static inline int32_t mt_conv_in_n(const mt_conv2d_params_t *p) {
    return p->in_h * p->in_w * p->in_c;
}
static inline int32_t mt_conv_out_n(const mt_conv2d_params_t *p) {
    return p->out_h * p->out_w * p->out_c;
}
static inline int32_t mt_conv_cpg(const mt_conv2d_params_t *p) {
    return (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
}
static inline int32_t mt_conv_w_n(const mt_conv2d_params_t *p) {
    return p->out_c * p->k_h * p->k_w * mt_conv_cpg(p);
}

// Validation: NULL when the descriptor is consistent, else a static message
// naming the offending field. Buffer lengths follow from a valid descriptor.
const char *mt_conv2d_check(const mt_conv2d_params_t *p);
const char *mt_conv2d_dil_check(const mt_conv2d_dil_params_t *p);
const char *mt_linear_check(const mt_linear_params_t *p);
const char *mt_pool_check(const mt_pool_params_t *p);
// maxpool / avgpool grad_input acc = None (NULL): only when windows do not overlap.
const char *mt_pool_no_acc_check(const mt_pool_params_t *p);
// maxpool / avgpool grad_input_act: windows that do not overlap.
const char *mt_pool_disjoint_check(const mt_pool_params_t *p);
const char *mt_add_check(const mt_add_params_t *p);
const char *mt_concat_check(const mt_concat_params_t *p);
const char *mt_upsample_check(const mt_upsample_params_t *p);
// conv2d_add_s8_forward: the add's n equals the conv's output size; tile: at least one
// output row (nt elements >= row = out_w * out_c).
const char *mt_conv_add_n_check(int32_t n, int32_t nout, int32_t *v);
const char *mt_tile_check(uint32_t nt, int32_t row, int32_t *v);
// concat_s8_grad_input part: 0 or 1.
const char *mt_part_check(int32_t part, int32_t *v);
// The _grad_weight_f32 channel window (gw / gb row r = channel c0 + r, n =
// len(gb) rows): c0 in 0..out_c-1, n in 1..out_c-c0, and unless the window is
// the whole layer a mask with every channel outside it 0.
const char *mt_gw_window_c0_check(int32_t c0, int32_t out_c, int32_t *v);
const char *mt_gw_window_n_check(int32_t n, int32_t c0, int32_t out_c, int32_t *v);
const char *mt_gw_window_mask_check(const uint8_t *mask, int32_t c0, int32_t n, int32_t out_c, int32_t *v);
// Checks a per-channel requant multiplier/shift pair array.
const char *mt_requant_params_check(const int32_t *mult, const int32_t *shift, int32_t n);
// Checks |bias| <= 2^30 (keeps forward accumulators exact in int32).
const char *mt_bias_check(const int32_t *bias, int32_t n);
// Checks wr (>= 0) against the grad-input overflow bound max(wr)*terms*16384 <= 2^31-1.
const char *mt_wr_check(const int32_t *wr, int32_t n, int32_t terms);

// Scalar arguments (checks.c), shared by the binding and tests/c/kernel_driver.c
// so that both raise the same message. Each returns NULL when the value is
// allowed, else the message about that one argument; a message may hold up to
// MT_MSG_NVALS "%d", filled in order from v[] (mt_msg_format), which the check
// writes. Checks that take v need room for MT_MSG_NVALS values.
#define MT_MSG_NVALS 3
// zp and q6 of relu/relu6: an int8 level, -128..127.
const char *mt_level_check(int32_t x, int32_t *v);
const char *mt_q6_check(int32_t q6, int32_t zp);
// The _act kernels' mask bounds (kept where lo < t < hi): lo in -129..127 (-129: no
// lower bound), hi in -128..128 (128: no upper bound), then hi >= lo.
const char *mt_act_lo_check(int32_t lo, int32_t *v);
const char *mt_act_hi_check(int32_t hi, int32_t *v);
const char *mt_act_order_check(int32_t lo, int32_t hi);
// global_avgpool hw: 1..65536.
const char *mt_hw_check(int32_t hw, int32_t *v);
// A channel count given as an int (global_avgpool, l1_norm): 1..65535.
const char *mt_channels_check(int32_t c, int32_t *v);
// global_avgpool forward, after both checks above: hw * c <= 2^26.
const char *mt_hw_c_check(int32_t hw, int32_t c);
// global_avgpool grad_input: c = len(e) channels, 1 <= c, hw * c <= 2^26.
const char *mt_gap_channels_check(int32_t hw, uint32_t c);
// add_s8_grad_merge ra, rb: 0..32768.
const char *mt_ratio_check(int32_t r, int32_t *v);
// softmax_xent_s8: 1..32767 classes, 0 <= label < c; lut: n in 1..256 entries, lut[0] == 65536, non-increasing.
const char *mt_classes_check(uint32_t c);
const char *mt_label_check(int32_t label, uint32_t c, int32_t *v);
const char *mt_softmax_lut_check(const uint32_t *lut, uint32_t n, int32_t *v);
// l1_norm_s8: len(e) = n (<= 2^26) a multiple of c (checked), fewer than 2^24 positions.
const char *mt_l1_norm_len_check(uint32_t n, int32_t c, int32_t *v);
// topk_mask: 1..65535 channels, 0 <= k <= c. mt_channel_count_check: 1..65535 channels
// (topk_mask's norms, the w_scale of the update kernels).
const char *mt_channel_count_check(uint32_t c);
const char *mt_topk_k_check(int32_t k, uint32_t c, int32_t *v);
// lut_s8_grad_input dtable: 256 entries, each |d| <= 2^24 - 1 (e * d stays in int32).
#define MT_LUT_DMAX 16777215
const char *mt_lut_dtable_check(const int32_t *dtable, int32_t *v);
// Entry index of the .mtm accessors: 0 <= i < n.
const char *mt_index_check(int32_t i, uint32_t n, int32_t *v);
// update_*: k (values per channel) >= 1 dividing n = len(g); samples n: 1..2^24.
const char *mt_update_k_check(int32_t k, uint32_t n, int32_t *v);
const char *mt_update_n_check(int32_t n, int32_t *v);
// update_s8_apply rng: -1 (round to nearest) or a xorshift16 state 1..65535.
const char *mt_update_rng_check(int32_t rng, int32_t *v);
// zo_perturb_s8 eps: -127..127; zo_update_s8 step: |step| <= MT_ZO_STEP_MAX (255 quanta in Q16).
#define MT_ZO_STEP_MAX 16711680
const char *mt_zo_eps_check(int32_t eps, int32_t *v);
const char *mt_zo_step_check(int32_t step, int32_t *v);
// zo_perturb_h_s8 row and first index i0: 0..2^24 - 1.
const char *mt_zo_index_check(int32_t x, int32_t *v);
#if MT_HAS_FLOAT
// Float scalars of the update primitives: finite (any value), finite and >= 0
// (weight decay), finite and > 0 (lr, eps, scales), in [0, 1) (momentum,
// betas and their powers).
const char *mt_finite_check(float x);
const char *mt_nonneg_check(float x);
const char *mt_positive_check(float x);
const char *mt_unit_check(float x);
const char *mt_closed_unit_check(float x);
// update_f32_ratios w_scale: every value finite and >= 0, the largest > 0.
const char *mt_scales_check(const float *s, int32_t n);
#endif
// update_f32_ratios r: 0..15.
const char *mt_ratio_r_check(int32_t r, int32_t *v);

// Messages: "fn: arg: what" (no "arg: " when arg is NULL), each "%d" of what
// replaced by the next of v[0..MT_MSG_NVALS) (none when v is NULL). Writes at
// most cap - 1 chars and a NUL into buf; returns the length. The put helpers
// append at pos, stop at cap - 1 and return the new length (no NUL).
#define MT_MSG_MAX 224
#define MT_MSG_LENGTH "has %d elements, expected %d"
// conv2d / linear grad input: lo given without hi (the optional mask bounds go together).
#define MT_MSG_ACT_PAIR "must be given with lo (both or neither)"
// The binding's other messages, shared with the C test driver.
#define MT_MSG_NO_ROW_BLOCK "a dilated conv has no row-block form"
#define MT_MSG_CHANNEL_MULTIPLE "has %d elements, not a positive multiple of %d channels"
#define MT_MSG_MASTER_PAIR "must be given with master_w (both or neither)"
#define MT_MSG_AT_LEAST "has %d elements, expected at least %d"
#define MT_MSG_BAD_STEP "channel %d: the step gives non-finite weights or a scale out of float32 range"
size_t mt_msg_format(char *buf, size_t cap, const char *fn, const char *arg, const char *what, const int32_t *v);
size_t mt_msg_put_str(char *buf, size_t cap, size_t pos, const char *s);
size_t mt_msg_put_int(char *buf, size_t cap, size_t pos, int32_t x);

// ---- conv2d_s8_*.c, conv2d_dil_s8.c ----
void mt_conv2d_s8_forward(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *y);
// Output rows [r0, r1) only (0 <= r0 < r1 <= out_h) into y ((r1 - r0) * out_w * out_c).
void mt_conv2d_s8_forward_rows(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                               const int32_t *mult, const int32_t *shift, int32_t r0, int32_t r1, int8_t *y);
// mask: NULL for dense, else out_c bytes (0 = channel dropped). Returns dyn shift.
// lo, hi: the activation mask of the input's producer (fused relu (zp, 128) / relu6
// (zp, q6)): ein holds that activation y on entry, then ein[i] = 0 unless lo < y[i] < hi,
// else the unmasked bits; the same shift (from all of acc). (-129, 128): no mask, ein is
// not read. ein may not overlap e, w, wr, mask or acc.
int32_t mt_conv2d_s8_grad_input(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                                const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc, int8_t *ein);
void mt_conv2d_s8_grad_weight(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                              int32_t *gw, int32_t *gb);
#if MT_HAS_FLOAT
// gw / gb hold output channels c0.. (row r = channel c0 + r); every channel
// outside the window must be masked (mt_gw_window_mask_check).
void mt_conv2d_s8_grad_weight_f32(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                                  float w_scale, float b_scale, float *gw, float *gb, int32_t c0);
#endif

// Dilated convs (a 19-int descriptor with dil_h or dil_w > 1): plain loops, same numerics.
void mt_conv2d_dil_s8_forward(const mt_conv2d_dil_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, int8_t *y);
int32_t mt_conv2d_dil_s8_grad_input(const mt_conv2d_dil_params_t *p, const int8_t *e, const int8_t *w,
                                    const int32_t *wr, const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc,
                                    int8_t *ein);
void mt_conv2d_dil_s8_grad_weight(const mt_conv2d_dil_params_t *p, const int8_t *x, const int8_t *e,
                                  const uint8_t *mask, int32_t *gw, int32_t *gb);
#if MT_HAS_FLOAT
void mt_conv2d_dil_s8_grad_weight_f32(const mt_conv2d_dil_params_t *p, const int8_t *x, const int8_t *e,
                                      const uint8_t *mask, float w_scale, float b_scale, float *gw, float *gb,
                                      int32_t c0);
#endif

// ---- linear.c ----
void mt_linear_s8_forward(const mt_linear_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *y);
// lo, hi: the activation mask, as mt_conv2d_s8_grad_input's.
int32_t mt_linear_s8_grad_input(const mt_linear_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                                const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc, int8_t *ein);
void mt_linear_s8_grad_weight(const mt_linear_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                              int32_t *gw, int32_t *gb);
#if MT_HAS_FLOAT
// The window c0 as mt_conv2d_s8_grad_weight_f32's.
void mt_linear_s8_grad_weight_f32(const mt_linear_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                                  float w_scale, float b_scale, float *gw, float *gb, int32_t c0);
#endif

// ---- activation.c ----
void mt_relu_s8_forward(const int8_t *x, int8_t *y, size_t n, int32_t zp);
void mt_relu6_s8_forward(const int8_t *x, int8_t *y, size_t n, int32_t zp, int32_t q6);
void mt_relu_s8_backward(const int8_t *y, int8_t *e, size_t n, int32_t zp);
void mt_relu6_s8_backward(const int8_t *y, int8_t *e, size_t n, int32_t zp, int32_t q6);

// ---- pool.c ----
// Grad input: acc may be NULL when the windows do not overlap (stride >= k on
// both axes, mt_pool_no_acc_check): no scratch, the same ein and shift.
void mt_maxpool_s8_forward(const mt_pool_params_t *p, const int8_t *x, int8_t *y);
int32_t mt_maxpool_s8_grad_input(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t *acc,
                                 int8_t *ein);
void mt_avgpool_s8_forward(const mt_pool_params_t *p, const int8_t *x, int8_t *y);
int32_t mt_avgpool_s8_grad_input(const mt_pool_params_t *p, const int8_t *e, int32_t *acc, int8_t *ein);
// Grad input then the activation mask of the pool's input (its producer's fused relu /
// relu6): ein[i] = 0 unless lo < t[i] < hi, t = x (max) or y (avg) as before the call;
// otherwise the bits and shift of the kernel above with acc NULL. Disjoint windows only
// (mt_pool_disjoint_check); ein may be t itself (in place) or its own buffer.
int32_t mt_maxpool_s8_grad_input_act(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t lo,
                                     int32_t hi, int8_t *ein);
int32_t mt_avgpool_s8_grad_input_act(const mt_pool_params_t *p, const int8_t *y, const int8_t *e, int32_t lo,
                                     int32_t hi, int8_t *ein);
// mt_maxpool_s8_grad_input_act then norms[k] = the L1 norm of ein's channel k (mt_l1_norm_s8 of ein):
// the sparse policy's ranking of the pool's producer, formed while the windows are routed.
int32_t mt_maxpool_s8_grad_input_act_l1(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t lo,
                                        int32_t hi, int8_t *ein, int32_t *norms);
void mt_global_avgpool_s8_forward(const int8_t *x, int32_t hw, int32_t c, int8_t *y);
void mt_global_avgpool_s8_grad_input(const int8_t *e, int32_t hw, int32_t c, int8_t *ein);

// ---- add.c ----
void mt_add_s8_forward(const mt_add_params_t *p, const int8_t *x1, const int8_t *x2, int8_t *y);
// skip = add(conv(x), skip) (side 1: add(skip, conv(x))) through tile (tile_rows >= 1 rows of
// out_w * out_c); a->n = out_h * out_w * out_c; no buffer overlaps another.
void mt_conv2d_add_s8_forward(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, const mt_add_params_t *a, int32_t side,
                              int8_t *skip, int8_t *tile, int32_t tile_rows);
int32_t mt_add_s8_grad_merge(const int8_t *ea, int32_t ra, const int8_t *eb, int32_t rb, size_t n, int8_t *out);

// ---- concat.c ----
void mt_concat_s8_forward(const mt_concat_params_t *p, const int8_t *x1, const int8_t *x2, int8_t *y);
void mt_concat_s8_grad_input(const mt_concat_params_t *p, const int8_t *e, int32_t part, int8_t *ein);

// ---- upsample.c ----
void mt_upsample_s8_forward(const mt_upsample_params_t *p, const int8_t *x, int8_t *y);
int32_t mt_upsample_s8_grad_input(const mt_upsample_params_t *p, const int8_t *e, int8_t *ein);

// ---- softmax_xent.c ----
// stats[3] = {shift, S, qmax}; returns shift. Requires 1 <= c, c * 65536 < 2^31.
// lut has n entries (1..256); lut[d] for d >= n reads as 0.
int32_t mt_softmax_xent_s8(const int8_t *q, int32_t c, int32_t label, const uint32_t *lut, int32_t n, int8_t *err,
                           int32_t *stats);

// ---- sparse.c ----
void mt_l1_norm_s8(const int8_t *e, size_t n_pos, int32_t c, int32_t *norms);
void mt_topk_mask(const int32_t *norms, int32_t c, int32_t k, uint8_t *mask);

// ---- zo.c ----
// rng: the xorshift32 sign state (perturb), {sign state, rounding state} (update); both advanced.
void mt_zo_perturb_s8(const int8_t *base, size_t n, int32_t eps, uint32_t *rng, int8_t *w);
void mt_zo_perturb_h_s8(const int8_t *base, size_t n, int32_t eps, uint32_t row, uint32_t i0, uint32_t *rng, int8_t *w);
void mt_zo_update_s8(const int8_t *base, size_t n, int32_t step, uint32_t *rng, int8_t *w);

// ---- update.c ----
// touched |= mask over n channels (mask NULL: all).
void mt_update_u8_touch(uint8_t *touched, const uint8_t *mask, size_t n);
#if MT_HAS_FLOAT
// Where the real values of a tensor come from: master[i] when not NULL, else
// ((float)q[i] * f) * scale[c] with q = q8 (weights) or q32 (bias).
typedef struct {
    const float *master;
    const int8_t *q8;
    const int32_t *q32;
    const float *scale;
    float f;
} mt_update_src_t;
// One trained layer as mt_update_s8_apply updates it (n_ch = out_c channels of k weights).
typedef struct {
    int8_t *w;
    float *w_scale;
    int32_t *b, *mult, *shift;
    float *gw, *gb, *master_w, *master_b;
    int32_t n_ch, k;
    float s_in, s_out;
} mt_update_layer_t;
int32_t mt_update_f32_check(const float *x, size_t n);
void mt_update_quantize_multiplier(float real, int32_t *mult, int32_t *shift);
void mt_update_f32_decay(float *g, int32_t n_ch, int32_t k, const uint8_t *touched, int32_t n, float wd,
                         const mt_update_src_t *src);
void mt_update_f32_standardize(float *g, int32_t n_ch, int32_t k, const uint8_t *touched, int32_t n);
void mt_update_f32_axpby(float *y, const float *x, int32_t n_ch, int32_t k, const uint8_t *touched, float a, float b);
void mt_update_f32_momentum(float *g, float *v, int32_t n_ch, int32_t k, const uint8_t *touched, float mom);
// x = a * x: SGD momentum at batch 1 scales v before a sample's gradient goes into it.
void mt_update_f32_scale(float *x, int32_t n_ch, int32_t k, const uint8_t *touched, float a);
void mt_update_f32_adam(float *g, float *m, float *v, int32_t n_ch, int32_t k, const uint8_t *touched, float b1,
                        float b2, float b1t, float b2t, float eps);
// The same with a bfloat16 state (two little-endian bytes a value): the arithmetic is
// float32, the state rounded to nearest even when stored; g takes the float32 value.
void mt_update_bf16_momentum(float *g, int8_t *v, int32_t n_ch, int32_t k, const uint8_t *touched, float mom);
void mt_update_bf16_adam(float *g, int8_t *m, int8_t *v, int32_t n_ch, int32_t k, const uint8_t *touched, float b1,
                         float b2, float b1t, float b2t, float eps);
int32_t mt_update_s8_apply(const mt_update_layer_t *L, const uint8_t *touched, float lr, int32_t rng, float *scratch);
// mt_update_s8_apply with gw and gb only read (the step direction is the optimiser's
// momentum, which must survive the step): the same results bit for bit; scratch holds
// 2 n_ch (the new scales, then the new biases).
int32_t mt_update_s8_apply_keep(const mt_update_layer_t *L, const uint8_t *touched, float lr, int32_t rng,
                                float *scratch);
int32_t mt_update_f32_ratios(const float *w_scale, int32_t n, int32_t r, int32_t *wr);
#endif
// ---- lut.c ----
// table: 256 int8 (index x + 128); dtable: 256 int32. Returns the dyn shift.
void mt_lut_s8_forward(const int8_t *x, const int8_t *table, int8_t *y, size_t n);
int32_t mt_lut_s8_grad_input(const int8_t *x, const int8_t *e, const int32_t *dtable, int8_t *ein, size_t n);

// ---- mul_s8.c, matmul_s8.c ----
const char *mt_mul_check(const mt_mul_params_t *p);
const char *mt_matmul_check(const mt_matmul_params_t *p);
void mt_mul_s8_forward(const mt_mul_params_t *p, const int8_t *x1, const int8_t *x2, int8_t *y);
int32_t mt_mul_s8_grad_x1(const mt_mul_params_t *p, const int8_t *e, const int8_t *x2, int8_t *ein);
int32_t mt_mul_s8_grad_x2(const mt_mul_params_t *p, const int8_t *e, const int8_t *x1, int32_t *acc, int8_t *ein);
void mt_matmul_s8_forward(const mt_matmul_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);
int32_t mt_matmul_s8_grad_a(const mt_matmul_params_t *p, const int8_t *e, const int8_t *b, int32_t *acc, int8_t *ein);
int32_t mt_matmul_s8_grad_b(const mt_matmul_params_t *p, const int8_t *e, const int8_t *a, int32_t *acc, int8_t *ein);
// ---- softmax_s8.c ----
const char *mt_softmax_check(const mt_softmax_params_t *p);
void mt_softmax_s8_forward(const mt_softmax_params_t *p, const int8_t *x, const uint32_t *lut, int32_t lut_n,
                           int8_t *y);
int32_t mt_softmax_s8_grad_input(const mt_softmax_params_t *p, const int8_t *y, const int8_t *e, int8_t *ein);
// ---- layernorm_s8.c ----
const char *mt_layernorm_check(const mt_layernorm_params_t *p);
void mt_layernorm_s8_forward(const mt_layernorm_params_t *p, const int8_t *x, int8_t *y);
int32_t mt_layernorm_s8_grad_input(const mt_layernorm_params_t *p, const int8_t *x, const int8_t *e, int8_t *ein);

// ---- gru_s8_forward.c, gru_s8_backward.c ----
const char *mt_gru_check(const mt_gru_params_t *p);
const char *mt_gru_bias_check(const int32_t *bias, int32_t h);
const char *mt_gru_rq_check(const int32_t *mult, const int32_t *shift, int32_t h);
const char *mt_gru_wr_check(const int32_t *wr, int32_t h);
const char *mt_gru_dtanh_check(const int32_t *dtanh, int32_t n);
void mt_gru_s8_forward(const mt_gru_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, const int8_t *lut, int8_t *y, int8_t *keep);
int32_t mt_gru_s8_backward(const mt_gru_params_t *p, const int8_t *x, const int8_t *w, const int32_t *wr,
                           const int32_t *dtanh, const int8_t *y, int8_t *keep, const int8_t *e, int32_t *shifts,
                           int32_t *acc, int32_t *gw, int32_t *gb, int8_t *ein);

// ---- lstm_s8_forward.c, lstm_s8_backward.c ----
const char *mt_lstm_check(const mt_lstm_params_t *p);
const char *mt_lstm_bias_check(const int32_t *bias, int32_t h);
const char *mt_lstm_rq_check(const int32_t *mult, const int32_t *shift, int32_t h);
const char *mt_lstm_wr_check(const int32_t *wr, int32_t h);
void mt_lstm_s8_forward(const mt_lstm_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, const int8_t *lut, int8_t *y, int8_t *keep);
int32_t mt_lstm_s8_backward(const mt_lstm_params_t *p, const int8_t *x, const int8_t *w, const int32_t *wr,
                            const int32_t *dtanh, const int8_t *y, int8_t *keep, const int8_t *e, int32_t *shifts,
                            int32_t *acc, int32_t *gw, int32_t *gb, int8_t *ein);
// ---- quant.c (declared in mt_quant.h): mt_dyn_requant_s8 ----
#if MT_HAS_FLOAT
void mt_f32_axpy_i32(float *y, const int32_t *x, size_t n, float a);
#endif

#endif
