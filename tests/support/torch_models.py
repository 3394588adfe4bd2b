"""Small PyTorch models shared by the converter and training tests (trained in seconds on digits)."""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["Cnn2d", "Res1d", "as_1d", "train_quick"]


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
