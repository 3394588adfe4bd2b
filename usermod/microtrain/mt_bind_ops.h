// Bindings of the activations, pools, add, concat, upsample, loss, sparse and zeroth-order kernels.
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_MT_BIND_OPS_H
#define MT_MT_BIND_OPS_H

// ---------------------------------------------------------------------------
// relu / relu6

static int32_t mt_zp(const char *fn, const char *name, mp_obj_t o) {
    const int32_t x = mt_int(fn, name, o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, name, mt_level_check(x, v), v);
    return x;
}

// Forward may run in place (y is x) but not on partially overlapping buffers.
static void mt_inplace_ok(const char *fn, const void *y, const void *x, size_t n) {
    if (y != x) {
        mt_no_overlap(fn, "y", y, n, "x", x, n);
    }
}

static mp_obj_t mod_relu_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu_s8_forward";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    int8_t *y = mt_out_s8(fn, "y", args[2], (int32_t)n);
    mt_inplace_ok(fn, y, x, n);
    mt_relu_s8_forward(x, y, n, zp);
    return mp_const_none;
}

static mp_obj_t mod_relu6_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu6_s8_forward";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    const int32_t q6 = mt_zp(fn, "q6", args[2]);
    int8_t *y = mt_out_s8(fn, "y", args[3], (int32_t)n);
    mt_check(fn, "q6", mt_q6_check(q6, zp));
    mt_inplace_ok(fn, y, x, n);
    mt_relu6_s8_forward(x, y, n, zp, q6);
    return mp_const_none;
}

static mp_obj_t mod_relu_s8_backward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu_s8_backward";
    (void)n_args;
    size_t n;
    const int8_t *y = mt_in_s8(fn, "y", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    int8_t *e = mt_out_s8(fn, "e", args[2], (int32_t)n);
    if ((const void *)e != (const void *)y) {
        mt_no_overlap(fn, "e", e, n, "y", y, n);
    }
    mt_relu_s8_backward(y, e, n, zp);
    return mp_const_none;
}

static mp_obj_t mod_relu6_s8_backward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu6_s8_backward";
    (void)n_args;
    size_t n;
    const int8_t *y = mt_in_s8(fn, "y", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    const int32_t q6 = mt_zp(fn, "q6", args[2]);
    int8_t *e = mt_out_s8(fn, "e", args[3], (int32_t)n);
    mt_check(fn, "q6", mt_q6_check(q6, zp));
    if ((const void *)e != (const void *)y) {
        mt_no_overlap(fn, "e", e, n, "y", y, n);
    }
    mt_relu6_s8_backward(y, e, n, zp, q6);
    return mp_const_none;
}

// ---------------------------------------------------------------------------
// pools

// A pool grad-input scratch: None (NULL) where the windows do not overlap.
static int32_t *mt_pool_acc(const char *fn, mp_obj_t o, const mt_pool_params_t *p, int32_t n) {
    if (o == mp_const_none) {
        mt_check(fn, "acc", mt_pool_no_acc_check(p));
        return NULL;
    }
    return mt_out_i32(fn, "acc", o, n);
}

static mp_obj_t mod_maxpool_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "maxpool_s8_forward";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], nout);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_maxpool_s8_forward(p, x, y);
    return mp_const_none;
}

static mp_obj_t mod_maxpool_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "maxpool_s8_grad_input";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], nout, NULL);
    int32_t *acc = mt_pool_acc(fn, args[3], p, nin);
    int8_t *ein = mt_out_s8(fn, "ein", args[4], nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "x", x, (size_t)nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    if (acc != NULL) {
        mt_no_overlap(fn, "ein", ein, (size_t)nin, "acc", acc, (size_t)nin * 4);
    }
    return mp_obj_new_int(mt_maxpool_s8_grad_input(p, x, e, acc, ein));
}

static mp_obj_t mod_avgpool_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "avgpool_s8_forward";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], nout);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_avgpool_s8_forward(p, x, y);
    return mp_const_none;
}

static mp_obj_t mod_avgpool_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "avgpool_s8_grad_input";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *e = mt_in_s8(fn, "e", args[1], nout, NULL);
    int32_t *acc = mt_pool_acc(fn, args[2], p, nin);
    int8_t *ein = mt_out_s8(fn, "ein", args[3], nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    if (acc != NULL) {
        mt_no_overlap(fn, "ein", ein, (size_t)nin, "acc", acc, (size_t)nin * 4);
    }
    return mp_obj_new_int(mt_avgpool_s8_grad_input(p, e, acc, ein));
}

