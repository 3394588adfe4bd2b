// Descriptor validation shared by the binding and the host test driver.
// Every kernel assumes its descriptor passed the matching check: sizes are
// positive and small enough that index arithmetic stays within int32, and
// every window overlaps the input. See docs/numerics.md for the rules.
#include "mt_kernels.h"

// Upper bound on any one dimension and on any tensor's element count; keeps
// all index products below 2^31 without 64-bit arithmetic.
#define MT_MAX_DIM 65535
#define MT_MAX_ELEMS (1 << 26)

static int mt_zp_ok(int32_t zp) {
    return zp >= -128 && zp <= 127;
}

// a * b * c <= MT_MAX_ELEMS, each factor already in [1, MT_MAX_DIM].
static int mt_elems_ok(int32_t a, int32_t b, int32_t c) {
    const uint32_t ab = (uint32_t)a * (uint32_t)b;  // < 2^32
    if (ab > (uint32_t)MT_MAX_ELEMS) {
        return 0;
    }
    // ab <= 2^26 and c <= 2^16: compare c against floor(MAX / ab) without division.
    uint32_t prod = 0;
    for (int32_t i = 0; i < 16 && prod <= (uint32_t)MT_MAX_ELEMS; ++i) {
        if ((uint32_t)c & ((uint32_t)1 << i)) {
            if (ab > ((uint32_t)MT_MAX_ELEMS >> i)) {  // test before shifting: ab << i may wrap
                return 0;
            }
            prod += ab << i;
        }
    }
    return prod <= (uint32_t)MT_MAX_ELEMS;
}

static int mt_dim_ok(int32_t v) {
    return v >= 1 && v <= MT_MAX_DIM;
}

// Window rule for one axis: pad < k and the last window starts inside.
static const char *mt_axis_check(int32_t in, int32_t out, int32_t k, int32_t stride, int32_t pad, const char *msg_pad,
                                 const char *msg_out) {
    if (pad < 0 || pad >= k) {
        return msg_pad;
    }
    // (out - 1) * stride - pad < in, computed without overflow (all <= 65535).
    const uint32_t last = (uint32_t)(out - 1) * (uint32_t)stride;
    if (last >= (uint32_t)in + (uint32_t)pad) {
        return msg_out;
    }
    return NULL;
}

static const char *mt_act_check(int32_t lo, int32_t hi) {
    if (lo < -128 || hi > 127 || lo > hi) {
        return "act_min/act_max must satisfy -128 <= act_min <= act_max <= 127";
    }
    return NULL;
}

// The conv rules with the window extents kh, kw ((k - 1) * dil + 1 for a dilated conv).
static const char *mt_conv2d_check_k(const mt_conv2d_params_t *p, int32_t kh, int32_t kw, const char *msg_pt,
                                     const char *msg_pl) {
    if (!mt_dim_ok(p->in_h) || !mt_dim_ok(p->in_w) || !mt_dim_ok(p->in_c)) {
        return "in_h, in_w, in_c must be in 1..65535";
    }
    if (!mt_dim_ok(p->out_h) || !mt_dim_ok(p->out_w) || !mt_dim_ok(p->out_c)) {
        return "out_h, out_w, out_c must be in 1..65535";
    }
    if (!mt_dim_ok(p->k_h) || !mt_dim_ok(p->k_w) || !mt_dim_ok(p->stride_h) || !mt_dim_ok(p->stride_w)) {
        return "k_h, k_w, stride_h, stride_w must be in 1..65535";
    }
    if (p->groups < 1 || p->groups > p->in_c || p->groups > p->out_c) {
        return "groups must be in 1..min(in_c, out_c)";
    }
    // Divisibility without a divide instruction: cpg * groups == in_c.
    int32_t cpg = 0, opg = 0;
    for (int32_t s = p->groups; s <= p->in_c; s += p->groups) {
        ++cpg;
    }
    for (int32_t s = p->groups; s <= p->out_c; s += p->groups) {
        ++opg;
    }
    if (cpg * p->groups != p->in_c || opg * p->groups != p->out_c) {
        return "in_c and out_c must be divisible by groups";
    }
    if (!mt_elems_ok(p->in_h, p->in_w, p->in_c) || !mt_elems_ok(p->out_h, p->out_w, p->out_c)) {
        return "tensor too large (more than 2^26 elements)";
    }
    // Bounds that keep every int32 accumulator exact (docs/numerics.md):
    // forward sums <= 32768 * 255 * 128 + |bias| <= 2^30 + 2^30.
    if (!mt_elems_ok(p->k_h, p->k_w, cpg) || (uint32_t)p->k_h * (uint32_t)p->k_w * (uint32_t)cpg > 32768u) {
        return "k_h * k_w * in_c / groups must be <= 32768";
    }
    if (!mt_elems_ok(p->out_c, p->k_h * p->k_w, cpg)) {
        return "weight tensor too large (more than 2^26 elements)";
    }
    // weight-gradient sums: out_h * out_w * 255 * 128 < 2^31.
    if ((uint32_t)p->out_h * (uint32_t)p->out_w > 65536u) {
        return "out_h * out_w must be <= 65536";
    }
    const char *m = mt_axis_check(p->in_h, p->out_h, kh, p->stride_h, p->pad_top, msg_pt,
                                  "out_h too large: last window starts below the input");
    if (m) {
        return m;
    }
    m = mt_axis_check(p->in_w, p->out_w, kw, p->stride_w, p->pad_left, msg_pl,
                      "out_w too large: last window starts right of the input");
    if (m) {
        return m;
    }
    if (!mt_zp_ok(p->in_zp) || !mt_zp_ok(p->out_zp)) {
        return "in_zp and out_zp must be in -128..127";
    }
    return mt_act_check(p->act_min, p->act_max);
}

