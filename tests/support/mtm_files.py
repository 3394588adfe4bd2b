"""Helpers for tests that build or damage .mtm files."""

from __future__ import annotations

import copy
import random
import struct
import zlib
from pathlib import Path

import numpy as np

from microtrain_tools import mtm
from microtrain_tools.mtm_layout import HEADER_SIZE, LAYER_ENTRY, TENSOR_ENTRY

__all__ = ["N_MUTATIONS", "fix_crc", "host_verdict", "mutate", "mutation_corpus", "torch_model_files",
           "write_corpus"]

N_MUTATIONS = 3600  # the seeded mutation set of the loader tests (and of make test-mcu)
SEED = 20240611


def fix_crc(b: bytearray) -> bytearray:
    """Recompute the trailing CRC32 of a (possibly modified) .mtm image in place; returns it."""
    if len(b) >= 4:
        struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xFFFFFFFF)
    return b


def torch_model_files() -> list[bytes]:
    import torch

    nn = torch.nn
    F = nn.functional
    from microtrain_tools import convert

    class Res1d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c0 = nn.Conv1d(3, 8, 1)
            self.c1 = nn.Conv1d(3, 8, 3, padding=1)
            self.c2 = nn.Conv1d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 16, 5)

        def forward(self, x):  # noqa: ANN001, ANN202
            a = self.c0(x)
            y = self.c2(F.relu(self.c1(x)))
            s = F.relu(a + y)
            u = F.relu(a) + F.relu6(y)  # a and y have two users: stand-alone RELU / RELU6
            return self.fc(torch.flatten(s + u, 1))

    class Cnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(2, 4, 3, stride=2, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.mp = nn.MaxPool2d(2)
            self.dw = nn.Conv2d(4, 8, 3, padding=1, groups=4)
            self.ap = nn.AvgPool2d(2)
            self.g = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):  # noqa: ANN001, ANN202
            x = self.mp(F.relu6(self.bn(self.c1(x))))
            x = self.ap(F.relu(self.dw(x)))
            return self.fc(torch.flatten(self.g(x), 1))

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(12, 6)
            self.fc2 = nn.Linear(6, 4)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.fc2(F.relu(self.fc1(x)))

    class Lut(nn.Module):  # format 1.1: LUT layers (tables in the weight / bias slots)
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Conv1d(2, 4, 3)
            self.act = nn.Hardswish()
            self.fc = nn.Linear(4 * 6, 3)

        def forward(self, x):  # noqa: ANN001, ANN202
            return torch.sigmoid(self.fc(torch.flatten(F.leaky_relu(self.act(self.c(x)), 0.2), 1)))

    class Attn(nn.Module):  # format 1.4: LAYERNORM, MATMUL (tb 1 and 0), SOFTMAX, MUL on (N, T, D) tokens
        def __init__(self) -> None:
            super().__init__()
            self.e = nn.Linear(4, 8)
            self.ln = nn.LayerNorm(8)
            self.q = nn.Linear(8, 8)
            self.k = nn.Linear(8, 8)
            self.g = nn.Linear(8, 8)
            self.fc = nn.Linear(8 * 6, 3)

        def forward(self, x):  # noqa: ANN001, ANN202
            h = self.ln(self.e(x))
            a = F.softmax(self.q(h) @ self.k(h).transpose(1, 2) / 2.0, dim=-1) @ h
            return self.fc(torch.flatten(a * torch.sigmoid(self.g(a)), 1))

    class MhAttn(Attn):  # format 1.5: MATMULs with heads (13 params), scores (2, 6, 6) per head
        def forward(self, x):  # noqa: ANN001, ANN202
            n = x.size(0)
            h = self.ln(self.e(x))
            q, k, g = (m(h).view(n, 6, 2, 4).transpose(1, 2) for m in (self.q, self.k, self.g))
            a = (F.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ g).transpose(1, 2).reshape(n, 6, 8)
            return self.fc(torch.flatten(a, 1))
    class Gru(nn.Module):  # format 1.5: a GRU layer (its tables in in1), the mean over the steps
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(4, 6, batch_first=True)
            self.fc = nn.Linear(6, 3)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.fc(self.gru(x)[0].mean(1))

    class Lstm(nn.Module):  # format 1.5: an LSTM layer (its tables in in1), the mean over the steps
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(4, 5, batch_first=True)
            self.fc = nn.Linear(5, 3)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.fc(self.lstm(x)[0].mean(1))

    torch.manual_seed(0)
    out = []
    for cls, shape in ((Res1d, (8, 3, 16)), (Cnn, (8, 2, 16, 16)), (Mlp, (8, 12)), (Lut, (8, 2, 8)),
                       (Attn, (8, 6, 4)), (MhAttn, (8, 6, 4)), (Gru, (8, 5, 4)), (Lstm, (8, 5, 4))):
        m = convert.convert(cls().eval(), torch.randn(*shape), progress=False)
        out.append(m)
    # a checkpoint: TRAINED + HAS_STATE with all four state slots of the last layer
    ck = out[2]
    ck.trained, ck.has_state, ck.train_steps = True, True, 7
    ly = ck.layers[-1]
    ly.trained = True
    rng = np.random.default_rng(1)
    for s, idx in enumerate((ly.weight, ly.bias, ly.weight, ly.bias)):
        shape = ck.tensors[idx].shape
        ck.tensors.append(mtm.Tensor(mtm.DType.FLOAT32, shape, mtm.Kind.STATE, mtm.Quant.NONE,
                                     data=rng.standard_normal(shape).astype(np.float32)))
        ly.state[s] = len(ck.tensors) - 1
    # a format 1.3 Adam checkpoint: masters, first and second moments (state[0..6)) of a conv
    # (rank-4 weights) and a linear layer, and the trainer record with beta1^t, beta2^t
    ad = copy.deepcopy(out[1])
    ad.trained, ad.has_state, ad.train_steps = True, True, 3
    ad.trainer_rng, ad.adam_bt = 0x1234ABCD, (0x3F3A9FBD, 0x3F7F3B97)  # f32 0.9^3, 0.999^3
    for ly in (ad.layer("dw"), ad.layers[-1]):
        ly.trained = True
        for s in range(6):
            shape = ad.tensors[ly.bias if s & 1 else ly.weight].shape  # type: ignore[index]
            data = rng.standard_normal(shape).astype(np.float32)
            ad.tensors.append(mtm.Tensor(mtm.DType.FLOAT32, shape, mtm.Kind.STATE, mtm.Quant.NONE,
                                         data=np.abs(data) if s >= 4 else data))
            ly.state[s] = len(ad.tensors) - 1
    out.append(ad)
    return [mtm.write(m) for m in out]


