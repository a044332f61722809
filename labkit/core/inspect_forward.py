"""Look inside one forward pass of labkit's Llama: the shape of every tensor, and the attention weights.

Forward hooks record what each module returns (and what `o_proj` receives: the heads' attention
output before they are mixed), so nothing in the model changes. The attention weights are recomputed
from the recorded queries and keys with the model's own RoPE and causal mask, exactly as the model
uses them: `attention_output(trace, layer)` rebuilds the real `o_proj` input from them.

    >>> model, tokenizer = labkit.load_model("smollm2-135m", impl="labkit")
    >>> trace = trace_forward(model, torch.tensor([tokenizer("The capital of France is")["input_ids"]]))
    >>> print(format_shape_table(shape_rows(trace)))        # token ids [1, 5] ... logits [1, 5, 49152]
    >>> attention_weights(trace, layer=0).shape             # [B, n_heads, T, T]
    torch.Size([1, 9, 5, 5])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from labkit.core.arguments import check_int
from labkit.core.attention import apply_rotary, causal_mask, rotary_cos_sin
from labkit.core.doors import check_items, check_record, check_tensor
from labkit.core.llama import Llama, LlamaConfig, check_llama


@dataclass
class ForwardTrace:
    """What one forward pass of labkit's Llama computed, recorded by hooks."""

    config: LlamaConfig  # the model's architecture (head counts, widths)
    input_ids: torch.Tensor  # [B, T] the tokens that went in
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # module name -> output shape
    q: list[torch.Tensor] = field(default_factory=list)  # per layer: q_proj output [B, T, n_heads * D]
    k: list[torch.Tensor] = field(default_factory=list)  # per layer: k_proj output [B, T, n_kv_heads * D]
    v: list[torch.Tensor] = field(default_factory=list)  # per layer: v_proj output [B, T, n_kv_heads * D]
    attn_out: list[torch.Tensor] = field(default_factory=list)  # per layer: o_proj input [B, T, n_heads * D]
    logits: torch.Tensor | None = None  # [B, T, vocab]


def trace_forward(model: Llama, input_ids: torch.Tensor) -> ForwardTrace:
    """Run input_ids [B, T] through labkit's Llama once (no cache) and record every module's output.

    Example: `trace_forward(model, ids).shapes["layers.0.mlp.gate_proj"]` is (1, T, intermediate_size).
    """
    check_llama(model, "trace_forward")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, tokens], got shape {tuple(input_ids.shape)}.")
    trace = ForwardTrace(config=model.config, input_ids=input_ids)
    kept = {"q_proj": trace.q, "k_proj": trace.k, "v_proj": trace.v}

    def record(name: str):
        def hook(module, inputs, output):
            trace.shapes[name] = tuple(output.shape)
            leaf = name.rsplit(".", 1)[-1]
            if leaf in kept:
                kept[leaf].append(output.detach())
            if leaf == "o_proj":
                trace.attn_out.append(inputs[0].detach())

        return hook

    handles = [
        module.register_forward_hook(record(name))
        for name, module in model.named_modules()
        if name and not isinstance(module, (torch.nn.ModuleList, Llama))
    ]
    try:
        with torch.no_grad():
            trace.logits = model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return trace


def check_trace(trace: object) -> ForwardTrace:
    """trace, if it is a ForwardTrace; else a TypeError naming it and where one comes from."""
    return check_record(
        "trace", trace, "a ForwardTrace (from trace_forward(model, input_ids))", of=ForwardTrace
    )


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, n_heads * D] -> [B, n_heads, T, D], as labkit's Attention does before RoPE."""
    batch, tokens, width = x.shape
    return x.view(batch, tokens, n_heads, width // n_heads).transpose(1, 2)


def rotated_qk(trace: ForwardTrace, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's queries [B, n_heads, T, D] and keys [B, n_kv_heads, T, D] after RoPE (positions 0..T-1)."""
    c = trace.config
    positions = torch.arange(trace.input_ids.shape[1], device=trace.q[layer].device)
    cos, sin = rotary_cos_sin(positions, c.head_dim, c.rope_theta)  # [T, D] each
    q = apply_rotary(split_heads(trace.q[layer], c.n_heads), cos, sin)
    k = apply_rotary(split_heads(trace.k[layer], c.n_kv_heads), cos, sin)
    return q, k


def attention_weights(trace: ForwardTrace, layer: int, rotary: bool = True) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + causal mask) of one layer: [B, n_heads, T, T], each row sums to 1.

    Row t says how much position t reads from each earlier position; grouped-query attention shares
    each key head among n_heads / n_kv_heads query heads. `rotary=False` skips RoPE (for comparison
    only: the model never does). Example: `attention_weights(trace, 5)[0, 2, -1]` is head 2's
    attention from the last token in layer 5, a [T] vector.
    """
    c = trace.config
    if rotary:
        q, k = rotated_qk(trace, layer)
    else:
        q, k = split_heads(trace.q[layer], c.n_heads), split_heads(trace.k[layer], c.n_kv_heads)
    k = k.repeat_interleave(c.n_heads // c.n_kv_heads, dim=1)  # [B, n_heads, T, D]
    tokens = q.shape[-2]
    scores = q.float() @ k.float().transpose(-2, -1) / c.head_dim**0.5  # [B, H, T, T]
    return torch.softmax(scores + causal_mask(tokens, tokens, q.device), dim=-1)


def attention_output(trace: ForwardTrace, layer: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """weights @ v with the heads merged: [B, T, n_heads * D], what the layer's o_proj receives.

    Equal (to float32 rounding) to `trace.attn_out[layer]` when the weights are the model's own.
    """
    check_trace(trace)
    c = trace.config
    weights = attention_weights(trace, layer) if weights is None else weights
    v = split_heads(trace.v[layer], c.n_kv_heads).repeat_interleave(c.n_heads // c.n_kv_heads, dim=1)
    out = weights @ v.float()  # [B, H, T, D]
    batch, heads, tokens, head_dim = out.shape
    return out.transpose(1, 2).reshape(batch, tokens, heads * head_dim)


def all_attention_weights(trace: ForwardTrace) -> torch.Tensor:
    """Every layer's attention weights of sequence 0: [n_layers, n_heads, T, T]."""
    check_trace(trace)
    return torch.stack([attention_weights(trace, layer)[0] for layer in range(trace.config.n_layers)])


def top_heads(attention_to: torch.Tensor, k: int = 3) -> list[tuple[int, int, float]]:
    """The k (layer, head, weight) with the largest weight in attention_to [n_layers, n_heads]."""
    check_tensor("attention_to", attention_to, "[n_layers, n_heads]", dims=2)
    check_int("k", k, minimum=1, maximum=attention_to.numel(), note="heads to list")
    values, flat = attention_to.flatten().topk(k)
    n_heads = attention_to.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads, float(w)) for w, i in zip(values, flat)]