const char *mt_conv2d_check(const mt_conv2d_params_t *p) {
    return mt_conv2d_check_k(p, p->k_h, p->k_w, "pad_top must be in 0..k_h-1", "pad_left must be in 0..k_w-1");
}

const char *mt_conv2d_dil_check(const mt_conv2d_dil_params_t *p) {
    if (p->dil_h < 1 || p->dil_h > 255 || p->dil_w < 1 || p->dil_w > 255) {
        return "dil_h, dil_w must be in 1..255";
    }
    // the window extents; k <= 65535 is checked first inside, and a bad k gives its own message there
    const int32_t kh = p->c.k_h >= 1 && p->c.k_h <= MT_MAX_DIM ? (p->c.k_h - 1) * p->dil_h + 1 : p->c.k_h;
    const int32_t kw = p->c.k_w >= 1 && p->c.k_w <= MT_MAX_DIM ? (p->c.k_w - 1) * p->dil_w + 1 : p->c.k_w;
    return mt_conv2d_check_k(&p->c, kh, kw, "pad_top must be in 0..(k_h-1)*dil_h",
                             "pad_left must be in 0..(k_w-1)*dil_w");
}

const char *mt_linear_check(const mt_linear_params_t *p) {
    if (p->in_n < 1 || p->in_n > 32768 || !mt_dim_ok(p->out_n)) {
        return "in_n must be in 1..32768 and out_n in 1..65535";
    }
    if (!mt_elems_ok(p->in_n, p->out_n, 1)) {
        return "weight tensor too large (more than 2^26 elements)";
    }
    if (!mt_zp_ok(p->in_zp) || !mt_zp_ok(p->out_zp)) {
        return "in_zp and out_zp must be in -128..127";
    }
    return mt_act_check(p->act_min, p->act_max);
}

const char *mt_pool_check(const mt_pool_params_t *p) {
    if (!mt_dim_ok(p->in_h) || !mt_dim_ok(p->in_w) || !mt_dim_ok(p->c) || !mt_dim_ok(p->out_h) ||
        !mt_dim_ok(p->out_w)) {
        return "in_h, in_w, c, out_h, out_w must be in 1..65535";
    }
    if (!mt_dim_ok(p->k_h) || !mt_dim_ok(p->k_w) || !mt_dim_ok(p->stride_h) || !mt_dim_ok(p->stride_w)) {
        return "k_h, k_w, stride_h, stride_w must be in 1..65535";
    }
    // avg-pool grad sums: k_h * k_w windows * 128 * 2^16 < 2^31.
    if ((uint32_t)p->k_h * (uint32_t)p->k_w > 255u) {
        return "k_h * k_w must be <= 255";
    }
    if (!mt_elems_ok(p->in_h, p->in_w, p->c) || !mt_elems_ok(p->out_h, p->out_w, p->c)) {
        return "tensor too large (more than 2^26 elements)";
    }
    const char *m = mt_axis_check(p->in_h, p->out_h, p->k_h, p->stride_h, p->pad_top, "pad_top must be in 0..k_h-1",
                                  "out_h too large: last window starts below the input");
    if (m) {
        return m;
    }
    return mt_axis_check(p->in_w, p->out_w, p->k_w, p->stride_w, p->pad_left, "pad_left must be in 0..k_w-1",
                         "out_w too large: last window starts right of the input");
}

