// Bindings of f32_axpy_i32 and the optimiser-update primitives.
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_MT_BIND_UPDATE_H
#define MT_MT_BIND_UPDATE_H

#if MT_HAS_FLOAT
static mp_obj_t mod_f32_axpy_i32(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "f32_axpy_i32";
    const mp_obj_t x_in = args[0], a_in = args[1], y_in = args[2];
    (void)n_args;
    size_t n;
    const int32_t *x = (const int32_t *)mt_buf(fn, "x", x_in, MT_I32, -1, 0, &n);
    const float a = mt_float(fn, "a", a_in);
    float *y = mt_out_f32(fn, "y", y_in, (int32_t)n);
    mt_no_overlap(fn, "y", y, n * 4, "x", x, n * 4);
    mt_f32_axpy_i32(y, x, n, a);
    return mp_const_none;
}
#endif


// ---------------------------------------------------------------------------
// update (update.c): the optimiser-update primitives. Every buffer and scalar
// is checked before anything is written.

static mp_obj_t mod_update_u8_touch(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_u8_touch";
    (void)n_args;
    size_t n;
    (void)mt_in_s8(fn, "touched", args[0], -1, &n);
    uint8_t *t = (uint8_t *)mt_out_s8(fn, "touched", args[0], (int32_t)n);
    const uint8_t *mask = mt_mask(fn, args[1], (int32_t)n);
    if (mask != NULL) {
        mt_no_overlap(fn, "touched", t, n, "mask", mask, n);
    }
    mt_update_u8_touch(t, mask, n);
    return mp_const_none;
}

#if MT_HAS_FLOAT
// A float scalar passing one of checks.c's float checks.
static float mt_fscalar(const char *fn, const char *name, mp_obj_t o, const char *(*chk)(float)) {
    const float x = mt_float(fn, name, o);
    mt_check(fn, name, chk(x));
    return x;
}

static const float *mt_opt_in_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : (const float *)mt_buf(fn, name, o, MT_F32, n, 0, NULL);
}
static float *mt_opt_out_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : mt_out_f32(fn, name, o, n);
}

static const uint8_t *mt_touched(const char *fn, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : (const uint8_t *)mt_buf(fn, "touched", o, MT_S8, n, 0, NULL);
}

// g (array('f') of n_ch * k values) and k: returns n_ch.
static float *mt_update_g(const char *fn, const char *name, mp_obj_t g_in, mp_obj_t k_in, int32_t *k_out,
                          size_t *n_out) {
    size_t n;
    (void)mt_buf(fn, name, g_in, MT_F32, -1, 0, &n);
    float *g = mt_out_f32(fn, name, g_in, (int32_t)n);
    const int32_t k = mt_int(fn, "k", k_in);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "k", mt_update_k_check(k, (uint32_t)n, v), v);
    *k_out = k;
    *n_out = n;
    return g;
}

static int32_t mt_update_count(const char *fn, mp_obj_t o) {
    const int32_t n = mt_int(fn, "n", o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "n", mt_update_n_check(n, v), v);
    return n;
}

static mp_obj_t mod_update_f32_check(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_check";
    (void)n_args;
    size_t n;
    const float *x = (const float *)mt_buf(fn, "x", args[0], MT_F32, -1, 0, &n);
    return mp_obj_new_int(mt_update_f32_check(x, n));
}

// update_f32_decay(g, k, touched, n, wd, q, scale, f, master)
static mp_obj_t mod_update_f32_decay(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_decay";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[1], &k, &n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[2], n_ch);
    const int32_t n = mt_update_count(fn, args[3]);
    const float wd = mt_fscalar(fn, "wd", args[4], mt_nonneg_check);
    mt_update_src_t src;
    src.master = mt_opt_in_f32(fn, "master", args[8], (int32_t)n_all);
    src.q8 = NULL;
    src.q32 = NULL;
    src.scale = NULL;
    src.f = 1.0f;
    if (src.master == NULL) {
        mp_buffer_info_t bi;
        if (args[5] != mp_const_none && mp_get_buffer(args[5], &bi, MP_BUFFER_READ) && bi.typecode == 'i') {
            src.q32 = mt_in_i32(fn, "q", args[5], (int32_t)n_all);
        } else {
            src.q8 = mt_in_s8(fn, "q", args[5], (int32_t)n_all, NULL);
        }
        src.scale = (const float *)mt_buf(fn, "scale", args[6], MT_F32, n_ch, 0, NULL);
        src.f = mt_fscalar(fn, "f", args[7], mt_finite_check);
        mt_no_overlap(fn, "g", g, n_all * 4, "scale", src.scale, (size_t)n_ch * 4);
    } else {
        mt_no_overlap(fn, "g", g, n_all * 4, "master", src.master, n_all * 4);
    }
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_decay(g, n_ch, k, touched, n, wd, &src);
    return mp_const_none;
}

