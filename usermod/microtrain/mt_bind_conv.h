// Bindings of conv2d and linear.
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_MT_BIND_CONV_H
#define MT_MT_BIND_CONV_H

// ---------------------------------------------------------------------------
// conv2d

static mp_obj_t mod_conv2d_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_forward";
    (void)n_args;
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p);
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], mt_conv_w_n(p), NULL);
    const int32_t *bias = mt_in_i32(fn, "bias", args[3], p->out_c);
    const int32_t *mult = mt_in_i32(fn, "mult", args[4], p->out_c);
    const int32_t *shift = mt_in_i32(fn, "shift", args[5], p->out_c);
    int8_t *y = mt_out_s8(fn, "y", args[6], nout);
    mt_check_qparams(fn, bias, mult, shift, p->out_c);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_no_overlap(fn, "y", y, (size_t)nout, "w", w, (size_t)mt_conv_w_n(p));
    if (dil) {
        mt_conv2d_dil_s8_forward(&pu.d, x, w, bias, mult, shift, y);
    } else {
        mt_conv2d_s8_forward(p, x, w, bias, mult, shift, y);
    }
    return mp_const_none;
}

static mp_obj_t mod_conv2d_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_grad_input";
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p);
    const int8_t *e = mt_in_s8(fn, "e", args[1], nout, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], mt_conv_w_n(p), NULL);
    const int32_t *wr = mt_in_i32(fn, "wr", args[3], p->out_c);
    const uint8_t *mask = mt_mask(fn, args[4], p->out_c);
    int32_t *acc = mt_out_i32(fn, "acc", args[5], nin);
    int8_t *ein = mt_out_s8(fn, "ein", args[6], nin);
    int32_t lo, hi;
    mt_grad_act(fn, n_args, args, &lo, &hi);
    const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    mt_check(fn, "wr", mt_wr_check(wr, p->out_c, p->k_h * p->k_w * opg));
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "acc", acc, (size_t)nin * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "wr", wr, (size_t)p->out_c * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "e", e, (size_t)nout);
    mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "w", w, (size_t)mt_conv_w_n(p));
    if (mask) {
        mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "mask", mask, (size_t)p->out_c);
        mt_no_overlap(fn, "ein", ein, (size_t)nin, "mask", mask, (size_t)p->out_c);
    }
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "w", w, (size_t)mt_conv_w_n(p));
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "wr", wr, (size_t)p->out_c * 4);
    return mp_obj_new_int(dil ? mt_conv2d_dil_s8_grad_input(&pu.d, e, w, wr, mask, lo, hi, acc, ein)
                              : mt_conv2d_s8_grad_input(p, e, w, wr, mask, lo, hi, acc, ein));
}

static mp_obj_t mod_conv2d_s8_grad_weight(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_grad_weight";
    (void)n_args;
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int8_t *x = mt_in_s8(fn, "x", args[1], mt_conv_in_n(p), NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], mt_conv_out_n(p), NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_c);
    int32_t *gw = mt_out_i32(fn, "gw", args[4], mt_conv_w_n(p));
    int32_t *gb = mt_out_i32(fn, "gb", args[5], p->out_c);
    mt_no_overlap_grads(fn, gw, (size_t)mt_conv_w_n(p) * 4, gb, (size_t)p->out_c * 4, x, (size_t)mt_conv_in_n(p), e,
                        (size_t)mt_conv_out_n(p));
    if (dil) {
        mt_conv2d_dil_s8_grad_weight(&pu.d, x, e, mask, gw, gb);
    } else {
        mt_conv2d_s8_grad_weight(p, x, e, mask, gw, gb);
    }
    return mp_const_none;
}

#if MT_HAS_FLOAT
static mp_obj_t mod_conv2d_s8_grad_weight_f32(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_grad_weight_f32";
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int8_t *x = mt_in_s8(fn, "x", args[1], mt_conv_in_n(p), NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], mt_conv_out_n(p), NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_c);
    const float w_scale = mt_float(fn, "w_scale", args[4]);
    const float b_scale = mt_float(fn, "b_scale", args[5]);
    const int32_t k = p->k_h * p->k_w * mt_conv_cpg(p);
    float *gw, *gb;
    int32_t c0, n;
    mt_gw_window(fn, n_args, args, mask, p->out_c, k, &gw, &gb, &c0, &n);
    mt_no_overlap_grads(fn, gw, (size_t)(n * k) * 4, gb, (size_t)n * 4, x, (size_t)mt_conv_in_n(p), e,
                        (size_t)mt_conv_out_n(p));
    if (dil) {
        mt_conv2d_dil_s8_grad_weight_f32(&pu.d, x, e, mask, w_scale, b_scale, gw, gb, c0);
    } else {
        mt_conv2d_s8_grad_weight_f32(p, x, e, mask, w_scale, b_scale, gw, gb, c0);
    }
    return mp_const_none;
}
#endif