def _fields(b: bytes) -> list[tuple[int, str]]:
    """(offset, struct code) of every header, tensor-entry and layer-entry field."""
    n_t, n_l = struct.unpack_from("<I", b, 20)[0], struct.unpack_from("<I", b, 28)[0]
    out = [(o, "I") for o in range(4, HEADER_SIZE, 4)] + [(4, "H"), (6, "H")]
    for i in range(n_t):
        e = HEADER_SIZE + TENSOR_ENTRY * i
        out += [(e + k, "B") for k in range(4)] + [(e + k, "I") for k in range(4, TENSOR_ENTRY, 4)]
    lt = HEADER_SIZE + TENSOR_ENTRY * n_t
    for j in range(n_l):
        e = lt + LAYER_ENTRY * j
        out += [(e + k, "B") for k in range(4)] + [(e + k, "I") for k in range(4, LAYER_ENTRY, 4)]
    return out


def _interesting(rng: random.Random, old: int, code: str, b: bytes) -> int:
    n_t = struct.unpack_from("<I", b, 20)[0]
    bits = {"B": 8, "H": 16, "I": 32}[code]
    mask = (1 << bits) - 1
    choices = [0, 1, 2, 3, 4, 7, 8, mask, mask - 1, 0x7FFFFFFF, 0x80000000, 65535, 65536, 32768, 32769,
               old + 1, old - 1, old + 8, old - 8, old * 2, old ^ (1 << rng.randrange(bits)),
               rng.randrange(n_t + 2), len(b), len(b) - 4, len(b) + 4, 127, 128, -128, -129, 255, 256,
               31, 32, -31, -32, 22, 23, 0x3F800000, 0x7FC00000, 0x7F800000, 0xBF800000, 0x00000001,
               1 << 30, (1 << 30) + 1, rng.getrandbits(bits),
               # the runtime limits: scales 2^-40..2^40 (float32 bits), classes, gap hw, grad terms
               87 << 23, (87 << 23) - 1, 167 << 23, (167 << 23) + 1, 32767, 131071, 131072]
    return rng.choice(choices) & mask