// update_f32_standardize(g, k, touched, n)
static mp_obj_t mod_update_f32_standardize(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_standardize";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[1], &k, &n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[2], n_ch);
    const int32_t n = mt_update_count(fn, args[3]);
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_standardize(g, n_ch, k, touched, n);
    return mp_const_none;
}

// update_f32_axpby(y, x, k, touched, a, b)
static mp_obj_t mod_update_f32_axpby(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_axpby";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *y = mt_update_g(fn, "y", args[0], args[2], &k, &n_all);
    const float *x = (const float *)mt_buf(fn, "x", args[1], MT_F32, (int32_t)n_all, 0, NULL);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[3], n_ch);
    const float a = mt_fscalar(fn, "a", args[4], mt_finite_check);
    const float b = mt_fscalar(fn, "b", args[5], mt_finite_check);
    mt_no_overlap(fn, "y", y, n_all * 4, "x", x, n_all * 4);
    if (touched != NULL) {
        mt_no_overlap(fn, "y", y, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_axpby(y, x, n_ch, k, touched, a, b);
    return mp_const_none;
}

// update_f32_momentum(g, v, k, touched, mom)
static mp_obj_t mod_update_f32_momentum(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_momentum";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[2], &k, &n_all);
    float *v = mt_out_f32(fn, "v", args[1], (int32_t)n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[3], n_ch);
    const float mom = mt_fscalar(fn, "mom", args[4], mt_unit_check);
    mt_no_overlap(fn, "v", v, n_all * 4, "g", g, n_all * 4);
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
        mt_no_overlap(fn, "v", v, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_momentum(g, v, n_ch, k, touched, mom);
    return mp_const_none;
}

// update_f32_scale(x, k, touched, a)
static mp_obj_t mod_update_f32_scale(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_scale";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *x = mt_update_g(fn, "x", args[0], args[1], &k, &n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[2], n_ch);
    const float a = mt_fscalar(fn, "a", args[3], mt_finite_check);
    if (touched != NULL) {
        mt_no_overlap(fn, "x", x, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_scale(x, n_ch, k, touched, a);
    return mp_const_none;
}

// update_f32_adam(g, m, v, k, touched, b1, b2, b1t, b2t, eps)
static mp_obj_t mod_update_f32_adam(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_adam";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[3], &k, &n_all);
    float *m = mt_out_f32(fn, "m", args[1], (int32_t)n_all);
    float *v = mt_out_f32(fn, "v", args[2], (int32_t)n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[4], n_ch);
    const float b1 = mt_fscalar(fn, "b1", args[5], mt_unit_check);
    const float b2 = mt_fscalar(fn, "b2", args[6], mt_unit_check);
    const float b1t = mt_fscalar(fn, "b1t", args[7], mt_unit_check);
    const float b2t = mt_fscalar(fn, "b2t", args[8], mt_unit_check);
    const float eps = mt_fscalar(fn, "eps", args[9], mt_positive_check);
    mt_no_overlap(fn, "m", m, n_all * 4, "g", g, n_all * 4);
    mt_no_overlap(fn, "v", v, n_all * 4, "g", g, n_all * 4);
    mt_no_overlap(fn, "v", v, n_all * 4, "m", m, n_all * 4);
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
        mt_no_overlap(fn, "m", m, n_all * 4, "touched", touched, (size_t)n_ch);
        mt_no_overlap(fn, "v", v, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_adam(g, m, v, n_ch, k, touched, b1, b2, b1t, b2t, eps);
    return mp_const_none;
}

// update_s8_apply(w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr, s_in, s_out, rng,
// scratch) -> the new rng; update_s8_apply_keep (keep = 1): the same arguments, gw and gb
// only read, scratch of at least 2 * n_ch (n_ch without keep).
static mp_obj_t mt_s8_apply_call(const char *fn, const mp_obj_t *args, int keep) {
    mt_update_layer_t L;
    size_t nw, nc;
    (void)mt_in_s8(fn, "w", args[0], -1, &nw);
    L.w = mt_out_s8(fn, "w", args[0], (int32_t)nw);
    (void)mt_buf(fn, "w_scale", args[1], MT_F32, -1, 0, &nc);
    mt_check(fn, "w_scale", mt_channel_count_check((uint32_t)nc));
    L.w_scale = mt_out_f32(fn, "w_scale", args[1], (int32_t)nc);
    const uint32_t kq = mt_udiv_u32((uint32_t)nw, (uint32_t)nc);
    if (kq < 1 || kq * (uint32_t)nc != (uint32_t)nw) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)nw, (int32_t)nc, 0 };
        mt_raise(&mp_type_ValueError, fn, "w", MT_MSG_CHANNEL_MULTIPLE, v);
    }
    L.n_ch = (int32_t)nc;
    L.k = (int32_t)kq;
    L.b = mt_out_i32(fn, "b", args[2], L.n_ch);
    L.mult = mt_out_i32(fn, "mult", args[3], L.n_ch);
    L.shift = mt_out_i32(fn, "shift", args[4], L.n_ch);
    // keep: read only (mt_update_s8_apply_keep never writes them)
    L.gw = (float *)mt_buf(fn, "gw", args[5], MT_F32, (int32_t)nw, !keep, NULL);
    L.gb = (float *)mt_buf(fn, "gb", args[6], MT_F32, L.n_ch, !keep, NULL);
    L.master_w = mt_opt_out_f32(fn, "master_w", args[7], (int32_t)nw);
    L.master_b = mt_opt_out_f32(fn, "master_b", args[8], L.n_ch);
    if ((L.master_w == NULL) != (L.master_b == NULL)) {
        MT_VALUE_ERR(fn, "master_b", MT_MSG_MASTER_PAIR);
    }
    const uint8_t *touched = mt_touched(fn, args[9], L.n_ch);
    const float lr = mt_fscalar(fn, "lr", args[10], mt_nonneg_check);  // a schedule may end at 0
    L.s_in = mt_fscalar(fn, "s_in", args[11], mt_positive_check);
    L.s_out = mt_fscalar(fn, "s_out", args[12], mt_positive_check);
    const int32_t rng = mt_int(fn, "rng", args[13]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "rng", mt_update_rng_check(rng, v), v);
    // scratch: at least n_scr floats (a caller may lend a longer buffer: no slice per call);
    // the kernel uses the first n_scr
    const size_t n_scr = keep ? 2 * nc : nc;
    size_t n_have;
    float *scratch = (float *)mt_buf(fn, "scratch", args[14], MT_F32, -1, 1, &n_have);
    if (n_have < n_scr) {
        const int32_t vs[MT_MSG_NVALS] = { (int32_t)n_have, (int32_t)n_scr, 0 };
        mt_raise(&mp_type_ValueError, fn, "scratch", MT_MSG_AT_LEAST, vs);
    }
    // every written buffer apart from every other one and from the buffers only read
    // (touched; keep: gw and gb too, which may share memory with each other)
    const void *p[11] = { L.w, L.w_scale, L.b, L.mult, L.shift, L.gw, L.gb, L.master_w, L.master_b, scratch, touched };
    const size_t sz[11] = { nw, nc * 4, nc * 4, nc * 4, nc * 4, nw * 4, nc * 4, nw * 4, nc * 4, n_scr * 4, nc };
    static const char *const nm[11] = { "w",  "w_scale",  "b",        "mult",    "shift",  "gw",
                                        "gb", "master_w", "master_b", "scratch", "touched" };
    for (int i = 0; i < 10; ++i) {
        const int ro_i = keep && (i == 5 || i == 6);
        for (int j = i + 1; j < 11; ++j) {
            const int ro_j = j == 10 || (keep && (j == 5 || j == 6));
            if (p[i] != NULL && p[j] != NULL && !(ro_i && ro_j)) {
                mt_no_overlap(fn, nm[i], p[i], sz[i], nm[j], p[j], sz[j]);
            }
        }
    }
    const int32_t r = keep ? mt_update_s8_apply_keep(&L, touched, lr, rng, scratch)
                           : mt_update_s8_apply(&L, touched, lr, rng, scratch);
    if (r < -1) {
        const int32_t vv[MT_MSG_NVALS] = { -2 - r, 0, 0 };
        mt_raise(&mp_type_ValueError, fn, "gw", MT_MSG_BAD_STEP, vv);
    }
    return mp_obj_new_int(r);
}

static mp_obj_t mod_update_s8_apply(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_s8_apply_call("update_s8_apply", args, 0);
}

static mp_obj_t mod_update_s8_apply_keep(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_s8_apply_call("update_s8_apply_keep", args, 1);
}

// update_f32_ratios(w_scale, r, wr) -> index of the first max(w_scale)
static mp_obj_t mod_update_f32_ratios(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_ratios";
    (void)n_args;
    size_t n;
    const float *s = (const float *)mt_buf(fn, "w_scale", args[0], MT_F32, -1, 0, &n);
    mt_check(fn, "w_scale", mt_channel_count_check((uint32_t)n));
    mt_check(fn, "w_scale", mt_scales_check(s, (int32_t)n));
    const int32_t r = mt_int(fn, "r", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "r", mt_ratio_r_check(r, v), v);
    int32_t *wr = mt_out_i32(fn, "wr", args[2], (int32_t)n);
    mt_no_overlap(fn, "wr", wr, n * 4, "w_scale", s, n * 4);
    return mp_obj_new_int(mt_update_f32_ratios(s, (int32_t)n, r, wr));
}
#endif

#endif