const char *mt_pool_no_acc_check(const mt_pool_params_t *p) {
    if (p->stride_h < p->k_h || p->stride_w < p->k_w) {
        return "None needs windows that do not overlap (stride_h >= k_h and stride_w >= k_w)";
    }
    return NULL;
}

const char *mt_pool_disjoint_check(const mt_pool_params_t *p) {
    if (p->stride_h < p->k_h || p->stride_w < p->k_w) {
        return "windows must not overlap (stride_h >= k_h and stride_w >= k_w)";
    }
    return NULL;
}

const char *mt_add_check(const mt_add_params_t *p) {
    if (p->n < 0 || p->n > MT_MAX_ELEMS) {
        return "n must be in 0..2^26";
    }
    if (!mt_zp_ok(p->in1_zp) || !mt_zp_ok(p->in2_zp) || !mt_zp_ok(p->out_zp)) {
        return "zero points must be in -128..127";
    }
    if (p->m1 < 0 || p->m2 < 0 || p->m_out < 0) {
        return "multipliers must be >= 0 (Q31)";
    }
    if (p->sh1 > 0 || p->sh1 < -31 || p->sh2 > 0 || p->sh2 < -31) {
        return "input shifts sh1, sh2 must be in -31..0";
    }
    if (p->sh_out < -31 || p->sh_out > 31) {
        return "sh_out must be in -31..31";
    }
    if (p->left_shift < 0 || p->left_shift > 22) {
        return "left_shift must be in 0..22";
    }
    return mt_act_check(p->act_min, p->act_max);
}

const char *mt_concat_check(const mt_concat_params_t *p) {
    if (p->hw < 1 || p->hw > MT_MAX_ELEMS) {
        return "hw must be in 1..2^26";
    }
    if (!mt_dim_ok(p->c1) || !mt_dim_ok(p->c2) || p->c1 + p->c2 > MT_MAX_DIM) {
        return "c1, c2 must be >= 1 with c1 + c2 <= 65535";
    }
    if (!mt_elems_ok(1, p->hw, p->c1 + p->c2)) {
        return "tensor too large (more than 2^26 elements)";
    }
    if (!mt_zp_ok(p->in1_zp) || !mt_zp_ok(p->in2_zp) || !mt_zp_ok(p->out_zp)) {
        return "zero points must be in -128..127";
    }
    if (p->m1 < 0 || p->m2 < 0) {
        return "multipliers must be >= 0 (Q31)";
    }
    if (p->sh1 < -31 || p->sh1 > 7 || p->sh2 < -31 || p->sh2 > 7) {
        return "shifts sh1, sh2 must be in -31..7";
    }
    return NULL;
}

// One axis: factor 1..255 and (in - 1) * f + 1 <= out <= in * f.
static int mt_up_axis_ok(int32_t in, int32_t out, int32_t f) {
    if (f < 1 || f > 255) {
        return 0;
    }
    return (in - 1) * f + 1 <= out && out <= in * f;  // in <= 65535, f <= 255: no overflow
}

const char *mt_upsample_check(const mt_upsample_params_t *p) {
    if (!mt_dim_ok(p->in_h) || !mt_dim_ok(p->in_w) || !mt_dim_ok(p->c) || !mt_dim_ok(p->out_h) ||
        !mt_dim_ok(p->out_w)) {
        return "in_h, in_w, c, out_h, out_w must be in 1..65535";
    }
    if (!mt_up_axis_ok(p->in_h, p->out_h, p->f_h) || !mt_up_axis_ok(p->in_w, p->out_w, p->f_w)) {
        return "f_h, f_w must be in 1..255 with (in - 1) * f + 1 <= out <= in * f";
    }
    if (!mt_elems_ok(p->in_h, p->in_w, p->c) || !mt_elems_ok(p->out_h, p->out_w, p->c)) {
        return "tensor too large (more than 2^26 elements)";
    }
    if (p->mode != 0 && p->mode != 1) {
        return "mode must be 0 (nearest) or 1 (zero insertion)";
    }
    if (!mt_zp_ok(p->zp)) {
        return "zp must be in -128..127";
    }
    return NULL;
}

const char *mt_conv_add_n_check(int32_t n, int32_t nout, int32_t *v) {
    if (n != nout) {
        v[0] = n;
        v[1] = nout;
        return "n is %d, the conv output has %d elements";
    }
    return NULL;
}