// Grad input with the activation mask: (desc, t, e, lo, hi, ein), t = x (max) or y
// (avg). ein may be t itself, nothing else may overlap it.
static mp_obj_t mt_pool_grad_act(const char *fn, const char *t_name, const mp_obj_t *args, int is_max) {
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    mt_check(fn, "desc", mt_pool_disjoint_check(p));
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *t = mt_in_s8(fn, t_name, args[1], nin, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], nout, NULL);
    int32_t lo, hi;
    mt_act_bounds(fn, args[3], args[4], &lo, &hi);
    int8_t *ein = mt_out_s8(fn, "ein", args[5], nin);
    if ((const void *)ein != (const void *)t) {
        mt_no_overlap(fn, "ein", ein, (size_t)nin, t_name, t, (size_t)nin);
    }
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    return mp_obj_new_int(is_max ? mt_maxpool_s8_grad_input_act(p, t, e, lo, hi, ein)
                                 : mt_avgpool_s8_grad_input_act(p, t, e, lo, hi, ein));
}

static mp_obj_t mod_maxpool_s8_grad_input_act(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_pool_grad_act("maxpool_s8_grad_input_act", "x", args, 1);
}

static mp_obj_t mod_avgpool_s8_grad_input_act(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_pool_grad_act("avgpool_s8_grad_input_act", "y", args, 0);
}

static int32_t mt_hw(const char *fn, mp_obj_t o) {
    const int32_t hw = mt_int(fn, "hw", o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "hw", mt_hw_check(hw, v), v);
    return hw;
}

static int32_t mt_channels(const char *fn, mp_obj_t o) {
    const int32_t c = mt_int(fn, "c", o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "c", mt_channels_check(c, v), v);
    return c;
}

static mp_obj_t mod_global_avgpool_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "global_avgpool_s8_forward";
    (void)n_args;
    const int32_t hw = mt_hw(fn, args[1]);
    const int32_t c = mt_channels(fn, args[2]);
    mt_check(fn, "x", mt_hw_c_check(hw, c));
    const int8_t *x = mt_in_s8(fn, "x", args[0], hw * c, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[3], c);
    mt_no_overlap(fn, "y", y, (size_t)c, "x", x, (size_t)(hw * c));
    mt_global_avgpool_s8_forward(x, hw, c, y);
    return mp_const_none;
}

static mp_obj_t mod_global_avgpool_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "global_avgpool_s8_grad_input";
    (void)n_args;
    size_t c;
    const int8_t *e = mt_in_s8(fn, "e", args[0], -1, &c);
    const int32_t hw = mt_hw(fn, args[1]);
    mt_check(fn, "e", mt_gap_channels_check(hw, (uint32_t)c));
    int8_t *ein = mt_out_s8(fn, "ein", args[2], hw * (int32_t)c);
    mt_no_overlap(fn, "ein", ein, (size_t)hw * c, "e", e, c);
    mt_global_avgpool_s8_grad_input(e, hw, (int32_t)c, ein);
    return mp_const_none;
}

// ---------------------------------------------------------------------------
// residual add

static mp_obj_t mod_add_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "add_s8_forward";
    (void)n_args;
    mt_add_desc_u u;
    mt_desc(fn, args[0], u.a, MT_ADD_NPARAMS);
    mt_check(fn, "desc", mt_add_check(&u.s));
    const int32_t n = u.s.n;
    const int8_t *x1 = mt_in_s8(fn, "x1", args[1], n, NULL);
    const int8_t *x2 = mt_in_s8(fn, "x2", args[2], n, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[3], n);
    // Element-wise: y may be exactly x1 or x2 (in place), not partially overlapping.
    if (y != x1) {
        mt_no_overlap(fn, "y", y, (size_t)n, "x1", x1, (size_t)n);
    }
    if (y != x2) {
        mt_no_overlap(fn, "y", y, (size_t)n, "x2", x2, (size_t)n);
    }
    mt_add_s8_forward(&u.s, x1, x2, y);
    return mp_const_none;
}

