"""PyTorch -> .mtm converter, the .mtm reader/writer and the oracle runner (run_mtm).

Models are trained for a few seconds on scikit-learn's real handwritten digits
(8x8 images; as 1-D signals of 8 steps x 8 channels for the 1-D model), then
converted, and the int8 file run through the oracle kernels is compared to the
float model.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools import mtm_layout as L
from microtrain_tools.reference import oracle as o
from support.mtm_files import fix_crc
from support.torch_models import Cnn2d, Res1d, as_1d, train_quick

N_TEST = 300


# --------------------------------------------------------------------------
# data and models


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]  # (N, 1, 8, 8)
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    return x[:1400], y[:1400], x[1400:1400 + N_TEST], y[1400:1400 + N_TEST]


@pytest.fixture(scope="module")
def cnn2d(digits):  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    xtr, ytr, _, _ = digits
    return train_quick(Cnn2d(), xtr, ytr)


@pytest.fixture(scope="module")
def res1d(digits):  # type: ignore[no-untyped-def]
    torch.manual_seed(2)
    xtr, ytr, _, _ = digits
    return train_quick(Res1d(), as_1d(xtr), ytr)


@pytest.fixture(scope="module")
def cnn2d_file(cnn2d, digits) -> bytes:  # type: ignore[no-untyped-def]
    return mtm.write(cv.convert(cnn2d, digits[0][:256], progress=False))


def _parity(model: nn.Module, data: bytes, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float]:
    with torch.no_grad():
        ref = model(x).numpy().astype(np.float64)
    q = cv.run_mtm(data, x)
    deq = cv.dequantize_output(data, q)
    agree = float((deq.argmax(1) == ref.argmax(1)).mean())
    acc_f = float((ref.argmax(1) == y.numpy()).mean())
    acc_q = float((deq.argmax(1) == y.numpy()).mean())
    err = float(np.abs(deq - ref).mean() / np.abs(ref).mean())
    print(f"agree={agree:.3f} float_acc={acc_f:.3f} int8_acc={acc_q:.3f} rel_err={err:.4f}")
    assert acc_f > 0.9, "the float model did not train"
    assert agree >= 0.97
    assert acc_q >= acc_f - 0.02
    assert err < 0.06
    return agree, acc_f, acc_q


# --------------------------------------------------------------------------
# conversion on real data


def test_cnn2d_digits_parity(cnn2d, cnn2d_file, digits) -> None:  # type: ignore[no-untyped-def]
    _, _, xte, yte = digits
    m = mtm.read(cnn2d_file)
    ops = [mtm.Op(ly.op).name + ("" if ly.act == 0 else f"+{mtm.Act(ly.act).name}") for ly in m.layers]
    assert ops == ["CONV2D+RELU", "CONV2D+RELU6", "CONV2D+RELU", "MAXPOOL", "CONV2D+RELU", "AVGPOOL",
                   "LINEAR+RELU", "LINEAR"]
    assert [ly.name for ly in m.layers][:3] == ["features.0", "features.3", "features.6"]
    assert m.layers[0].fused == "features.1,features.2"
    assert m.layers[1].params[12] == 8  # depthwise groups
    _parity(cnn2d, cnn2d_file, xte, yte)


def test_res1d_digits_parity(res1d, digits) -> None:  # type: ignore[no-untyped-def]
    xtr, _, xte, yte = digits
    data = mtm.write(cv.convert(res1d, as_1d(xtr[:256]), progress=False))
    m = mtm.read(data)
    add = m.layer("add")
    assert add.op == mtm.Op.ADD and add.act == mtm.Act.RELU
    conv1 = m.layer("conv1")
    assert add.inputs[0] == conv1.output  # the skip connection reads conv1's output again
    assert m.tensors[m.input].shape == (1, 8, 8) and m.tensors[m.input].signal_1d
    assert conv1.params[6] == 1 and conv1.params[0] == 1  # conv1d is H = 1
    _parity(res1d, data, as_1d(xte), yte)


def test_percentile_calibration(res1d, digits) -> None:  # type: ignore[no-untyped-def]
    xtr, _, xte, yte = digits
    mm = cv.convert(res1d, as_1d(xtr[:256]), progress=False)
    mp = cv.convert(res1d, as_1d(xtr[:256]), method="percentile", percentile=99.0, progress=False)
    s_mm = [t.scale for t in mm.tensors if t.kind == mtm.Kind.ACTIVATION]
    s_mp = [t.scale for t in mp.tensors if t.kind == mtm.Kind.ACTIVATION]
    assert all(b <= a for a, b in zip(s_mm, s_mp, strict=True)) and any(b < a for a, b in zip(s_mm, s_mp,
                                                                                              strict=True))
    q = cv.run_mtm(mtm.write(mp), as_1d(xte))
    with torch.no_grad():
        ref = res1d(as_1d(xte)).numpy()
    assert (q.argmax(1) == ref.argmax(1)).mean() >= 0.95


def test_weights_biases_multipliers(cnn2d, cnn2d_file) -> None:  # type: ignore[no-untyped-def]
    """File weights dequantise to the BN-folded torch weights; flatten permutes CHW -> HWC columns."""
    m = mtm.read(cnn2d_file)
    conv = m.layer("features.0")
    bn = cnn2d.features[1]
    f = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy().astype(np.float64)
    w_ref = cnn2d.features[0].weight.detach().numpy().astype(np.float64) * f[:, None, None, None]
    w_ref = w_ref.transpose(0, 2, 3, 1)  # OHWI
    w = m.data(conv.weight).astype(np.float64)
    s_w = m.data(m.tensors[conv.weight].qscales).astype(np.float64)
    assert np.abs(w).max() == 127
    assert np.all(np.abs(w * s_w[:, None, None, None] - w_ref) <= s_w[:, None, None, None] / 2 + 1e-9)
    s_in, s_out = m.tensors[conv.inputs[0]].scale, m.tensors[conv.output].scale
    for c in range(len(s_w)):
        assert (int(m.data(conv.mult)[c]), int(m.data(conv.shift)[c])) == \
            o.quantize_multiplier(s_in * s_w[c] / s_out)
    b_ref = (cnn2d.features[0].bias.detach().numpy() - bn.running_mean.numpy()) * f + bn.bias.detach().numpy()
    assert np.all(np.abs(m.data(conv.bias) * s_in * s_w - b_ref) <= s_in * s_w / 2 + 1e-9)
    # fc1 reads the (2, 2, 16) NHWC tensor flat: column (y*2 + x)*16 + c is torch column c*4 + y*2 + x
    fc1 = m.layer("fc1")
    assert m.tensors[fc1.inputs[0]].shape == (2, 2, 16)
    wt = cnn2d.fc1.weight.detach().numpy().astype(np.float64)
    wf = m.data(fc1.weight).astype(np.float64) * m.data(m.tensors[fc1.weight].qscales)[:, None]
    s = m.data(m.tensors[fc1.weight].qscales)[:, None]
    for yy, xx, c in [(0, 0, 0), (0, 1, 5), (1, 0, 15), (1, 1, 7)]:
        col_f, col_t = (yy * 2 + xx) * 16 + c, c * 4 + yy * 2 + xx
        assert np.all(np.abs(wf[:, col_f] - wt[:, col_t]) <= s[:, 0] / 2 + 1e-9)
    # relu6 fused: act_max is the quantised 6 (clipped to 127)
    dw = m.layer("features.3")
    y = m.tensors[dw.output]
    assert dw.params[15:] == [y.zero_point, o.relu6_q6(y.scale, y.zero_point)]


def test_run_mtm_int8_and_float_inputs_agree(cnn2d_file, digits) -> None:  # type: ignore[no-untyped-def]
    x = digits[2][:4]
    q_in = cv.quantize_input(cnn2d_file, x)
    assert q_in.dtype == np.int8 and q_in.shape == (4, 64)
    out_b = cv.run_mtm(cnn2d_file, q_in)
    assert out_b.dtype == np.int8 and out_b.shape == (4, 10)
    assert np.array_equal(out_b, cv.run_mtm(cnn2d_file, x))
    assert np.array_equal(cv.run_mtm(cnn2d_file, q_in[1]), out_b[1])
    with pytest.raises(ValueError, match="needs 64"):
        cv.run_mtm(cnn2d_file, np.zeros(63, dtype=np.int8))


def test_standalone_relu_linear_bn_and_biasless() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, stride=2, bias=False)
            self.pool = nn.MaxPool2d(2, padding=1)
            self.fc = nn.Linear(4 * 2 * 2, 6)
            self.bn = nn.BatchNorm1d(6)
            self.act = nn.ReLU6()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            z = torch.relu(self.pool(y))  # relu after a pool: a standalone RELU layer
            return self.act(self.bn(self.fc(z.reshape(z.shape[0], -1))))

    torch.manual_seed(3)
    model = M()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(200, 2, 7, 7)
    data = mtm.write(cv.convert(model.eval(), x, progress=False))
    m = mtm.read(data)
    assert [mtm.Op(ly.op) for ly in m.layers] == [mtm.Op.CONV2D, mtm.Op.MAXPOOL, mtm.Op.RELU, mtm.Op.LINEAR]
    assert m.layers[-1].act == mtm.Act.RELU6 and m.layers[-1].fused == "bn,act"
    with torch.no_grad():
        ref = model(x).numpy()
    deq = cv.dequantize_output(data, cv.run_mtm(data, x))
    assert np.abs(deq - ref).max() < 0.1 * np.abs(ref).max()


def test_dead_channels_convert_bitexact(cnn2d, digits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A channel whose weight scale would be below the format's 2^-40 floor (a BatchNorm with
    gamma ~ 0, a pruned row scaled to ~0) is a dead channel: it converts (zeros, scale 1.0, its
    bias kept), agrees with PyTorch, and micropython runs the file bit for bit like the oracle."""
    from evals.accuracy import parity as par
    from support.harness import ensure_natmod

    xte = digits[2]

    def dead(ch: int) -> nn.Module:
        net = Cnn2d()
        net.load_state_dict(cnn2d.state_dict())
        net.eval()
        with torch.no_grad():
            net.features[1].weight[ch] = 1e-13  # folded conv weights ~1e-13: scale < 2^-40, bias = beta
            net.fc1.weight[5] *= 1e-15
            net.features[4].weight[6] = 0.0  # an exactly dead depthwise channel (as before: scale 1.0)
        return net

    def acc(net: nn.Module) -> float:
        with torch.no_grad():
            return float((net(xte).argmax(1) == digits[3]).float().mean())

    # a channel training could have let die: the one whose loss costs the float model least
    ch = max(range(8), key=lambda c: acc(dead(c)))
    net = dead(ch)
    assert float(net.features[1].bias[ch].detach()) != 0.0
    m = cv.convert(net, digits[0][:256], progress=False)
    conv0, fc1 = m.layer("features.0"), m.layer("fc1")
    for ly, c in ((conv0, ch), (fc1, 5), (m.layer("features.3"), 6)):
        w = m.tensors[ly.weight]
        assert w.qscales is not None
        assert float(m.data(w.qscales)[c]) == 1.0 and not m.data(ly.weight)[c].any()
    b0 = m.data(conv0.bias)[ch]
    assert b0 != 0 and abs(int(b0)) < 2**30  # the dead channel's output (its bias) is representable
    data = mtm.write(m)
    with torch.no_grad():
        ref = net(xte).numpy().astype(np.float64)
    deq = cv.dequantize_output(data, cv.run_mtm(data, xte))
    agree = float((deq.argmax(1) == ref.argmax(1)).mean())
    err = float(np.abs(deq - ref).mean() / np.abs(ref).mean())
    print(f"dead channel {ch}: float acc {acc(net):.3f}, int8 top-1 agreement {agree:.3f}, rel err {err:.4f}")
    assert agree >= 0.97 and err < 0.06  # the float model, dead channels and all
    path = tmp_path / "dead.mtm"
    path.write_bytes(data)
    q = cv.quantize_input(m, xte)
    ensure_natmod()
    dev, _ = par.run_device(path, q, tmp_path, "dead", progress=False)
    assert np.array_equal(dev, cv.run_mtm(m, q))