const char *mt_tile_check(uint32_t nt, int32_t row, int32_t *v) {
    if (nt < (uint32_t)row) {
        v[0] = (int32_t)nt;
        v[1] = row;
        return "has %d elements, expected at least %d (one output row)";
    }
    return NULL;
}

const char *mt_part_check(int32_t part, int32_t *v) {
    if (part != 0 && part != 1) {
        v[0] = part;
        return "must be 0 or 1, got %d";
    }
    return NULL;
}

// The _grad_weight_f32 window: gw / gb rows are channels c0 .. c0 + n - 1.
const char *mt_gw_window_c0_check(int32_t c0, int32_t out_c, int32_t *v) {
    v[0] = out_c - 1;
    v[1] = c0;
    return c0 < 0 || c0 >= out_c ? "must be in 0..%d, got %d" : NULL;
}

const char *mt_gw_window_n_check(int32_t n, int32_t c0, int32_t out_c, int32_t *v) {
    v[0] = n;
    v[1] = out_c - c0;  // >= 1 after mt_gw_window_c0_check
    return n < 1 || n > out_c - c0 ? "has %d elements, expected 1..%d (out_c - c0)" : NULL;
}

// Channels outside the window have no row to go to: they must be masked.
const char *mt_gw_window_mask_check(const uint8_t *mask, int32_t c0, int32_t n, int32_t out_c, int32_t *v) {
    if (c0 == 0 && n == out_c) {
        return NULL;
    }
    if (!mask) {
        return "required when gw / gb hold a window of the channels (c0, len(gb))";
    }
    for (int32_t oc = 0; oc < out_c; ++oc) {
        if (mask[oc] && (oc < c0 || oc >= c0 + n)) {
            v[0] = oc;
            v[1] = c0;
            v[2] = c0 + n - 1;
            return "channel %d is set, outside the window %d..%d of gw / gb";
        }
    }
    return NULL;
}

const char *mt_requant_params_check(const int32_t *mult, const int32_t *shift, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
        if (mult[i] < 0) {
            return "mult must be >= 0 (Q31 multipliers)";
        }
        if (shift[i] < -31 || shift[i] > 31) {
            return "shift must be in -31..31";
        }
    }
    return NULL;
}

const char *mt_wr_check(const int32_t *wr, int32_t n, int32_t terms) {
    int32_t mx = 0;
    for (int32_t i = 0; i < n; ++i) {
        if (wr[i] < 0) {
            return "wr must be >= 0 (the grad-input weight ratios: fill wr from the layer's weight "
                   "scales with update_f32_ratios(w_scale, r, wr))";
        }
        if (wr[i] > mx) {
            mx = wr[i];
        }
    }
    // mx * terms * 16384 <= 2^31 - 1  <=>  mx * terms <= 131071 (since 2^31-1 = 131072*16384 - 1)
    if (mx > 131071 || terms > 131071) {
        return mx == 0 ? NULL : "wr too large: max(wr) * terms * 16384 must be <= 2^31-1";
    }
    if ((uint32_t)mx * (uint32_t)terms > 131071u) {
        return "wr too large: max(wr) * terms * 16384 must be <= 2^31-1";
    }
    return NULL;
}

const char *mt_bias_check(const int32_t *bias, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
        if (bias[i] > (1 << 30) || bias[i] < -(1 << 30)) {
            return "bias must be in -2^30..2^30";
        }
    }
    return NULL;
}

// ---------------------------------------------------------------------------
// Scalar arguments of the binding functions. The binding (modmicrotrain.c)
// and tests/c/kernel_driver.c call these in the same order, so both report
// the same message for the same call.

const char *mt_level_check(int32_t x, int32_t *v) {
    v[0] = x;
    return mt_zp_ok(x) ? NULL : "must be in -128..127, got %d";
}

const char *mt_q6_check(int32_t q6, int32_t zp) {
    return q6 < zp ? "must be >= zp" : NULL;
}

const char *mt_act_lo_check(int32_t lo, int32_t *v) {
    v[0] = lo;
    return lo < -129 || lo > 127 ? "must be in -129..127, got %d" : NULL;
}

const char *mt_act_hi_check(int32_t hi, int32_t *v) {
    v[0] = hi;
    return hi < -128 || hi > 128 ? "must be in -128..128, got %d" : NULL;
}

const char *mt_act_order_check(int32_t lo, int32_t hi) {
    return hi < lo ? "must be >= lo" : NULL;
}

const char *mt_hw_check(int32_t hw, int32_t *v) {
    v[0] = hw;
    return hw < 1 || hw > 65536 ? "must be in 1..65536, got %d" : NULL;
}