// conv2d_s8_forward into add_s8_forward, over the add's other input, a block of rows at a time
// (add.c): (desc, x, w, bias, mult, shift, add_desc, side, skip, tile).
static mp_obj_t mod_conv2d_add_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_add_s8_forward";
    (void)n_args;
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    if (dil) {
        MT_VALUE_ERR(fn, "desc", MT_MSG_NO_ROW_BLOCK);
    }
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p), nw = mt_conv_w_n(p);
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], nw, NULL);
    const int32_t *bias = mt_in_i32(fn, "bias", args[3], p->out_c);
    const int32_t *mult = mt_in_i32(fn, "mult", args[4], p->out_c);
    const int32_t *shift = mt_in_i32(fn, "shift", args[5], p->out_c);
    mt_check_qparams(fn, bias, mult, shift, p->out_c);
    mt_add_desc_u u;
    const int32_t *ad = mt_in_i32(fn, "add_desc", args[6], MT_ADD_NPARAMS);
    for (int32_t i = 0; i < MT_ADD_NPARAMS; ++i) {
        u.a[i] = ad[i];
    }
    mt_check(fn, "add_desc", mt_add_check(&u.s));
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "add_desc", mt_conv_add_n_check(u.s.n, nout, v), v);
    const int32_t side = mt_int(fn, "side", args[7]);
    mt_check_v(fn, "side", mt_part_check(side, v), v);
    int8_t *skip = mt_out_s8(fn, "skip", args[8], nout);
    size_t nt;
    int8_t *tile = (int8_t *)mt_buf(fn, "tile", args[9], MT_S8, -1, 1, &nt);
    const int32_t row = p->out_w * p->out_c;
    mt_check_v(fn, "tile", mt_tile_check((uint32_t)nt, row, v), v);
    int32_t rows = (int32_t)mt_udiv_u32((uint32_t)nt, (uint32_t)row);
    if (rows > p->out_h) {
        rows = p->out_h;
    }
    const size_t used = (size_t)rows * (size_t)row;
    // the conv reads x and w while skip and tile are written: no two may share a byte
    mt_no_overlap(fn, "skip", skip, (size_t)nout, "x", x, (size_t)nin);
    mt_no_overlap(fn, "skip", skip, (size_t)nout, "w", w, (size_t)nw);
    mt_no_overlap(fn, "tile", tile, used, "x", x, (size_t)nin);
    mt_no_overlap(fn, "tile", tile, used, "w", w, (size_t)nw);
    mt_no_overlap(fn, "tile", tile, used, "skip", skip, (size_t)nout);
    mt_conv2d_add_s8_forward(p, x, w, bias, mult, shift, &u.s, side, skip, tile, rows);
    return mp_const_none;
}

static int32_t mt_ratio(const char *fn, const char *name, mp_obj_t o) {
    const int32_t r = mt_int(fn, name, o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, name, mt_ratio_check(r, v), v);
    return r;
}

static mp_obj_t mod_add_s8_grad_merge(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "add_s8_grad_merge";
    (void)n_args;
    size_t n;
    const int8_t *ea = mt_in_s8(fn, "ea", args[0], -1, &n);
    const int32_t ra = mt_ratio(fn, "ra", args[1]);
    const int8_t *eb = mt_in_s8(fn, "eb", args[2], (int32_t)n, NULL);
    const int32_t rb = mt_ratio(fn, "rb", args[3]);
    int8_t *out = mt_out_s8(fn, "out", args[4], (int32_t)n);
    // out may be exactly ea or eb: each element is read before it is written
    // in the second pass, and the first pass only reads.
    if (out != ea) {
        mt_no_overlap(fn, "out", out, n, "ea", ea, n);
    }
    if (out != eb) {
        mt_no_overlap(fn, "out", out, n, "eb", eb, n);
    }
    return mp_obj_new_int(mt_add_s8_grad_merge(ea, ra, eb, rb, n, out));
}

// ---------------------------------------------------------------------------
// channel concatenation, upsampling

static mp_obj_t mod_concat_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "concat_s8_forward";
    (void)n_args;
    mt_concat_desc_u u;
    mt_desc(fn, args[0], u.a, MT_CONCAT_NPARAMS);
    mt_check(fn, "desc", mt_concat_check(&u.s));
    const int32_t n1 = u.s.hw * u.s.c1, n2 = u.s.hw * u.s.c2, n = n1 + n2;
    const int8_t *x1 = mt_in_s8(fn, "x1", args[1], n1, NULL);
    const int8_t *x2 = mt_in_s8(fn, "x2", args[2], n2, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[3], n);
    mt_no_overlap(fn, "y", y, (size_t)n, "x1", x1, (size_t)n1);
    mt_no_overlap(fn, "y", y, (size_t)n, "x2", x2, (size_t)n2);
    mt_concat_s8_forward(&u.s, x1, x2, y);
    return mp_const_none;
}

