"""One small model per op the idiom models do not cover (channel concatenation, nearest
upsampling, transposed convs, element-wise products, attention, a GRU, an LSTM), for the
`make coverage` runner: it converts, runs and fine-tunes each, like the MLPerf Tiny models.

``models()`` returns ``(name, module, input shape CHW)`` triples; the modules are untrained
(the runner trains them briefly on its data). Each ends in a 4x4 average pooling of its 14x14
features and a Linear over the 3x3 grid to 10 classes: a global pooling there left the digits
barely separable (the float models reached 30-85 % on held-out digits, too close to ties for a
meaningful agreement with the int8 model).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CatSkip(nn.Module):
    """DenseNet-style block: every conv sees the concatenation of the ones before it."""

    def __init__(self, c_in: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c_in, 8, 3, padding=1)
        self.c2 = nn.Conv2d(c_in + 8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(c_in + 16, 16, 1)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.cat([x, F.relu(self.c1(x))], 1)
        b = torch.cat([a, F.relu(self.c2(a))], 1)
        y = F.max_pool2d(F.relu(self.c3(b)), 2)
        return self.fc(torch.flatten(F.avg_pool2d(y, 4), 1))


class UpNet(nn.Module):
    """U-Net-style: down by a strided conv, back up by nearest upsampling, joined to the skip."""

    def __init__(self, c_in: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c_in, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.c2 = nn.Conv2d(24, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.c1(x))
        d = F.relu(self.down(a))
        y = F.relu(self.c2(torch.cat([a, self.up(d)], 1)))
        return self.fc(torch.flatten(F.avg_pool2d(y, 4), 1))


class InterpNet(nn.Module):
    """F.interpolate(scale_factor=2, mode="nearest") back to the input size after a strided conv."""

    def __init__(self, c_in: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c_in, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(F.relu(self.c1(x)), scale_factor=2, mode="nearest")
        y = F.max_pool2d(F.relu(self.c2(y)), 2)
        return self.fc(torch.flatten(F.avg_pool2d(y, 4), 1))


class DeconvNet(nn.Module):
    """A decoder step: nn.ConvTranspose2d(stride 2) after a strided conv, then a classifier."""

    def __init__(self, c_in: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c_in, 16, 3, stride=2, padding=1)
        self.t1 = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn(self.t1(F.relu(self.c1(x)))))
        y = F.relu(self.c2(y))
        return self.fc(torch.flatten(F.avg_pool2d(y, 4), 1))


class SENet(nn.Module):
    """Squeeze-and-excitation (MobileNetV3-style): the channels reweighted by
    x * hardsigmoid(fc(relu(fc(mean(x))))), a product broadcast over the positions."""

    def __init__(self, c_in: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c_in, 16, 3, stride=2, padding=1)
        self.se1 = nn.Linear(16, 4)
        self.se2 = nn.Linear(4, 16)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.c1(x))
        s = F.hardsigmoid(self.se2(F.relu(self.se1(a.mean((2, 3))))))
        y = F.relu(self.c2(a * s.view(-1, 16, 1, 1)))
        return self.fc(torch.flatten(F.avg_pool2d(y, 4), 1))


class Encoder(nn.Module):
    """A transformer encoder block over the image's rows as tokens (`side` tokens of `side` values): token
    embedding, pre-norm single-head self-attention (LayerNorm, q / k / v, softmax(q k^T / sqrt(d)),
    att v, output projection, residual), pre-norm MLP with its residual, a classifier over the
    tokens and their mean."""

    def __init__(self, c_in: int = 1, d: int = 16, side: int = 28) -> None:
        super().__init__()
        self.d, self.side = d, side
        self.embed = nn.Linear(side, d)
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 2 * d)
        self.ff2 = nn.Linear(2 * d, d)
        self.fc = nn.Linear(side * d, 10)
        self.fc_mean = nn.Linear(d, 10)

    def attend(self, a: torch.Tensor) -> torch.Tensor:
        att = F.softmax(self.q(a) @ self.k(a).transpose(1, 2) / self.d**0.5, dim=-1)
        return att @ self.v(a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.view(x.size(0), self.side, self.side))
        h = h + self.o(self.attend(self.ln1(h)))
        h = h + self.ff2(F.relu(self.ff1(self.ln2(h))))
        return self.fc(torch.flatten(h, 1)) + self.fc_mean(h.mean(1))


class MhaEncoder(Encoder):
    """The encoder block with the usual hand-written multi-head self-attention: q, k, v split into
    `heads` heads of d / heads values (view(N, T, H, Dh).transpose(1, 2)), softmax(q k^T / sqrt(Dh))
    per head, the weighted values transposed back into the tokens."""

    def __init__(self, c_in: int = 1, d: int = 16, side: int = 28, heads: int = 2) -> None:
        super().__init__(c_in, d, side)
        self.heads = heads

    def attend(self, a: torch.Tensor) -> torch.Tensor:
        n, dh = a.size(0), self.d // self.heads
        q, k, v = (m(a).view(n, self.side, self.heads, dh).transpose(1, 2) for m in (self.q, self.k, self.v))
        att = F.softmax(q @ k.transpose(-2, -1) / dh**0.5, dim=-1)
        return (att @ v).transpose(1, 2).reshape(n, self.side, self.d)


class CCT(nn.Module):
    """A Compact Convolutional Transformer (Hassani et al.) in small: a conv tokenizer (conv, ReLU, 2x2
    max pool; its map's positions are the tokens, ``flatten(2).transpose(1, 2)``), a pre-norm encoder
    block (multi-head self-attention as MhaEncoder's, an MLP, both residual), a final LayerNorm, and
    sequence pooling: a softmax over the tokens of a Linear score weights them, their weighted sum
    (``w.transpose(1, 2) @ h``) feeds the classifier."""

    def __init__(self, c_in: int = 1, d: int = 16, heads: int = 4, stride: int = 2) -> None:
        super().__init__()
        self.d, self.heads = d, heads
        self.tok = nn.Conv2d(c_in, d, 3, stride=stride, padding=1)
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 2 * d)
        self.ff2 = nn.Linear(2 * d, d)
        self.ln3 = nn.LayerNorm(d)
        self.pool = nn.Linear(d, 1)
        self.fc = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.tok(x)), 2).flatten(2).transpose(1, 2)
        n, t, dh = h.size(0), h.size(1), self.d // self.heads
        a = self.ln1(h)
        q, k, v = (m(a).view(n, t, self.heads, dh).transpose(1, 2) for m in (self.q, self.k, self.v))
        att = F.softmax(q @ k.transpose(-2, -1) / dh**0.5, dim=-1)
        h = h + self.o((att @ v).transpose(1, 2).reshape(n, t, self.d))
        h = self.ln3(h + self.ff2(F.relu(self.ff1(self.ln2(h)))))
        w = F.softmax(self.pool(h), dim=1)
        return self.fc((w.transpose(1, 2) @ h).squeeze(1))


class MbV3Net(nn.Module):
    """A MobileNetV3 block after a hardswish stem: 1x1 expansion and 3x3 depthwise conv with hardswish,
    squeeze-and-excitation with hardsigmoid, 1x1 projection, residual; then the 3x3-grid classifier."""

    def __init__(self, c_in: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(c_in, 16, 3, stride=2, padding=1)
        self.exp = nn.Conv2d(16, 32, 1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.se1 = nn.Linear(32, 8)
        self.se2 = nn.Linear(8, 32)
        self.proj = nn.Conv2d(32, 16, 1)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.hardswish(self.stem(x))
        h = F.hardswish(self.dw(F.hardswish(self.exp(a))))
        s = F.hardsigmoid(self.se2(F.relu(self.se1(h.mean((2, 3))))))
        y = a + self.proj(h * s.view(-1, 32, 1, 1))
        return self.fc(torch.flatten(F.avg_pool2d(y, 4), 1))


class ConvTransformer(nn.Module):
    """A keyword-spotting-style transformer on 1-D windows: a Conv1d front-end (conv, ReLU, 4x max pool),
    its positions as tokens (``transpose(1, 2)``), a pre-norm encoder block with two heads and an MLP,
    the mean over the tokens, a classifier."""

    def __init__(self, c_in: int = 6, d: int = 16, heads: int = 2, n_out: int = 7) -> None:
        super().__init__()
        self.d, self.heads = d, heads
        self.conv = nn.Conv1d(c_in, d, 5, padding=2)
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 2 * d)
        self.ff2 = nn.Linear(2 * d, d)
        self.fc = nn.Linear(d, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool1d(F.relu(self.conv(x)), 4).transpose(1, 2)
        n, t, dh = h.size(0), h.size(1), self.d // self.heads
        a = self.ln1(h)
        q, k, v = (m(a).view(n, t, self.heads, dh).transpose(1, 2) for m in (self.q, self.k, self.v))
        att = F.softmax(q @ k.transpose(-2, -1) / dh**0.5, dim=-1)
        h = h + self.o((att @ v).transpose(1, 2).reshape(n, t, self.d))
        h = h + self.ff2(F.relu(self.ff1(self.ln2(h))))
        return self.fc(h.mean(1))


# the models whose fine-tune is also run in PyTorch float32 (coverage.py's bar and table)
VS_TORCH = ("ops-se", "ops-encoder", "ops-mha-encoder", "ops-cct", "ops-mbv3", "ops-conv1d-tfm",
            "ops-gru_har", "ops-lstm_har")
class GruHar(nn.Module):
    """A GRU over smartwatch windows (T steps of the 6 IMU channels), the mean of its states over the
    steps, a two-layer classifier head."""

    def __init__(self, hidden: int = 48) -> None:
        super().__init__()
        self.gru = nn.GRU(6, hidden, batch_first=True)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.fc2(F.relu(self.fc1(out.mean(1))))


# the GRU's windows: 64 steps (1.28 s at 50 Hz) of the 6 channels, (T, D)
GRU_HAR_SHAPE = (64, 6)


class LstmHar(nn.Module):
    """An LSTM over smartwatch windows (the GRU's), the mean of its states over the steps, a
    two-layer classifier head."""

    def __init__(self, hidden: int = 48) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, hidden, batch_first=True)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.fc2(F.relu(self.fc1(out.mean(1))))


def models(shape: tuple[int, ...] = (1, 28, 28)) -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    """(name, untrained module, input shape CHW, or (T, D) for a sequence): one small model per new op."""
    c = shape[0]
    torch.manual_seed(0)
    return [("ops-concat", CatSkip(c), shape), ("ops-upsample", UpNet(c), shape),
            ("ops-interpolate", InterpNet(c), shape), ("ops-conv-transpose", DeconvNet(c), shape),
            ("ops-se", SENet(c), shape), ("ops-encoder", Encoder(c), shape),
            ("ops-mha-encoder", MhaEncoder(c), shape), ("ops-cct", CCT(c), shape),
            ("ops-mbv3", MbV3Net(c), shape), ("ops-conv1d-tfm", ConvTransformer(), (6, 128)),
            ("ops-gru_har", GruHar(), GRU_HAR_SHAPE), ("ops-lstm_har", LstmHar(), GRU_HAR_SHAPE)]