const char *mt_channels_check(int32_t c, int32_t *v) {
    v[0] = c;
    return mt_dim_ok(c) ? NULL : "must be in 1..65535, got %d";
}

const char *mt_hw_c_check(int32_t hw, int32_t c) {
    // hw <= 65536 and c <= 65535 (checked first): the product fits in uint32.
    return (uint32_t)hw * (uint32_t)c > (uint32_t)MT_MAX_ELEMS ? "tensor too large (more than 2^26 elements)" : NULL;
}

const char *mt_gap_channels_check(int32_t hw, uint32_t c) {
    // hw * c <= 2^26 as c <= floor(2^26 / hw): c may be up to 2^26 and hw
    // up to 65536, so the product itself could wrap in 32 bits.
    if (hw < 1 || c < 1 || c > mt_udiv_u32((uint32_t)MT_MAX_ELEMS, (uint32_t)hw)) {
        return "must hold 1..2^26/hw channels";
    }
    return NULL;
}

const char *mt_ratio_check(int32_t r, int32_t *v) {
    v[0] = r;
    return r < 0 || r > 32768 ? "must be in 0..32768, got %d" : NULL;
}

const char *mt_classes_check(uint32_t c) {
    return c < 1 || c > 32767 ? "must hold 1..32767 classes" : NULL;
}

const char *mt_label_check(int32_t label, uint32_t c, int32_t *v) {
    v[0] = (int32_t)c - 1;  // c <= 32767 (mt_classes_check)
    v[1] = label;
    return label < 0 || (uint32_t)label >= c ? "must be in 0..%d, got %d" : NULL;
}

const char *mt_softmax_lut_check(const uint32_t *lut, uint32_t n, int32_t *v) {
    v[0] = (int32_t)n;  // n <= 2^26 (a buffer length)
    if (n < 1 || n > 256) {
        return "has %d elements, expected 1..256";
    }
    if (lut[0] != 65536u) {
        return "lut[0] must be 65536 (exp(0) in Q16)";
    }
    for (uint32_t i = 1; i < n; ++i) {
        if (lut[i] > lut[i - 1]) {
            return "must be non-increasing (exp of -s*d)";
        }
    }
    return NULL;
}

const char *mt_l1_norm_len_check(uint32_t n, int32_t c, int32_t *v) {
    // n <= 2^26 (a buffer length), c in 1..65535 (mt_channels_check)
    const uint32_t npos = mt_udiv_u32(n, (uint32_t)c);
    v[0] = (int32_t)n;
    v[1] = c;
    if (npos * (uint32_t)c != n) {
        return "length %d is not a multiple of c = %d";
    }
    if (npos >= (1u << 24)) {  // keeps sum |e| <= (2^24 - 1) * 128 < 2^31
        return "too many positions (2^24 or more)";
    }
    return NULL;
}

const char *mt_channel_count_check(uint32_t c) {
    return c < 1 || c > MT_MAX_DIM ? "must hold 1..65535 channels" : NULL;
}

const char *mt_topk_k_check(int32_t k, uint32_t c, int32_t *v) {
    v[0] = (int32_t)c;  // c <= 65535 (mt_channel_count_check)
    v[1] = k;
    return k < 0 || (uint32_t)k > c ? "must be in 0..%d, got %d" : NULL;
}

const char *mt_index_check(int32_t i, uint32_t n, int32_t *v) {
    v[0] = (int32_t)n - 1;  // n <= MTM_MAX_TENSORS / MTM_MAX_LAYERS
    v[1] = i;
    return i < 0 || (uint32_t)i >= n ? "must be in 0..%d, got %d" : NULL;
}

const char *mt_update_k_check(int32_t k, uint32_t n, int32_t *v) {
    v[0] = (int32_t)n;
    if (k < 1 || (uint32_t)k > n) {
        return "must be in 1..len(g) (%d)";
    }
    const uint32_t q = mt_udiv_u32(n, (uint32_t)k);  // no divide instruction on Cortex-M0
    return q * (uint32_t)k != n ? "must divide len(g) (%d)" : NULL;
}

const char *mt_update_n_check(int32_t n, int32_t *v) {
    v[0] = n;
    return n < 1 || n > 16777216 ? "must be in 1..16777216, got %d" : NULL;
}

const char *mt_update_rng_check(int32_t rng, int32_t *v) {
    v[0] = rng;
    return rng == -1 || (rng >= 1 && rng <= 65535) ? NULL : "must be -1 (nearest) or a state in 1..65535, got %d";
}