static mp_obj_t mod_concat_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "concat_s8_grad_input";
    (void)n_args;
    mt_concat_desc_u u;
    mt_desc(fn, args[0], u.a, MT_CONCAT_NPARAMS);
    mt_check(fn, "desc", mt_concat_check(&u.s));
    const int32_t n = u.s.hw * (u.s.c1 + u.s.c2);
    const int8_t *e = mt_in_s8(fn, "e", args[1], n, NULL);
    const int32_t part = mt_int(fn, "part", args[2]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "part", mt_part_check(part, v), v);
    const int32_t m = u.s.hw * (part ? u.s.c2 : u.s.c1);
    int8_t *ein = mt_out_s8(fn, "ein", args[3], m);
    mt_no_overlap(fn, "ein", ein, (size_t)m, "e", e, (size_t)n);
    mt_concat_s8_grad_input(&u.s, e, part, ein);
    return mp_const_none;
}

static const mt_upsample_params_t *mt_upsample_desc(const char *fn, mp_obj_t o, mt_upsample_desc_u *u) {
    mt_desc(fn, o, u->a, MT_UPSAMPLE_NPARAMS);
    mt_check(fn, "desc", mt_upsample_check(&u->s));
    return &u->s;
}

static mp_obj_t mod_upsample_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "upsample_s8_forward";
    (void)n_args;
    mt_upsample_desc_u u;
    const mt_upsample_params_t *p = mt_upsample_desc(fn, args[0], &u);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], nout);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_upsample_s8_forward(p, x, y);
    return mp_const_none;
}

static mp_obj_t mod_upsample_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "upsample_s8_grad_input";
    (void)n_args;
    mt_upsample_desc_u u;
    const mt_upsample_params_t *p = mt_upsample_desc(fn, args[0], &u);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *e = mt_in_s8(fn, "e", args[1], nout, NULL);
    int8_t *ein = mt_out_s8(fn, "ein", args[2], nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    return mp_obj_new_int(mt_upsample_s8_grad_input(p, e, ein));
}

// ---------------------------------------------------------------------------
// softmax cross-entropy

static mp_obj_t mod_softmax_xent_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "softmax_xent_s8";
    (void)n_args;
    size_t c;
    const int8_t *q = mt_in_s8(fn, "logits", args[0], -1, &c);
    mt_check(fn, "logits", mt_classes_check((uint32_t)c));
    const int32_t label = mt_int(fn, "label", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "label", mt_label_check(label, (uint32_t)c, v), v);
    size_t n_lut;
    const uint32_t *lut = (const uint32_t *)mt_buf(fn, "lut", args[2], MT_U32, -1, 0, &n_lut);
    mt_check_v(fn, "lut", mt_softmax_lut_check(lut, (uint32_t)n_lut, v), v);
    int8_t *err = mt_out_s8(fn, "err", args[3], (int32_t)c);
    int32_t *stats = mt_out_i32(fn, "stats", args[4], 3);
    mt_no_overlap(fn, "err", err, c, "logits", q, c);
    return mp_obj_new_int(mt_softmax_xent_s8(q, (int32_t)c, label, lut, (int32_t)n_lut, err, stats));
}

// ---------------------------------------------------------------------------
// lookup-table activations

static mp_obj_t mod_lut_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "lut_s8_forward";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int8_t *table = mt_in_s8(fn, "table", args[1], 256, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], (int32_t)n);
    mt_inplace_ok(fn, y, x, n);
    mt_no_overlap(fn, "y", y, n, "table", table, 256);
    mt_lut_s8_forward(x, table, y, n);
    return mp_const_none;
}

static mp_obj_t mod_lut_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "lut_s8_grad_input";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int8_t *e = mt_in_s8(fn, "e", args[1], (int32_t)n, NULL);
    const int32_t *dtable = mt_in_i32(fn, "dtable", args[2], 256);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "dtable", mt_lut_dtable_check(dtable, v), v);
    int8_t *ein = mt_out_s8(fn, "ein", args[3], (int32_t)n);
    // ein may be exactly e (each element is read before it is written); x is
    // read again in the second pass, so ein must not touch it.
    if (ein != e) {
        mt_no_overlap(fn, "ein", ein, n, "e", e, n);
    }
    mt_no_overlap(fn, "ein", ein, n, "x", x, n);
    mt_no_overlap(fn, "ein", ein, n, "dtable", dtable, 1024);
    return mp_obj_new_int(mt_lut_s8_grad_input(x, e, dtable, ein, n));
}

// ---------------------------------------------------------------------------
// sparse-update helpers

static mp_obj_t mod_l1_norm_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "l1_norm_s8";
    (void)n_args;
    size_t n;
    const int8_t *e = mt_in_s8(fn, "e", args[0], -1, &n);
    const int32_t c = mt_channels(fn, args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "e", mt_l1_norm_len_check((uint32_t)n, c, v), v);
    const uint32_t npos = mt_udiv_u32((uint32_t)n, (uint32_t)c);
    int32_t *norms = mt_out_i32(fn, "norms", args[2], c);
    mt_l1_norm_s8(e, npos, c, norms);
    return mp_const_none;
}