# --------------------------------------------------------------------------
# file format


def test_round_trip(cnn2d_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = mtm.read(cnn2d_file)
    assert mtm.write(m) == cnn2d_file
    path = tmp_path / "m.mtm"
    mtm.save(m, path)
    assert path.read_bytes() == cnn2d_file
    m2 = mtm.load(path)
    assert m2.tensors == m.tensors and m2.layers == m.layers
    # layout facts the C loader relies on
    hdr = struct.unpack_from("<4sHHIIIIIIIIIIIIII", cnn2d_file)
    assert hdr[0] == b"MTMF" and hdr[1:3] == (1, 0) and hdr[5] == len(cnn2d_file)
    d_off = hdr[12]
    lt_off = hdr[9]
    for j, ly in enumerate(m.layers):
        entry = lt_off + mtm.LAYER_ENTRY * j
        desc = np.frombuffer(cnn2d_file, dtype="<i4", count=len(ly.params), offset=entry + mtm.PARAMS_OFF)
        assert list(desc) == ly.params and (entry + mtm.PARAMS_OFF) % 8 == 0
    for i in range(len(m.tensors)):
        entry = mtm.HEADER_SIZE + mtm.TENSOR_ENTRY * i
        off, ln = struct.unpack_from("<II", cnn2d_file, entry + L.TENSOR_OFF["data_off"])
        if ln:
            assert off % 8 == 0 and off >= d_off


def test_checkpoint_state_round_trip(cnn2d_file) -> None:  # type: ignore[no-untyped-def]
    m = mtm.read(cnn2d_file)
    fc2 = m.layer("fc2")
    w = m.tensors[fc2.weight]
    m.trained, m.has_state, m.train_steps = True, True, 123
    fc2.trained = True
    m.tensors.append(mtm.Tensor(mtm.DType.FLOAT32, w.shape, mtm.Kind.STATE,
                                data=np.ones(w.shape, dtype=np.float32)))
    fc2.state[0] = len(m.tensors) - 1
    m2 = mtm.read(mtm.write(m))
    assert m2.trained and m2.train_steps == 123 and m2.layer("fc2").trained
    assert np.array_equal(m2.data(m2.layer("fc2").state[0]), np.ones(w.shape, dtype=np.float32))
    fc2.state[1] = len(m.tensors) - 1  # wrong shape (and referenced twice)
    with pytest.raises(ValueError, match="fc2"):
        mtm.write(m)


@pytest.mark.parametrize("case", ["truncated", "truncated_header", "magic", "version", "crc", "offset",
                                  "op", "shape", "align", "name", "extra_byte"])
def test_corrupted_files(cnn2d_file, case) -> None:  # type: ignore[no-untyped-def]
    b = bytearray(cnn2d_file)
    t0 = mtm.HEADER_SIZE  # first tensor entry (the input activation)
    n_t = struct.unpack_from("<I", b, L.HEADER_OFF["n_tensors"])[0]
    lt = t0 + mtm.TENSOR_ENTRY * n_t
    w_entry = t0 + mtm.TENSOR_ENTRY * next(i for i, t in enumerate(mtm.read(cnn2d_file).tensors)
                                           if t.data is not None)
    match = {
        "truncated": "total_len", "truncated_header": "too short", "magic": "magic", "version": "version",
        "crc": "CRC", "offset": "out of range", "op": "unknown op", "shape": "shape|qscales|values",
        "align": "aligned", "name": "name|string", "extra_byte": "total_len",
    }[case]
    if case == "truncated":
        b = b[:-100]
    elif case == "truncated_header":
        b = b[:40]
    elif case == "magic":
        b[0:4] = b"MTMX"
    elif case == "version":
        struct.pack_into("<H", b, 4, 2)
    elif case == "crc":
        b[len(b) // 2 + 3] ^= 0x40
    elif case == "offset":
        struct.pack_into("<I", b, w_entry + 24, (len(b) + 4096) & ~7)
        fix_crc(b)
    elif case == "op":
        b[lt] = 99
        fix_crc(b)
    elif case == "shape":
        struct.pack_into("<I", b, w_entry + 8, 7)
        fix_crc(b)
    elif case == "align":
        off = struct.unpack_from("<I", b, w_entry + L.TENSOR_OFF["data_off"])[0]
        struct.pack_into("<I", b, w_entry + 24, off + 4)
        fix_crc(b)
    elif case == "name":
        struct.pack_into("<I", b, lt + 12, 10_000)
        fix_crc(b)
    elif case == "extra_byte":
        b = b + b"\0"
    with pytest.raises(ValueError, match=match):
        mtm.read(bytes(b))


def test_semantic_corruption_caught_with_valid_crc(cnn2d_file) -> None:  # type: ignore[no-untyped-def]
    m = mtm.read(cnn2d_file)
    lt = mtm.HEADER_SIZE + mtm.TENSOR_ENTRY * len(m.tensors)
    cases = {
        "act_min": (lt + mtm.PARAMS_OFF + 4 * 15, 5),  # layer 0 act_min != out_zp
        "in_zp": (lt + mtm.PARAMS_OFF + 4 * 13, 17),  # != input zero point
        "groups": (lt + mtm.PARAMS_OFF + 4 * 12, 3),  # in_c 1 not divisible
        "in_h": (lt + mtm.PARAMS_OFF, 9),  # descriptor disagrees with the input shape
        "input": (52, 2),  # the model input is now a weight
    }
    for what, (off, val) in cases.items():
        b = bytearray(cnn2d_file)
        struct.pack_into("<i", b, off, val)
        with pytest.raises(ValueError):
            mtm.read(bytes(fix_crc(b)))
        del what
    # negative multiplier in the data blob
    b = bytearray(cnn2d_file)
    mult = m.layers[0].mult
    off = struct.unpack_from("<I", b, mtm.HEADER_SIZE + mtm.TENSOR_ENTRY * mult + L.TENSOR_OFF["data_off"])[0]
    struct.pack_into("<i", b, off, -5)
    with pytest.raises(ValueError, match="negative multiplier"):
        mtm.read(bytes(fix_crc(b)))


def test_random_mutations_raise_value_error_only(cnn2d_file) -> None:  # type: ignore[no-untyped-def]
    """Seeded byte mutations of the tables (CRC fixed) are rejected with ValueError or still valid."""
    rng = np.random.default_rng(7)
    m = mtm.read(cnn2d_file)
    tables_end = mtm.HEADER_SIZE + mtm.TENSOR_ENTRY * len(m.tensors) + mtm.LAYER_ENTRY * len(m.layers)
    rejected = 0
    for _ in range(400):
        b = bytearray(cnn2d_file)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, tables_end))
            b[pos] = int(rng.integers(0, 256))
        try:
            mm = mtm.read(bytes(fix_crc(b)))
        except ValueError:
            rejected += 1
            continue
        again = mtm.read(mtm.write(mm))  # an accepted file is fully valid and re-writable
        assert again.tensors == mm.tensors and again.layers == mm.layers
    assert rejected > 300