const char *mt_zo_eps_check(int32_t eps, int32_t *v) {
    v[0] = eps;
    return eps < -127 || eps > 127 ? "must be in -127..127, got %d" : NULL;
}

const char *mt_zo_step_check(int32_t step, int32_t *v) {
    v[0] = -MT_ZO_STEP_MAX;
    v[1] = MT_ZO_STEP_MAX;
    v[2] = step;
    return step < -MT_ZO_STEP_MAX || step > MT_ZO_STEP_MAX ? "must be in %d..%d, got %d" : NULL;
}

const char *mt_zo_index_check(int32_t x, int32_t *v) {
    v[0] = x;
    return x < 0 || x > 16777215 ? "must be in 0..16777215, got %d" : NULL;
}

#if MT_HAS_FLOAT
// x - x is 0 for finite x and NaN for inf / NaN.
static int mt_is_finite(float x) {
    const float z = x - x;
    return z == z;
}

const char *mt_finite_check(float x) {
    return mt_is_finite(x) ? NULL : "must be finite";
}

const char *mt_nonneg_check(float x) {
    return mt_is_finite(x) && x >= 0.0f ? NULL : "must be finite and >= 0";
}

const char *mt_positive_check(float x) {
    return mt_is_finite(x) && x > 0.0f ? NULL : "must be finite and > 0";
}

const char *mt_unit_check(float x) {
    return x >= 0.0f && x < 1.0f ? NULL : "must be in [0, 1)";
}

// 1 included: a bfloat16 momentum adds a batch's later gradients, and widens itself, with mom = 1.
const char *mt_closed_unit_check(float x) {
    return x >= 0.0f && x <= 1.0f ? NULL : "must be in [0, 1]";
}

const char *mt_scales_check(const float *s, int32_t n) {
    float top = 0.0f;
    for (int32_t i = 0; i < n; ++i) {
        if (!mt_is_finite(s[i]) || !(s[i] >= 0.0f)) {
            return "must be finite and >= 0";
        }
        top = s[i] > top ? s[i] : top;
    }
    return top > 0.0f ? NULL : "must have a maximum > 0";
}
#endif

const char *mt_ratio_r_check(int32_t r, int32_t *v) {
    v[0] = r;
    return r < 0 || r > 15 ? "must be in 0..15, got %d" : NULL;
}

const char *mt_lut_dtable_check(const int32_t *dtable, int32_t *v) {
    for (int32_t i = 0; i < 256; ++i) {
        if (dtable[i] > MT_LUT_DMAX || dtable[i] < -MT_LUT_DMAX) {
            v[0] = i;
            v[1] = dtable[i];
            return "dtable[%d] = %d is outside -16777215..16777215";
        }
    }
    return NULL;
}

// ---------------------------------------------------------------------------
// Messages. No snprintf (natmods have no libc) and no '/' or '%' on ints
// (Cortex-M0 has no divide instruction): digits by mt_udiv_u32.

size_t mt_msg_put_str(char *buf, size_t cap, size_t pos, const char *s) {
    while (*s && pos + 1 < cap) {
        buf[pos++] = *s++;
    }
    return pos;
}

size_t mt_msg_put_int(char *buf, size_t cap, size_t pos, int32_t x) {
    char tmp[12];
    int32_t n = 0;
    uint32_t u = mt_abs_u32(x);
    do {
        const uint32_t q = mt_udiv_u32(u, 10u);
        tmp[n++] = (char)('0' + (u - q * 10u));
        u = q;
    } while (u && n < 11);
    if (x < 0 && pos + 1 < cap) {
        buf[pos++] = '-';
    }
    while (n > 0 && pos + 1 < cap) {
        buf[pos++] = tmp[--n];
    }
    return pos;
}

size_t mt_msg_format(char *buf, size_t cap, const char *fn, const char *arg, const char *what, const int32_t *v) {
    size_t pos = mt_msg_put_str(buf, cap, 0, fn);
    pos = mt_msg_put_str(buf, cap, pos, ": ");
    if (arg) {
        pos = mt_msg_put_str(buf, cap, pos, arg);
        pos = mt_msg_put_str(buf, cap, pos, ": ");
    }
    int32_t used = 0;
    for (const char *p = what; *p && pos + 1 < cap; ++p) {
        if (v && p[0] == '%' && p[1] == 'd' && used < MT_MSG_NVALS) {
            pos = mt_msg_put_int(buf, cap, pos, v[used++]);
            ++p;
        } else {
            buf[pos++] = *p;
        }
    }
    if (cap) {
        buf[pos] = 0;
    }
    return pos;
}