static mp_obj_t mod_topk_mask(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "topk_mask";
    (void)n_args;
    size_t c;
    const int32_t *norms = (const int32_t *)mt_buf(fn, "norms", args[0], MT_I32, -1, 0, &c);
    mt_check(fn, "norms", mt_channel_count_check((uint32_t)c));
    const int32_t k = mt_int(fn, "k", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "k", mt_topk_k_check(k, (uint32_t)c, v), v);
    uint8_t *mask = (uint8_t *)mt_out_s8(fn, "mask", args[2], (int32_t)c);
    mt_topk_mask(norms, (int32_t)c, k, mask);
    return mp_const_none;
}

// ---------------------------------------------------------------------------
// zeroth-order (SPSA) perturbation and update: base, a scalar, the generator
// state (in place), w (may be base itself, else disjoint from it).

// Checks in argument order: base, the scalar (eps of the perturbation, n_rng 1;
// step of the update, n_rng 2), rng (n_rng states), w; then the overlaps. Runs
// the kernel.
static void mt_zo_call(const char *fn, const char *sname, const mp_obj_t *args, int32_t n_rng) {
    size_t n;
    const int8_t *base = mt_in_s8(fn, "base", args[0], -1, &n);
    const int32_t s = mt_int(fn, sname, args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, sname, n_rng == 1 ? mt_zo_eps_check(s, v) : mt_zo_step_check(s, v), v);
    uint32_t *rng = (uint32_t *)mt_buf(fn, "rng", args[2], MT_U32, n_rng, 1, NULL);
    int8_t *w = mt_out_s8(fn, "w", args[3], (int32_t)n);
    if ((const int8_t *)w != base) {  // the very same buffer is fine: read before written
        mt_no_overlap(fn, "w", w, n, "base", base, n);
    }
    mt_no_overlap(fn, "w", w, n, "rng", rng, (size_t)n_rng * 4);
    mt_no_overlap(fn, "rng", rng, (size_t)n_rng * 4, "base", base, n);
    if (n_rng == 1) {
        mt_zo_perturb_s8(base, n, s, rng, w);
    } else {
        mt_zo_update_s8(base, n, s, rng, w);
    }
}

static mp_obj_t mod_zo_perturb_s8(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mt_zo_call("zo_perturb_s8", "eps", args, 1);
    return mp_const_none;
}

// zo_perturb_h_s8(base, eps, rng, row, i0, w): checks in argument order, then the
// overlaps (as mt_zo_call).
static mp_obj_t mod_zo_perturb_h_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "zo_perturb_h_s8";
    (void)n_args;
    size_t n;
    int32_t v[MT_MSG_NVALS];
    const int8_t *base = mt_in_s8(fn, "base", args[0], -1, &n);
    const int32_t eps = mt_int(fn, "eps", args[1]);
    mt_check_v(fn, "eps", mt_zo_eps_check(eps, v), v);
    uint32_t *rng = (uint32_t *)mt_buf(fn, "rng", args[2], MT_U32, 1, 1, NULL);
    const int32_t row = mt_int(fn, "row", args[3]);
    mt_check_v(fn, "row", mt_zo_index_check(row, v), v);
    const int32_t i0 = mt_int(fn, "i0", args[4]);
    mt_check_v(fn, "i0", mt_zo_index_check(i0, v), v);
    int8_t *w = mt_out_s8(fn, "w", args[5], (int32_t)n);
    if ((const int8_t *)w != base) {
        mt_no_overlap(fn, "w", w, n, "base", base, n);
    }
    mt_no_overlap(fn, "w", w, n, "rng", rng, 4);
    mt_no_overlap(fn, "rng", rng, 4, "base", base, n);
    mt_zo_perturb_h_s8(base, n, eps, (uint32_t)row, (uint32_t)i0, rng, w);
    return mp_const_none;
}

static mp_obj_t mod_zo_update_s8(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mt_zo_call("zo_update_s8", "step", args, 2);
    return mp_const_none;
}

static mp_obj_t mod_dyn_requant_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "dyn_requant_s8";
    const mp_obj_t acc_in = args[0], out_in = args[1];
    (void)n_args;
    size_t n;
    const int32_t *acc = (const int32_t *)mt_buf(fn, "acc", acc_in, MT_I32, -1, 0, &n);
    int8_t *out = mt_out_s8(fn, "out", out_in, (int32_t)n);
    mt_no_overlap(fn, "out", out, n, "acc", acc, n * 4);
    return mp_obj_new_int(mt_dyn_requant_s8(acc, n, out));
}

#endif
