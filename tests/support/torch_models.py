"""Small PyTorch models shared by the converter and training tests (trained in seconds on digits)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["IDIOM_MODELS", "BnNet", "Cnn2d", "FuncPool", "MeanPool", "MiscIdioms", "PadNet", "Res1d", "Sig1d",
           "as_1d", "train_quick"]


class Cnn2d(nn.Module):
    """conv-bn-relu, depthwise(-bn-relu6) + pointwise(-bn-relu), pools, flatten after a conv, linears."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
            nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 16, 3, stride=1, padding=1), nn.ReLU(),
            nn.AvgPool2d(2),
        )
        self.drop = nn.Dropout(0.1)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.features(x), 1)
        return self.fc2(torch.relu(self.fc1(self.drop(x))))


class Res1d(nn.Module):
    """1-D CNN with a residual add: conv-bn-relu, conv-bn, add, relu, pool, global pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(8, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm1d(16)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(16, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm1d(16)
        self.pool = nn.MaxPool1d(2)
        self.conv3 = nn.Conv1d(16, 24, 3, stride=2, padding=1)
        self.gap = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.relu(self.bn1(self.conv1(x)))
        b = self.bn2(self.conv2(a))
        c = self.relu(a + b)
        c = self.relu(self.conv3(self.pool(c)))
        return self.fc(self.gap(c).flatten(1))


def train_quick(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int = 12) -> nn.Module:
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(y)).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def as_1d(x: torch.Tensor) -> torch.Tensor:
    return x[:, 0]  # (N, 8 rows as channels, 8 columns as time)


# --------------------------------------------------------------------------
# everyday PyTorch idioms the converter maps onto the existing kernels (tests/format/test_convert_idioms.py);
# inputs are digits, (N, 1, 8, 8), or as 1-D signals (N, 8, 8)


class FuncPool(nn.Module):
    """Functional forms: F.relu, F.max_pool2d, torch.relu, F.avg_pool2d, x.view(n, -1), x.relu()."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.avg_pool2d(torch.relu(self.c2(x)), kernel_size=2, stride=2)
        x = x.view(x.size(0), -1)
        return self.fc2(self.fc1(x).relu())


class MeanPool(nn.Module):
    """Means as global pooling (keepdim or not), clamp(0, 6), clamp(min=0), F.relu6, squeeze / unsqueeze."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(32, 32, 1)
        self.fc1 = nn.Linear(32, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.clamp(self.c1(x), 0, 6)
        b = F.relu6(self.c2(a))
        g1 = b.mean((2, 3)).unsqueeze(-1).unsqueeze(-1)  # (N, 32, 1, 1)
        g2 = self.c3(b).clamp(min=0).mean([-1, -2], keepdim=True)
        g = torch.flatten(g1 + g2, 1)
        return self.fc2(F.relu(self.fc1(g)))


class PadNet(nn.Module):
    """TensorFlow-style 'same' padding: nn.ZeroPad2d((0, 1, 0, 1)) before a stride-2 conv, F.pad on all
    sides and top-left only into unpadded convs, a global max pool as x.amax((2, 3))."""

    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d((0, 1, 0, 1))
        self.c1 = nn.Conv2d(1, 8, 3, stride=2)
        self.c2 = nn.Conv2d(8, 16, 3)
        self.c3 = nn.Conv2d(16, 16, 2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.c1(self.pad(x)))  # 9 x 9 -> 4 x 4
        x = F.relu(self.c2(F.pad(x, (1, 1, 1, 1))))  # 4 x 4
        x = F.relu(self.c3(F.pad(x, (1, 0, 1, 0))))  # 5 x 5 -> 4 x 4
        return self.fc(torch.amax(x, (2, 3)))


class BnNet(nn.Module):
    """Standalone BatchNorms folded into the next layer: on the input, after a pool, before a flatten, after
    a Linear's ReLU; an nn.Identity, an nn.Dropout2d, and a final nn.Softmax (stripped)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn0 = nn.BatchNorm2d(1)
        self.c1 = nn.Conv2d(1, 8, 3)  # unpadded: the input BatchNorm folds into it exactly
        self.pool = nn.MaxPool2d(2)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout2d(0.1)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.bn3 = nn.BatchNorm1d(32)
        self.ident = nn.Identity()
        self.fc2 = nn.Linear(32, 10)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.c1(self.bn0(x))))  # 8 x 3 x 3
        x = F.relu(self.c2(self.bn1(x)))
        x = self.drop(self.bn2(x)).flatten(1)
        x = self.bn3(F.relu(self.fc1(x)))
        return self.softmax(self.fc2(self.ident(x)))


class Sig1d(nn.Module):
    """1-D signals: F.pad, torch.add(...).relu(), F.max_pool1d, x.add(y), x.mean(-1), F.dropout, a final
    F.softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(8, 16, 3)
        self.c2 = nn.Conv1d(16, 16, 3, padding=1)
        self.c3 = nn.Conv1d(16, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.c1(F.pad(x, (1, 1))))
        b = torch.add(a, self.c2(a)).relu()
        p = F.max_pool1d(b, 2)
        c = p.add(self.c3(p))
        g = F.dropout(c.mean(-1), 0.1, self.training)
        return F.softmax(self.fc(g), dim=1)


class MiscIdioms(nn.Module):
    """nn.ConstantPad2d(1, 0.0), F.hardtanh(x, 0, 6), b += a, F.adaptive_avg_pool2d(x, 1) squeezed,
    nn.AdaptiveMaxPool2d(1) reshaped, a final nn.LogSoftmax."""

    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ConstantPad2d(1, 0.0)
        self.c1 = nn.Conv2d(1, 16, 3)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.c3 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.gmp = nn.AdaptiveMaxPool2d(1)
        self.fc1 = nn.Linear(32, 32)
        self.fc2 = nn.Linear(32, 10)
        self.out = nn.LogSoftmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.hardtanh(self.c1(self.pad(x)), 0.0, 6.0)
        b = self.c2(a)
        b += a
        c = F.relu(self.c3(F.relu(b)))  # 4 x 4
        g = F.adaptive_avg_pool2d(c, 1).squeeze(3).squeeze(2) + self.gmp(c).reshape(c.shape[0], -1)
        return self.out(self.fc2(F.relu(self.fc1(g))))


IDIOM_MODELS: dict[str, type[nn.Module]] = {"funcpool": FuncPool, "meanpool": MeanPool, "pad": PadNet,
                                            "bn": BnNet, "sig1d": Sig1d, "misc": MiscIdioms}