def mutate(rng: random.Random, base: bytes, valid: list[bytes]) -> tuple[str, bytes]:
    b = bytearray(base)
    kind = rng.choices(["flip", "flip_crc", "trunc", "extend", "field", "field2", "data", "pool", "splice"],
                       [5, 10, 4, 4, 40, 15, 10, 7, 5])[0]
    if kind in ("flip", "flip_crc"):
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(b))
            b[k] ^= 1 << rng.randrange(8)
        return kind, bytes(fix_crc(b) if kind == "flip_crc" else b)
    if kind in ("trunc", "extend"):
        if kind == "trunc":
            b = b[:rng.randrange(len(b))]
        else:
            extra = rng.choice([1, 4, 8, 64])
            b += bytes(rng.getrandbits(8) if rng.random() < 0.5 else 0 for _ in range(extra))
        if len(b) >= 20 and rng.random() < 0.7:  # keep total_len consistent to get past it
            struct.pack_into("<I", b, 16, len(b))
        return kind, bytes(fix_crc(b) if rng.random() < 0.8 else b)
    if kind in ("field", "field2"):
        fl = _fields(base)
        for _ in range(1 if kind == "field" else rng.randint(2, 3)):
            off, code = rng.choice(fl)
            old = struct.unpack_from("<" + code, b, off)[0]
            struct.pack_into("<" + code, b, off, _interesting(rng, old, code, bytes(b)))
        return kind, bytes(fix_crc(b) if rng.random() < 0.95 else b)
    if kind == "data":  # blob values: bias, mult, shift, qscales, gaps
        d_off, d_len = struct.unpack_from("<II", b, 44)
        if d_len >= 4:
            k = d_off + 4 * rng.randrange(d_len // 4)
            v = rng.choice([0, 0xFFFFFFFF, 0x80000000, (1 << 30) + 1, 0xC0000000 - 1, 32, 0xFFFFFFE0 - 1,
                            0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 1, rng.getrandbits(32),
                            87 << 23, (87 << 23) - 1, 167 << 23, (167 << 23) + 1])
            struct.pack_into("<I", b, k, v)
        return kind, bytes(fix_crc(b))
    if kind == "pool":  # string pool: names, NULs, UTF-8, duplicates
        s_off, s_len = struct.unpack_from("<II", b, 36)
        n_t, n_l = struct.unpack_from("<I", b, 20)[0], struct.unpack_from("<I", b, 28)[0]
        lt = HEADER_SIZE + TENSOR_ENTRY * n_t
        r = rng.random()
        if r < 0.5 and s_len > 1:
            k = s_off + rng.randrange(s_len)
            b[k] = rng.choice([0, 0x80, 0xC0, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF, ord("a"), ord("%")])
        elif n_l >= 2:  # copy another layer's name (or fused) reference
            j, k = rng.sample(range(n_l), 2)
            src = lt + LAYER_ENTRY * k + rng.choice([8, 16])
            dst = lt + LAYER_ENTRY * j + rng.choice([8, 16])
            b[dst:dst + 8] = b[src:src + 8]
        return kind, bytes(fix_crc(b))
    other = rng.choice(valid)  # splice: a table entry of another file
    n = rng.choice([TENSOR_ENTRY, LAYER_ENTRY, HEADER_SIZE])
    if len(other) > n + HEADER_SIZE and len(b) > n + HEADER_SIZE:
        src = rng.randrange(HEADER_SIZE, len(other) - n - 4)
        dst = rng.randrange(HEADER_SIZE, len(b) - n - 4)
        b[dst:dst + n] = other[src:src + n]
    return kind, bytes(fix_crc(b))


def write_corpus(path: Path, files: list[bytes]) -> None:
    parts = [b"MTMC", struct.pack("<I", len(files))]
    for f in files:
        parts += [struct.pack("<I", len(f)), f]
    path.write_bytes(b"".join(parts))


def host_verdict(b: bytes) -> tuple[bool, str]:
    """(accepted, message) of the host reader ``mtm.read``: the reference every loader is held to."""
    try:
        mtm.read(b)
    except ValueError as e:
        return False, str(e)
    return True, ""


def mutation_corpus(valid: list[bytes], n: int = N_MUTATIONS) -> tuple[list[str], list[bytes]]:
    """The seeded mutations of ``valid``: (kind of each mutation, file bytes)."""
    rng = random.Random(SEED)
    kinds, files = [], []
    for _ in range(n):
        k, f = mutate(rng, rng.choice(valid), valid)
        kinds.append(k)
        files.append(f)
    return kinds, files
