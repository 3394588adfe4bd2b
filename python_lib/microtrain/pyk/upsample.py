# nearest / zero-insertion upsampling and its grad input (upsample.c).
from microtrain.fmt import MAX_ELEMS
from microtrain.pyk.checks import _chk, _desc, _in8, _nover, _out8
from microtrain.pyk.quant import _dyn


def _dim(v):
    return 1 <= v <= 65535


def _axis_ok(n_in, n_out, f):
    return 1 <= f <= 255 and (n_in - 1) * f + 1 <= n_out <= n_in * f


def _upsample_check(d):
    in_h, in_w, c, out_h, out_w, f_h, f_w, mode, zp = d
    if not (_dim(in_h) and _dim(in_w) and _dim(c) and _dim(out_h) and _dim(out_w)):
        return "in_h, in_w, c, out_h, out_w must be in 1..65535"
    if not (_axis_ok(in_h, out_h, f_h) and _axis_ok(in_w, out_w, f_w)):
        return "f_h, f_w must be in 1..255 with (in - 1) * f + 1 <= out <= in * f"
    if in_h * in_w * c > MAX_ELEMS or out_h * out_w * c > MAX_ELEMS:
        return "tensor too large (more than 2^26 elements)"
    if mode != 0 and mode != 1:
        return "mode must be 0 (nearest) or 1 (zero insertion)"
    if zp < -128 or zp > 127:
        return "zp must be in -128..127"
    return None


def _upsample_desc(fn, desc):
    d = _desc(fn, desc, 9)
    _chk(fn, "desc", _upsample_check(d))
    return d


def upsample_s8_forward(desc, x, y):
    fn = "upsample_s8_forward"
    d = _upsample_desc(fn, desc)
    in_h, in_w, c, out_h, out_w, f_h, f_w, mode, zp = d
    X = _in8(fn, "x", x, in_h * in_w * c)
    nout = out_h * out_w * c
    ym = _out8(fn, "y", y, nout)
    _nover(fn, "y", y, "x", x)
    yv = memoryview(y)
    row = out_w * c
    if mode:
        z = zp & ym
        for i in range(nout):
            y[i] = z
        for iy in range(in_h):
            o = iy * f_h * row
            for ix in range(in_w):
                i = (iy * in_w + ix) * c
                yv[o:o + c] = X[i:i + c]
                o += f_w * c
        return
    for iy in range(in_h):
        oy0 = iy * f_h
        # the first output row of the block, built column block by column block
        o = oy0 * row
        for ix in range(in_w):
            i = (iy * in_w + ix) * c
            for _ in range(f_w if (ix + 1) * f_w <= out_w else out_w - ix * f_w):
                yv[o:o + c] = X[i:i + c]
                o += c
        o = oy0 * row
        for oy in range(oy0 + 1, oy0 + f_h if oy0 + f_h < out_h else out_h):
            yv[oy * row:oy * row + row] = yv[o:o + row]


def upsample_s8_grad_input(desc, e, ein):
    fn = "upsample_s8_grad_input"
    d = _upsample_desc(fn, desc)
    in_h, in_w, c, out_h, out_w, f_h, f_w, mode, zp = d
    E = _in8(fn, "e", e, out_h * out_w * c)
    nin = in_h * in_w * c
    om = _out8(fn, "ein", ein, nin)
    _nover(fn, "ein", ein, "e", e)
    row = out_w * c
    acc = [0] * nin
    if mode:
        for iy in range(in_h):
            o = iy * f_h * row
            for ix in range(in_w):
                i = (iy * in_w + ix) * c
                for k in range(c):
                    acc[i + k] = E[o + k]
                o += f_w * c
        return _dyn(acc, nin, ein, om)
    for oy in range(out_h):
        iy = oy // f_h
        o = oy * row
        for ox in range(out_w):
            i = (iy * in_w + ox // f_w) * c
            for k in range(c):
                acc[i + k] += E[o + k]
            o += c
    return _dyn(acc, nin, ein, om)
