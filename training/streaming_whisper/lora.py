"""Low-rank adapters (LoRA, Hu et al. 2021) on the student encoder's linear
layers, for the comparison issue 20 asks for (LoRA against frozen lower
layers and full fine-tuning). Only the adapters learn; `merge` folds them
into the weights before saving, so pulsed reads a plain checkpoint."""
import math

import torch
import torch.nn as nn

# the encoder layer's linear maps (encoder.py's Layer)
TARGETS = ("q", "k", "v", "o", "fc1", "fc2")


class Adapted(nn.Module):
    """`base(x) + scale * x A^T B^T`, B zero at the start (the layer is
    unchanged until it learns)."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base
        self.a = nn.Parameter(torch.empty(rank, base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + (x @ self.a.t() @ self.b.t()) * self.scale

    def merged(self):
        with torch.no_grad():
            self.base.weight += (self.b @ self.a) * self.scale
        return self.base


def adapt(encoder, rank, alpha):
    """Freezes `encoder` and puts adapters on every layer's linear maps;
    returns the adapters' parameters."""
    for p in encoder.parameters():
        p.requires_grad_(False)
    params = []
    for layer in encoder.layers:
        for name in TARGETS:
            a = Adapted(getattr(layer, name), rank, alpha)
            a.to(a.base.weight.device)
            setattr(layer, name, a)
            params += [a.a, a.b]
    return params


def merge(encoder):
    """Folds every adapter into its layer's weight (in place)."""
    for layer in encoder.layers:
        for name in TARGETS:
            m = getattr(layer, name)
            if isinstance(m, Adapted):
                setattr(layer, name, m.merged())