// Element-wise mul: sizes, broadcast shape, at most 65535 elements per x2 value
// (keeps the grad of x2 in int32), sh <= 15 (|product| < 2^16 stays in int32).
const char *mt_mul_check(const mt_mul_params_t *p) {
    if (p->hw < 1 || p->hw > MT_MAX_ELEMS || !mt_dim_ok(p->c) || !mt_elems_ok(1, p->hw, p->c)) {
        return "hw, c must be >= 1 with c <= 65535 and hw * c <= 2^26";
    }
    if ((p->hw2 != 1 && p->hw2 != p->hw) || (p->c2 != 1 && p->c2 != p->c)) {
        return "hw2 must be 1 or hw, c2 1 or c";
    }
    if ((p->hw2 < p->hw && p->hw > MT_MAX_DIM) || (p->hw2 < p->hw && p->c2 < p->c && p->hw * p->c > MT_MAX_DIM)) {
        return "a broadcast x2 value may be read by at most 65535 elements";
    }
    if (!mt_zp_ok(p->in1_zp) || !mt_zp_ok(p->in2_zp) || !mt_zp_ok(p->out_zp)) {
        return "zero points must be in -128..127";
    }
    if (p->m < 0) {
        return "m must be >= 0 (Q31)";
    }
    if (p->sh < -31 || p->sh > 15) {
        return "sh must be in -31..15";
    }
    return mt_act_check(p->act_min, p->act_max);
}

// matmul: inner <= 32768 keeps the forward sum in int32, rows and cols <= 65535
// the gradients'.
const char *mt_matmul_check(const mt_matmul_params_t *p) {
    if (!mt_dim_ok(p->rows) || !mt_dim_ok(p->cols) || p->inner < 1 || p->inner > 32768) {
        return "rows, cols must be in 1..65535, inner in 1..32768";
    }
    if (p->heads < 1 || p->heads > 256) {
        return "heads must be in 1..256";
    }
    if (!mt_elems_ok(p->heads, p->rows, p->inner) || !mt_elems_ok(p->heads, p->inner, p->cols) ||
        !mt_elems_ok(p->heads, p->rows, p->cols)) {
        return "tensor too large (more than 2^26 elements)";
    }
    if (p->tb != 0 && p->tb != 1) {
        return "tb must be 0 (b is inner x cols) or 1 (cols x inner)";
    }
    if (!mt_zp_ok(p->a_zp) || !mt_zp_ok(p->b_zp) || !mt_zp_ok(p->out_zp)) {
        return "zero points must be in -128..127";
    }
    if (p->mult < 0) {
        return "mult must be >= 0 (Q31)";
    }
    if (p->sh < -31 || p->sh > 31) {
        return "sh must be in -31..31";
    }
    return mt_act_check(p->act_min, p->act_max);
}

// softmax: n <= 256 keeps the backward's int32 products exact (and the
// forward's S <= 256 * 2^16).
const char *mt_softmax_check(const mt_softmax_params_t *p) {
    if (p->n < 1 || p->n > 256) {
        return "n must be in 1..256";
    }
    if (p->outer < 1 || p->inner < 1 || (uint32_t)p->outer > mt_udiv_u32(MT_MAX_ELEMS, (uint32_t)p->n) ||
        (uint32_t)p->inner > mt_udiv_u32(MT_MAX_ELEMS, (uint32_t)(p->outer * p->n))) {
        return "outer, inner must be >= 1 with outer * n * inner <= 2^26";
    }
    return NULL;
}

// LayerNorm: c <= 256 keeps the row statistics exact in 32 bits; eps_q >= 1
// keeps the square root >= 1.
const char *mt_layernorm_check(const mt_layernorm_params_t *p) {
    if (p->c < 1 || p->c > 256) {
        return "c must be in 1..256";
    }
    if (p->rows < 1 || (uint32_t)p->rows > mt_udiv_u32(MT_MAX_ELEMS, (uint32_t)p->c)) {
        return "rows must be >= 1 with rows * c <= 2^26";
    }
    if (!mt_zp_ok(p->in_zp) || !mt_zp_ok(p->out_zp)) {
        return "zero points must be in -128..127";
    }
    if (p->eps_q < 1) {
        return "eps_q must be >= 1";
    }
    if (p->m < 0) {
        return "m must be >= 0 (Q31)";
    }
    if (p->sh < -31 || p->sh > 31) {
        return "sh must be in -31..31";
    }
    return NULL;
}

