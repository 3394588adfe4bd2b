// The hand-written body of conv2d_add_s8_forward (its prologue is generated, mt_bind_gen.h):
// the tile's rows and the overlap tests over the part of the tile it uses.
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_MT_BIND_CONV_H
#define MT_MT_BIND_CONV_H

// conv2d_s8_forward into add_s8_forward, over the add's other input, a block of rows at a time
// (add.c): (desc, x, w, bias, mult, shift, add_desc, side, skip, tile).
static mp_obj_t mod_conv2d_add_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_add_s8_forward";
    mt_conv2d_add_s8_forward_args_t a;
    mt_conv2d_add_s8_forward_args(fn, n_args, args, &a);
    const mt_conv2d_params_t *p = a.p;
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p), nw = mt_conv_w_n(p);
    const int32_t row = p->out_w * p->out_c;
    int32_t rows = (int32_t)mt_udiv_u32((uint32_t)a.tile_n, (uint32_t)row);
    if (rows > p->out_h) {
        rows = p->out_h;
    }
    const size_t used = (size_t)rows * (size_t)row;
    // the conv reads x and w while skip and tile are written: no two may share a byte
    mt_no_overlap(fn, "skip", a.skip, (size_t)nout, "x", a.x, (size_t)nin);
    mt_no_overlap(fn, "skip", a.skip, (size_t)nout, "w", a.w, (size_t)nw);
    mt_no_overlap(fn, "tile", a.tile, used, "x", a.x, (size_t)nin);
    mt_no_overlap(fn, "tile", a.tile, used, "w", a.w, (size_t)nw);
    mt_no_overlap(fn, "tile", a.tile, used, "skip", a.skip, (size_t)nout);
    mt_conv2d_add_s8_forward(p, a.x, a.w, a.bias, a.mult, a.shift, a.add_desc, a.side, a.skip, a.tile, rows);
    return mp_const_none;
}

#endif