// ---------------------------------------------------------------------------
// linear

static mp_obj_t mod_linear_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_forward";
    (void)n_args;
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *x = mt_in_s8(fn, "x", args[1], p->in_n, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], p->in_n * p->out_n, NULL);
    const int32_t *bias = mt_in_i32(fn, "bias", args[3], p->out_n);
    const int32_t *mult = mt_in_i32(fn, "mult", args[4], p->out_n);
    const int32_t *shift = mt_in_i32(fn, "shift", args[5], p->out_n);
    int8_t *y = mt_out_s8(fn, "y", args[6], p->out_n);
    mt_check_qparams(fn, bias, mult, shift, p->out_n);
    mt_no_overlap(fn, "y", y, (size_t)p->out_n, "x", x, (size_t)p->in_n);
    mt_no_overlap(fn, "y", y, (size_t)p->out_n, "w", w, (size_t)(p->in_n * p->out_n));
    mt_linear_s8_forward(p, x, w, bias, mult, shift, y);
    return mp_const_none;
}

static mp_obj_t mod_linear_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_grad_input";
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *e = mt_in_s8(fn, "e", args[1], p->out_n, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], p->in_n * p->out_n, NULL);
    const int32_t *wr = mt_in_i32(fn, "wr", args[3], p->out_n);
    const uint8_t *mask = mt_mask(fn, args[4], p->out_n);
    int32_t *acc = mt_out_i32(fn, "acc", args[5], p->in_n);
    int8_t *ein = mt_out_s8(fn, "ein", args[6], p->in_n);
    int32_t lo, hi;
    mt_grad_act(fn, n_args, args, &lo, &hi);
    mt_check(fn, "wr", mt_wr_check(wr, p->out_n, p->out_n));
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "e", e, (size_t)p->out_n);
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "acc", acc, (size_t)p->in_n * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "wr", wr, (size_t)p->out_n * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "e", e, (size_t)p->out_n);
    mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "w", w, (size_t)(p->in_n * p->out_n));
    if (mask) {
        mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "mask", mask, (size_t)p->out_n);
        mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "mask", mask, (size_t)p->out_n);
    }
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "w", w, (size_t)(p->in_n * p->out_n));
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "wr", wr, (size_t)p->out_n * 4);
    return mp_obj_new_int(mt_linear_s8_grad_input(p, e, w, wr, mask, lo, hi, acc, ein));
}

static mp_obj_t mod_linear_s8_grad_weight(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_grad_weight";
    (void)n_args;
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *x = mt_in_s8(fn, "x", args[1], p->in_n, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], p->out_n, NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_n);
    int32_t *gw = mt_out_i32(fn, "gw", args[4], p->in_n * p->out_n);
    int32_t *gb = mt_out_i32(fn, "gb", args[5], p->out_n);
    mt_no_overlap_grads(fn, gw, (size_t)(p->in_n * p->out_n) * 4, gb, (size_t)p->out_n * 4, x, (size_t)p->in_n, e,
                        (size_t)p->out_n);
    mt_linear_s8_grad_weight(p, x, e, mask, gw, gb);
    return mp_const_none;
}

#if MT_HAS_FLOAT
static mp_obj_t mod_linear_s8_grad_weight_f32(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_grad_weight_f32";
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *x = mt_in_s8(fn, "x", args[1], p->in_n, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], p->out_n, NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_n);
    const float w_scale = mt_float(fn, "w_scale", args[4]);
    const float b_scale = mt_float(fn, "b_scale", args[5]);
    float *gw, *gb;
    int32_t c0, n;
    mt_gw_window(fn, n_args, args, mask, p->out_n, p->in_n, &gw, &gb, &c0, &n);
    mt_no_overlap_grads(fn, gw, (size_t)(n * p->in_n) * 4, gb, (size_t)n * 4, x, (size_t)p->in_n, e, (size_t)p->out_n);
    mt_linear_s8_grad_weight_f32(p, x, e, mask, w_scale, b_scale, gw, gb, c0);
    return mp_const_none;
}
#endif

#endif
