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


# The op is defined with torch.library.Library rather than torch.library.custom_op: a custom_op's Python
# wrapper cost about 10 us a call (30 against 20 us for oneDNN's op alone, a 576 x 576 layer at 1 row, idle
# 2-core AMD EPYC), 1.3 ms of a decode step's 125 layers; a plain implementation costs about 2.5 us.
_LIBRARY = torch.library.Library("labkit", "FRAGMENT")
_LIBRARY.define("onednn_linear(Tensor x, Tensor packed, Tensor? bias, int out_features) -> Tensor")


def onednn_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """x [M, K] float32 @ W.T + bias -> [M, N], W [N, K] as packed by torch.ops.mkldnn._reorder_linear_weight."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


# CompositeExplicitAutograd, not CPU: the packed weight is an MkldnnCPU tensor, and dispatch follows it
_LIBRARY.impl("onednn_linear", onednn_linear, "CompositeExplicitAutograd")


@torch.library.register_fake("labkit::onednn_linear")
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
        # the op takes no tensor that asks for a gradient: the bias's data, detached once
        self.bias_data = None if bias is None else bias.detach()
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
        y = torch.ops.labkit.onednn_linear(
            x.reshape(-1, self.in_features), self.packed, self.bias_data, self.out_features
        )
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