// GRU over a sequence: the sizes keep every int32 sum exact: |w (x - zp)| <= 2^15 over D + H <= 65535
// terms plus |bias| <= 2^30; the backward's weight sums are |d x| <= 2^15 over
// T <= 32768 steps.
const char *mt_gru_check(const mt_gru_params_t *p) {
    if (p->t < 1 || p->t > 32768 || p->d < 1 || p->d > 32768 || p->h < 1 || p->d + p->h > MT_MAX_DIM) {
        return "T, D, H must be >= 1 with T <= 32768, D <= 32768 and D + H <= 65535";
    }
    if (!mt_elems_ok(p->t, p->d, 1) || !mt_elems_ok(p->t, 4, p->h) || !mt_elems_ok(3, p->h, p->d + p->h)) {
        return "a tensor over 2^26 elements";
    }
    if (!mt_zp_ok(p->x_zp)) {
        return "x_zp must be in -128..127";
    }
    if (p->k < 0) {
        return "k must be >= 0";
    }
    if (p->m_rn < 0 || p->m_h < 0 || p->m_hn < 0 || p->m_w < 0) {
        return "multipliers must be >= 0 (Q31)";
    }
    if (p->sh_rn < -31 || p->sh_rn > 15) {
        return "sh_rn must be in -31..15";
    }
    if (p->sh_h < -31 || p->sh_h > 0 || p->sh_hn < -31 || p->sh_hn > 0 || p->sh_w < -31 || p->sh_w > 0) {
        return "sh_h, sh_hn, sh_w must be in -31..0";
    }
    return NULL;
}

// bias: 4H, mult / shift: 6H (docs/numerics.md, "GRU over a sequence").
const char *mt_gru_bias_check(const int32_t *bias, int32_t h) {
    return mt_bias_check(bias, 4 * h);
}

const char *mt_gru_rq_check(const int32_t *mult, const int32_t *shift, int32_t h) {
    return mt_requant_params_check(mult, shift, 6 * h);
}

// wr's rule as linear's grad input over the 3H rows that meet an error.
const char *mt_gru_wr_check(const int32_t *wr, int32_t h) {
    return mt_wr_check(wr, 3 * h, 3 * h);
}

const char *mt_gru_dtanh_check(const int32_t *dtanh, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
        if (dtanh[i] < 0) {
            return "dtanh must be >= 0 (Q31)";
        }
    }
    return NULL;
}

// LSTM over a sequence: the GRU's size rules with four gates and a keep of 6H a step.
const char *mt_lstm_check(const mt_lstm_params_t *p) {
    if (p->t < 1 || p->t > 32768 || p->d < 1 || p->d > 32768 || p->h < 1 || p->d + p->h > MT_MAX_DIM) {
        return "T, D, H must be >= 1 with T <= 32768, D <= 32768 and D + H <= 65535";
    }
    if (!mt_elems_ok(p->t, p->d, 1) || !mt_elems_ok(p->t, 6, p->h) || !mt_elems_ok(4, p->h, p->d + p->h)) {
        return "a tensor over 2^26 elements";
    }
    if (!mt_zp_ok(p->x_zp)) {
        return "x_zp must be in -128..127";
    }
    if (p->k < 0) {
        return "k must be >= 0";
    }
    if (p->m_ig < 0 || p->m_h < 0 || p->m_c < 0 || p->m_w < 0) {
        return "multipliers must be >= 0 (Q31)";
    }
    if (p->sh_ig < -31 || p->sh_ig > 15) {
        return "sh_ig must be in -31..15";
    }
    if (p->sh_h < -31 || p->sh_h > 0 || p->sh_c < -31 || p->sh_c > 0 || p->sh_w < -31 || p->sh_w > 0) {
        return "sh_h, sh_c, sh_w must be in -31..0";
    }
    return NULL;
}

// bias: 4H, mult / shift: 8H (docs/numerics.md, "LSTM over a sequence").
const char *mt_lstm_bias_check(const int32_t *bias, int32_t h) {
    return mt_bias_check(bias, 4 * h);
}

const char *mt_lstm_rq_check(const int32_t *mult, const int32_t *shift, int32_t h) {
    return mt_requant_params_check(mult, shift, 8 * h);
}

// wr's rule as linear's grad input over the 4H rows.
const char *mt_lstm_wr_check(const int32_t *wr, int32_t h) {
    return mt_wr_check(wr, 4 * h, 4 * h);
}
