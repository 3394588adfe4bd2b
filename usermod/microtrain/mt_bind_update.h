// Hand-written bindings of the optimiser-update primitives with their own argument rules:
// update_f32_decay after its generated prologue (mt_bind_gen.h; q / scale / f or master
// by hand), update_s8_apply and update_s8_apply_keep whole. Every buffer and scalar is
// checked before anything is written.
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_MT_BIND_UPDATE_H
#define MT_MT_BIND_UPDATE_H

#if MT_HAS_FLOAT
static const float *mt_opt_in_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : (const float *)mt_buf(fn, name, o, MT_F32, n, 0, NULL);
}
static float *mt_opt_out_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : mt_out_f32(fn, name, o, n);
}

// update_f32_decay(g, k, touched, n, wd, q, scale, f, master): the source of the
// decayed values is master or q (int8 or int32) * f * scale.
static mp_obj_t mod_update_f32_decay(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_decay";
    mt_update_f32_decay_args_t a;
    mt_update_f32_decay_args(fn, n_args, args, &a);
    mt_update_src_t src;
    src.master = mt_opt_in_f32(fn, "master", args[8], (int32_t)a.g_n);
    src.q8 = NULL;
    src.q32 = NULL;
    src.scale = NULL;
    src.f = 1.0f;
    if (src.master == NULL) {
        mp_buffer_info_t bi;
        if (args[5] != mp_const_none && mp_get_buffer(args[5], &bi, MP_BUFFER_READ) && bi.typecode == 'i') {
            src.q32 = mt_in_i32(fn, "q", args[5], (int32_t)a.g_n);
        } else {
            src.q8 = mt_in_s8(fn, "q", args[5], (int32_t)a.g_n, NULL);
        }
        src.scale = (const float *)mt_buf(fn, "scale", args[6], MT_F32, a.n_ch, 0, NULL);
        src.f = mt_fscalar(fn, "f", args[7], mt_finite_check);
        mt_no_overlap(fn, "g", a.g, a.g_n * 4, "scale", src.scale, (size_t)a.n_ch * 4);
    } else {
        mt_no_overlap(fn, "g", a.g, a.g_n * 4, "master", src.master, a.g_n * 4);
    }
    if (a.touched != NULL) {
        mt_no_overlap(fn, "g", a.g, a.g_n * 4, "touched", a.touched, (size_t)a.n_ch);
    }
    mt_update_f32_decay(a.g, a.n_ch, a.k, a.touched, a.n, a.wd, &src);
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

#endif

#endif