def previous_token_share(weights: torch.Tensor, last: int | None = None) -> torch.Tensor:
    """weights [L, H, T, T] -> [L, H]: mean weight each head puts on the token just before, over
    positions 2..last-1 (default: all but the final position, so a row you study is not counted).

    Position 1 is left out: its previous token is the first token, which many heads read anyway.
    A "previous-token head" scores near 1. Example: `previous_token_share(w)[16, 0]`.
    """
    check_tensor("weights", weights, "[n_layers, n_heads, T, T]", dims=4)
    last = weights.shape[-1] - 1 if last is None else last
    if last < 3:
        raise ValueError(
            f"Need at least 4 tokens to measure a previous-token share, got T={weights.shape[-1]}."
        )
    return torch.stack([weights[..., t, t - 1] for t in range(2, last)], dim=-1).mean(-1)


def shape_rows(trace: ForwardTrace) -> list[tuple[str, str, str]]:
    """(stage, shape, note) rows from token ids to logits; each layer's rows once, marked "x N layers".

    Per-layer shapes are checked to be the same in every layer (they must be, in a Llama).
    """
    check_trace(trace)
    c, ids = trace.config, trace.input_ids
    batch, tokens = ids.shape
    per_layer = f"x {c.n_layers} layers"

    def layer_shape(leaf: str) -> str:
        found = {trace.shapes[f"layers.{i}.{leaf}"] for i in range(c.n_layers)}
        if len(found) != 1:
            raise ValueError(f"{leaf} has different shapes across layers: {sorted(found)}")
        return str(list(found.pop()))

    def heads(n: int) -> str:
        return str([batch, n, tokens, c.head_dim])

    return [
        ("token ids", str(list(ids.shape)), "batch x tokens"),
        ("embed_tokens", str(list(trace.shapes["embed_tokens"])), f"d = hidden size {c.hidden_size}"),
        ("input_layernorm (RMSNorm)", layer_shape("input_layernorm"), per_layer),
        (
            "q_proj -> heads",
            f"{layer_shape('self_attn.q_proj')} -> {heads(c.n_heads)}",
            f"{per_layer}; {c.n_heads} query heads x {c.head_dim}",
        ),
        (
            "k_proj -> heads",
            f"{layer_shape('self_attn.k_proj')} -> {heads(c.n_kv_heads)}",
            f"{per_layer}; {c.n_kv_heads} KV heads (GQA: {c.n_heads // c.n_kv_heads} query heads each)",
        ),
        ("v_proj -> heads", f"{layer_shape('self_attn.v_proj')} -> {heads(c.n_kv_heads)}", per_layer),
        (
            "attention weights",
            str([batch, c.n_heads, tokens, tokens]),
            f"{per_layer}; softmax(q k^T / sqrt(d)), causal",
        ),
        ("attention output", str(list(trace.attn_out[0].shape)), f"{per_layer}; heads merged, into o_proj"),
        ("o_proj (+ residual)", layer_shape("self_attn.o_proj"), per_layer),
        ("post_attention_layernorm", layer_shape("post_attention_layernorm"), per_layer),
        ("MLP gate_proj, up_proj", layer_shape("mlp.gate_proj"), f"{per_layer}; ffn = {c.intermediate_size}"),
        ("MLP down_proj (+ residual)", layer_shape("mlp.down_proj"), per_layer),
        ("final norm", str(list(trace.shapes["norm"])), ""),
        ("lm_head -> logits", str(list(trace.shapes["lm_head"])), f"vocab = {c.vocab_size}"),
    ]


def format_shape_table(rows: list[tuple[str, str, str]]) -> str:
    """The rows of `shape_rows` as aligned text, one line each, under a header."""
    check_items("rows", rows, "(stage, shape, note) text triples, as shape_rows makes them", of=(tuple, list))
    rows = [("stage", "shape", "")] + list(rows)
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(
        f"{stage:<{widths[0]}}  {shape:<{widths[1]}}  {note}".rstrip() for stage, shape, note in rows
    )
