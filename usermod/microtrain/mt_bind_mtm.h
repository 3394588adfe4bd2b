// Bindings of the .mtm validation and zero-copy view (the accessors mtm_info, mtm_tensor
// and mtm_layer are generated, mt_bind_gen.h, with the helpers here).
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_MT_BIND_MTM_H
#define MT_MT_BIND_MTM_H

// ---------------------------------------------------------------------------
// .mtm model files (mtm_loader.c, docs/format.md): validation and zero-copy
// accessors. `buf` is any byte buffer (bytes, bytearray, memoryview slice).

static const uint8_t *mt_mtm_buf(const char *fn, mp_obj_t o, uint32_t *len) {
    size_t n;
    const uint8_t *b = (const uint8_t *)mt_buf(fn, "buf", o, MT_S8, -1, 0, &n);
    *len = (uint32_t)n;  // mt_buf caps buffers at 2^26 bytes
    return b;
}

// Buffer whose header and tables can be read (accessors; no CRC / semantics).
static const uint8_t *mt_mtm_tables(const char *fn, mp_obj_t o) {
    uint32_t len;
    const uint8_t *b = mt_mtm_buf(fn, o, &len);
    mt_check(fn, "buf", mt_mtm_check_tables(b, len));
    return b;
}

static mp_obj_t mod_mtm_validate(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_validate";
    (void)n_args;
    uint32_t len;
    const uint8_t *b = mt_mtm_buf(fn, args[0], &len);
    int32_t where, index;
    const char *msg = mt_mtm_validate(b, len, &where, &index);
    if (!msg) {
        return mp_const_none;
    }
#ifdef MT_OPS
    if (where == MTM_WHERE_LEFT_OUT) {  // "layer <i> '<name>'", its op (from its family's name) and the fix
        int32_t row[MTM_LAYER_N];
        mt_mtm_layer(b, (uint32_t)index, row);
        const char *op = MT_OPS_LAYER_NAMES;
        for (int32_t k = 1; k < row[MTM_LROW_OP]; ++k) {
            while (*op++ != ';') {
            }
        }
        size_t op_n = 0;
        while (op[op_n] != ';') {
            op_n++;
        }
        uint32_t nlen = 0;
        const uint8_t *name = mt_mtm_layer_name(b, len, (uint32_t)index, &nlen);
        char buf[320];
        size_t pos = mt_msg_put_str(buf, sizeof buf, 0, "mtm_validate: layer ");
        pos = mt_msg_put_int(buf, sizeof buf, pos, index);
        pos = mt_msg_put_str(buf, sizeof buf, pos, " '");
        for (uint32_t k = 0; name && k < nlen && name[k] && pos < sizeof buf - 3; ++k) {
            buf[pos++] = name[k] < 0x80 ? (char)name[k] : '?';
        }
        pos = mt_msg_put_str(buf, sizeof buf, pos, "'");
        pos = mt_put_left_out(buf, sizeof buf, pos, op, op_n);
        nlr_raise(mp_obj_new_exception_arg1(&mp_type_ValueError, mp_obj_new_str(buf, pos)));
    }
#endif
    char what[MT_MSG_MAX];
    size_t pos = mt_msg_put_str(what, sizeof what, 0, msg);
    if (where == MTM_WHERE_TENSOR) {
        pos = mt_msg_put_str(what, sizeof what, pos, " (tensor ");
        pos = mt_msg_put_int(what, sizeof what, pos, index);
        pos = mt_msg_put_str(what, sizeof what, pos, ")");
    } else if (where == MTM_WHERE_LAYER) {
        uint32_t nlen = 0;
        const uint8_t *name = mt_mtm_layer_name(b, len, (uint32_t)index, &nlen);
        pos = mt_msg_put_str(what, sizeof what, pos, " (layer ");
        pos = mt_msg_put_int(what, sizeof what, pos, index);
        if (name) {
            pos = mt_msg_put_str(what, sizeof what, pos, " '");
            for (uint32_t k = 0; k < nlen && name[k] && pos < MT_MSG_MAX - 3; ++k) {
                // the name is not validated yet: non-ASCII bytes as '?' keep the message valid UTF-8
                what[pos++] = name[k] < 0x80 ? (char)name[k] : '?';
            }
            pos = mt_msg_put_str(what, sizeof what, pos, "'");
        }
        pos = mt_msg_put_str(what, sizeof what, pos, ")");
    }
    what[pos < MT_MSG_MAX ? pos : MT_MSG_MAX - 1] = 0;
    MT_VALUE_ERR(fn, NULL, what);
}

// mtm_view(view, typecode): `view`, a memoryview of 1-byte items over 4 * n bytes of a
// model (memoryview(buf)[off:off + 4 * n]), retyped in place to n int32 (typecode
// ord('i')) or float32 (ord('f')) items: the zero-copy int32 / float32 tensors of a
// model loaded from a bytes-like object (frozen bytes, flash), which Python cannot
// make (no memoryview.cast). The items pointer stays at the start of the buffer
// (the GC keeps a block alive only through pointers to its start); the offset,
// counted in items, is what changes. Returns `view`.
static mp_obj_t mod_mtm_view(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_view";
    (void)n_args;
    if (mp_obj_get_type(args[0])->name != MP_QSTR_memoryview) {
        MT_TYPE_ERR(fn, "view", "must be a memoryview");
    }
    const int32_t code = mt_int(fn, "typecode", args[1]);
    if (code != 'i' && code != 'f') {
        MT_VALUE_ERR(fn, "typecode", "must be ord('i') or ord('f')");
    }
    mp_obj_array_t *o = MP_OBJ_TO_PTR(args[0]);
    const int tc = (int)(o->typecode & ~(size_t)MP_OBJ_ARRAY_TYPECODE_FLAG_RW);
    if (!mt_typecode_ok(MT_S8, tc)) {
        MT_VALUE_ERR(fn, "view", "must have 1-byte items");
    }
    if (o->len % 4 != 0 || o->free % 4 != 0 || ((uintptr_t)o->items & 3u) != 0) {
        MT_VALUE_ERR(fn, "view", "must be 4-byte aligned, a multiple of 4 bytes long");
    }
    o->typecode = (o->typecode & MP_OBJ_ARRAY_TYPECODE_FLAG_RW) | (size_t)code;
    o->free /= 4;
    o->len /= 4;
    return args[0];
}

#endif
