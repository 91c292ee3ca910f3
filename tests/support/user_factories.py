"""A user's own model and data factories, as a project outside the trainer would write them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from trainer.config import TrainerConfig


class Sums(Dataset):
    """Item i: a dict batch (HF style): 6 numbers from a per-index generator, target their sum."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.randn(6, generator=torch.Generator().manual_seed(i))
        return {"features": x, "target": x.sum().unsqueeze(0)}


@dataclass
class Output:
    loss: torch.Tensor


class Regressor(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, width), nn.Linear(width, width)])
        self.head = nn.Linear(width, 1)
        self.drop = nn.Dropout(dropout)

    def shard_units(self) -> list[nn.Module]:
        return [self.layers[1]]

    def forward(self, features: torch.Tensor, target: torch.Tensor) -> Output:
        h = features
        for layer in self.layers:
            h = self.drop(torch.relu(layer(h)))
        return Output(F.mse_loss(self.head(h), target))


def build_data(cfg: TrainerConfig) -> Sums:
    return Sums(int(cfg.data.options.get("n", 64)))


def build_model(cfg: TrainerConfig, dataset: Sums) -> Regressor:
    return Regressor(int(cfg.model.options.get("width", 16)), cfg.model.dropout)