def test_writer_validates() -> None:
    t_in = mtm.Tensor(mtm.DType.INT8, (4,), mtm.Kind.ACTIVATION, mtm.Quant.PER_TENSOR, 0.5, 0)
    t_out = mtm.Tensor(mtm.DType.INT8, (4,), mtm.Kind.ACTIVATION, mtm.Quant.PER_TENSOR, 0.5, 0)
    relu = mtm.Layer(mtm.Op.RELU, "r", [0], 1, [4, 0])
    assert mtm.read(mtm.write(mtm.Model([t_in, t_out], [relu], 0, 1))).layers[0].name == "r"
    bad = mtm.Layer(mtm.Op.RELU, "r", [0], 1, [4, 3])  # zp != tensor zero point
    with pytest.raises(ValueError, match="layer 0 'r'.*zp"):
        mtm.write(mtm.Model([t_in, t_out], [bad], 0, 1))
    t_bad = mtm.Tensor(mtm.DType.INT8, (4,), mtm.Kind.ACTIVATION, mtm.Quant.PER_TENSOR, 0.5, 200)
    with pytest.raises(ValueError, match="zero point"):
        mtm.write(mtm.Model([t_in, t_bad], [relu], 0, 1))


# --------------------------------------------------------------------------
# unsupported models


@pytest.mark.parametrize("model,pattern", [
    (nn.Sequential(nn.Conv2d(1, 4, 3), nn.GELU(approximate="tanh")),
     r"layer '1' \(GELU\).*approximate='none'"),
    (nn.Sequential(nn.Conv2d(1, 4, 1, dilation=256)), r"layer '0' \(Conv2d\): dilation \(256, 256\): only "
                                                       r"1..255"),
    (nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, padding_mode="reflect")), r"layer '0' \(Conv2d\).*reflect"),
    (nn.Sequential(nn.Conv2d(1, 4, 3), nn.AvgPool2d(2, padding=1)),
     r"layer '1' \(AvgPool2d\).*count_include"),
    (nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(2)), r"layer '1' \(AdaptiveAvgPool2d\)"),
    (nn.Sequential(nn.BatchNorm2d(1), nn.Conv2d(1, 4, 3, padding=1)),
     r"layer '0' \(BatchNorm2d\).*padding 0"),
])
def test_unsupported_named_and_nothing_written(model, pattern, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "out.mtm"
    with pytest.raises(cv.ConvertError, match=pattern):
        cv.convert_to_file(model.eval(), torch.randn(8, 1, 8, 8), path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_convert(cnn2d, digits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.save(cnn2d, tmp_path / "m.pt")
    np.savez(tmp_path / "calib.npz", x=digits[0][:64].numpy())
    calib = str(tmp_path / "calib.npz")
    rc = cv.main([str(tmp_path / "m.pt"), "-o", str(tmp_path / "m.mtm"), "--calib", calib, "-q"])
    assert rc == 0
    m = mtm.load(tmp_path / "m.mtm")
    assert m.layers[-1].name == "fc2"
    rc = cv.main([str(tmp_path / "nope.pt"), "-o", str(tmp_path / "x.mtm"), "--calib",
                  str(tmp_path / "calib.npz"), "-q"])
    assert rc == 2 and not (tmp_path / "x.mtm").exists()
