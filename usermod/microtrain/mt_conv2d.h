// Private to the conv2d_*.c files: the geometry shared by the forward, grad
// weight and grad input kernels (one window of an output position, one
// tap's rectangle of output positions).
#ifndef MT_CONV2D_H
#define MT_CONV2D_H

#include "mt_dsp.h"
#include "mt_kernels.h"

// Static helpers, inlined where GCC chooses. An including file first says which
// parts it uses (a natmod keeps every static function of a file, used or not):
// MT_CONV2D_WIN, the window of one output position (win_init); MT_CONV2D_BACK,
// the backward's tap rectangles (out_range, mt_rect_t, oc_on).
#if defined(__GNUC__)
#define MT_SHARED __attribute__((unused))
#else
#define MT_SHARED
#endif

// conv2d int8 kernels (docs/numerics.md). Pure C99, no libc, no division instruction: the descriptor passed
// mt_conv2d_check, so every index below fits in int32 and every window
// overlaps the input.
//
// Layouts: x/y/e/acc are HWC, w is OHWI with cpg = in_c / groups input
// channels. Windows are walked one kernel row (ky) at a time over the valid
// taps only (ranges computed per output position, no per-tap bounds test).
// With groups == 1 the valid taps of a row are contiguous in both x and w, so
// a row is a single run of nkx * in_c elements; otherwise each tap is a run of
// cpg elements (depthwise: cpg == 1, a strided single-element loop).
// Positions in buffers are int32 offsets rather than bumped pointers, so no
// out-of-range pointer is ever formed after the last tap.

// Valid taps [*k0, *k1) of a window starting at input index `base`. The
// descriptor check guarantees base < in and base + k > 0: non-empty.
static inline void tap_range(int32_t base, int32_t k, int32_t in, int32_t *k0, int32_t *k1) {
    *k0 = base < 0 ? -base : 0;
    *k1 = in - base < k ? in - base : k;
}

typedef struct {
    int32_t cpg, opg;  // input / output channels per group
    int32_t x_row;     // in_w * in_c: one input row
    int32_t w_row;     // k_w * cpg: one kernel row of one oc
    int32_t w_oc;      // k_h * k_w * cpg: all weights of one oc
} mt_geom_t;

// Valid part of the window of one output position.
typedef struct {
    int32_t nky;    // valid kernel rows
    int32_t nkx;    // taps per row (1 after fusing when groups == 1)
    int32_t run;    // contiguous elements per tap (cpg, or nkx * in_c fused)
    int32_t x_off;  // x / acc offset of the first valid tap, channel 0
    int32_t w_off;  // offset of the first valid tap inside one oc's weights
} mt_win_t;

MT_SHARED static void geom_init(const mt_conv2d_params_t *p, mt_geom_t *g) {
    // Two software divisions per call; exact since groups divides both.
    g->cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    g->opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    g->x_row = p->in_w * p->in_c;
    g->w_row = p->k_w * g->cpg;
    g->w_oc = p->k_h * g->w_row;
}

#if MT_CONV2D_WIN
MT_SHARED static void win_init(const mt_conv2d_params_t *p, const mt_geom_t *g, int32_t oy, int32_t ox, mt_win_t *win) {
    // (out - 1) * stride - pad < in <= 65535: no overflow.
    const int32_t by = oy * p->stride_h - p->pad_top;
    const int32_t bx = ox * p->stride_w - p->pad_left;
    int32_t ky0, ky1, kx0, kx1;
    tap_range(by, p->k_h, p->in_h, &ky0, &ky1);
    tap_range(bx, p->k_w, p->in_w, &kx0, &kx1);
    win->nky = ky1 - ky0;
    win->nkx = kx1 - kx0;
    win->run = g->cpg;
    if (p->groups == 1) {  // a kernel row is one contiguous run in x and w
        win->run = win->nkx * p->in_c;
        win->nkx = 1;
    }
    win->x_off = ((by + ky0) * p->in_w + bx + kx0) * p->in_c;
    win->w_off = ky0 * g->w_row + kx0 * g->cpg;
}
#endif


#if MT_CONV2D_BACK && (!MT_SOFT_MATH || MT_HAS_FLOAT)
// Outputs [*o0, *o1) whose tap k lands inside the input,
// 0 <= o * stride - pad + k < in; possibly empty (*o0 == *o1).
MT_SHARED static void out_range(int32_t k, int32_t stride, int32_t pad, int32_t in, int32_t out, int32_t *o0,
                                int32_t *o1) {
    int32_t lo = 0, hi = 0;
    if (k < pad) {  // ceil((pad - k) / stride)
        lo = stride == 1 ? pad - k : (int32_t)mt_udiv_u32((uint32_t)(pad - k + stride - 1), (uint32_t)stride);
    }
    const int32_t last = in - 1 + pad - k;  // largest allowed o * stride
    if (last >= 0) {
        hi = 1 + (stride == 1 ? last : (int32_t)mt_udiv_u32((uint32_t)last, (uint32_t)stride));
    }
    if (hi > out) {
        hi = out;
    }
    if (lo > hi) {
        lo = hi;
    }
    *o0 = lo;
    *o1 = hi;
}

// ---- Backward, register-blocked (docs/numerics.md: int32 sums are exact, so
// their order is free). Every weight-gradient sum is taken over one tap's
// rectangle of valid output positions, a block of weights at a time: the
// block's sums stay in registers while the rectangle is walked once. On
// armv7e-m the Arm DSP halfword multiply-accumulates (mt_dsp.h) take four
// channels from one word load; elsewhere the same code runs on their exact C
// equivalents. The 2x4 blocks take the zero point out of their sums,
// sum e * (x - zp) = sum e * x - zp * sum e (|each part| <= 2^30: exact);
// the other blocks subtract it from x (x - zp is a halfword, -255..255).

// One tap's valid output positions: noy rows of nox columns. Offsets (not
// pointers) step through e and x, so nothing points outside the buffers.
typedef struct {
    int32_t nox, noy;
    int32_t e_col, x_col;  // offset steps between neighbouring columns
    int32_t e_row, x_row;  // offset steps between neighbouring rows
} mt_rect_t;

MT_SHARED static int oc_on(const uint8_t *mask, int32_t oc) {
    return !mask || mask[oc];
}
#endif

#endif
