"""float32 linear layers on oneDNN's matmul, their weights packed once into its blocked layout.

`F.linear(x, W)` on the CPU hands x @ W.T to MKL's sgemm, which at a few rows and a weight far larger
than the caches reads poorly: on SmolLM2-135M's 211 layers (2-core AMD EPYC, AVX-512, idle, median of 9)
one pass over all of them took 34 ms at 1 row, 81 ms at 2 and 76 ms at 4, where oneDNN's matmul on
weights packed for it took 26 ms at each of 1, 2 and 4 rows and 31 ms at 16. vLLM's CPU build runs its
float32 layers the same way (`create_onednn_mm`). The numbers are the same up to float32 rounding (the
sums run in another order).

`OneDnnLinear` keeps the float32 weight as `weight` (for whatever reads it; a tied head keeps the tie) and
multiplies by its packed copy `packed`, through the op `labkit::onednn_linear`, which `torch.compile`
calls as it is (inductor has no lowering for a weight packed outside its own freezing pass).

    >>> layer = OneDnnLinear.from_linear(nn.Linear(576, 1536, bias=False))
    >>> layer(torch.randn(2, 576)).shape
    torch.Size([2, 1536])
"""

from __future__ import annotations

import torch
from torch import nn

from labkit.fast.precision import swap_linear_layers


def check_onednn() -> None:
    """Raise a ValueError unless this torch was built with oneDNN (every x86-64 and ARM wheel of PyTorch is)."""
    if not torch.backends.mkldnn.is_available():
        raise ValueError(
            "The onednn step needs PyTorch built with oneDNN (torch.backends.mkldnn.is_available() is False "
            "here); run the model without it, or with q4_1."
        )


@torch.library.custom_op("labkit::onednn_linear", mutates_args=())
def onednn_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """x [M, K] float32 @ W.T + bias -> [M, N], W [N, K] as packed by torch.ops.mkldnn._reorder_linear_weight."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


@onednn_linear.register_fake
def _(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int) -> torch.Tensor:
    return x.new_empty(x.shape[0], out_features)


class OneDnnLinear(nn.Module):
    """y = x @ W.T + b, W float32 [out, in] packed for oneDNN (module doc); x [..., in] float32 -> [..., out]."""

    def __init__(self, weight: nn.Parameter, bias: torch.Tensor | None = None):
        super().__init__()
        check_onednn()
        if weight.dtype != torch.float32 or weight.dim() != 2:
            raise ValueError(
                f"OneDnnLinear packs a 2-D float32 weight, got {weight.dtype} {tuple(weight.shape)}."
            )
        self.out_features, self.in_features = weight.shape
        self.weight = weight  # the layer's own parameter: a head tied to the embedding stays tied
        self.bias = bias
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(
                weight.detach(), None
            )  # oneDNN's layout, a copy

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> OneDnnLinear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"OneDnnLinear takes float32 activations [..., {self.in_features}], got {x.dtype} {tuple(x.shape)}."
            )
        bias = None if self.bias is None else self.bias.detach()
        y = onednn_linear(x.reshape(-1, self.in_features), self.packed, bias, self.out_features)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


def pack_for_onednn(model: nn.Module) -> nn.Module:
    """Every nn.Linear of model.layers and the output head as an OneDnnLinear, in place; returns the model.

    >>> pack_for_onednn(labkit.tiny_model(impl="labkit")).lm_head
    OneDnnLinear(in_features=64, out_features=49152, bias=False)
    """
    check_onednn()
    swap_linear_layers(model.layers, OneDnnLinear.from_linear)
    model.lm_head = OneDnnLinear.from_linear(model.lm_head)
    return model
