"""A from-scratch Llama forward pass, readable top to bottom, on the same weights as transformers.

SmolLM2 is a Llama: token embedding -> N x [RMSNorm -> attention -> residual, RMSNorm -> SwiGLU MLP
-> residual] -> RMSNorm -> output head (tied to the embedding). Module names mirror transformers'
`LlamaForCausalLM`, so its state dict loads as is. Attention's arithmetic (RoPE, the causal mask,
grouped-query attention) is in `labkit.core.attention`; the modules here hold the weights and call it.

    >>> hf_model, tokenizer = labkit.load_model("smollm2-135m")
    >>> model = Llama.from_hf(hf_model)            # shares the weight tensors, no copy
    >>> logits = model(input_ids)                  # [B, T, vocab]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig as HFLlamaConfig

from labkit.core.attention import (
    apply_rotary,
    attend_and_project,
    rotary_cos_sin,
)
from labkit.core.doors import check_record
from labkit.core.hf_weights import on_hf_weights
from labkit.core.kv_cache import Appendable, Cache, KVCache, cache_for


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 49152  # number of token ids
    hidden_size: int = 576  # width of the residual stream
    intermediate_size: int = 1536  # width of the SwiGLU MLP
    n_layers: int = 30  # transformer blocks
    n_heads: int = 9  # query heads
    n_kv_heads: int = 3  # key/value heads (grouped-query attention when < n_heads)
    head_dim: int = 64  # width of one attention head
    rope_theta: float = 100000.0  # base of the rotary-embedding frequencies
    rms_norm_eps: float = 1e-5  # added to the mean square before the square root
    max_position_embeddings: int = 8192  # context length the model was trained for
    tie_word_embeddings: bool = True  # output head reuses the token-embedding matrix

    @classmethod
    def tiny(cls) -> LlamaConfig:
        """A 2-layer model with SmolLM2's vocabulary: random weights, milliseconds per step."""
        return cls(
            hidden_size=64,
            intermediate_size=128,
            n_layers=2,
            n_heads=4,
            n_kv_heads=2,
            head_dim=16,
            max_position_embeddings=512,
        )

    @classmethod
    def from_hf(cls, config: HFLlamaConfig) -> LlamaConfig:
        rope = getattr(config, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"labkit's Llama implements plain RoPE, not {rope['rope_type']!r} scaling.")
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            n_layers=config.num_hidden_layers,
            n_heads=config.num_attention_heads,
            n_kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            rope_theta=rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)),
            rms_norm_eps=config.rms_norm_eps,
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=config.tie_word_embeddings,
        )

    def to_hf(self) -> HFLlamaConfig:
        """The same architecture as a transformers config (used to build `tiny()` peers)."""
        return HFLlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.n_layers,
            num_attention_heads=self.n_heads,
            num_key_value_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=self.tie_word_embeddings,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=2,
        )


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight  (Zhang & Sennrich 2019), computed in float32."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    """Causal grouped-query attention: n_heads queries share n_kv_heads keys/values."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        c = config
        self.q_proj = nn.Linear(c.hidden_size, c.n_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.n_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.n_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: Cache | None,
        layer: int,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, T, hidden] -> [B, T, hidden]; with a cache, T new tokens attend to all before them.

        mask: None for the causal [T, S] mask of rows at equal positions, or the [B, 1, T, S] additive
        mask given to `Llama.forward` with the positions (rows at different positions, padding masked out).
        """
        c = self.config
        batch, new_tokens, _ = x.shape
        q = self.q_proj(x).view(batch, new_tokens, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, new_tokens, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, new_tokens, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return attend_and_project(q, k, v, self.o_proj, cache, layer, mask)


class MLP(nn.Module):
    """SwiGLU feed-forward (Shazeer 2020): down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """One pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, cache, layer, mask=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """The whole model: input_ids [B, T] -> logits [B, T, vocab]."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = check_record(
            "config", config, "a LlamaConfig (e.g. LlamaConfig.tiny())", of=LlamaConfig
        )
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: Cache | Appendable | None = None,
        logits_at: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, vocab] (float32), or [B, vocab] at `logits_at`.

        Without `positions`, the T tokens continue the `cache.length` tokens already in the cache (0
        without one): their keys/values are appended, the cache is advanced by T, and a position beyond
        the context is a ValueError. With `positions` [T] or [B, T] (long; gpt-fast's `input_pos`), the
        tokens sit there, so rows of one batch may be at different positions (the serving engine's
        mixed batches). The cache then only `append`s (it counts nothing), `mask` [B, 1, T, S]
        (additive; None: causal, the T tokens after the cache's keys) says which keys each token sees,
        and the caller keeps the positions inside the context (checking them would read them back from
        the device).

        `logits_at` [B] (long), one index into T per row, computes the output head only there: a
        server needs just the logits after each row's last prompt token, and the head (hidden x vocab)
        is the largest matrix of a small model.

            >>> positions, mask = batch_cache.layout(ids.shape[1])      # labkit.serving.batch_cache
            >>> logits = model(ids, batch_cache, positions=positions, mask=mask)
        """
        new_tokens = input_ids.shape[1]
        counted = positions is None  # the cache counts its own tokens
        if counted:
            positions, mask = self.next_positions(cache, new_tokens, input_ids.device)
        cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        x = self.run_blocks(self.embed_tokens(input_ids), cos, sin, cache, mask)
        if counted and cache is not None:
            cache.advance(new_tokens)
        if logits_at is not None:
            x = x[torch.arange(x.shape[0], device=x.device), logits_at.to(x.device)]  # [B, hidden]
        return self.logits(x)

    def next_positions(
        self, cache: Cache | None, new_tokens: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(positions [T], None) of T tokens after the cache's `length` ones, checked against the context
        from Python ints (no device sync).

            >>> model.next_positions(None, 3, torch.device("cpu"))
            (tensor([0, 1, 2]), None)
        """
        past = cache.length if cache is not None else 0
        self.check_position(past + new_tokens - 1)
        return torch.arange(past, past + new_tokens, device=device), None

    def check_position(self, last: int) -> None:
        """A ValueError when position `last` (a Python int: the furthest any token reaches) is beyond the context."""
        if last >= self.config.max_position_embeddings:
            raise ValueError(
                f"Position {last} is beyond the model's context of "
                f"{self.config.max_position_embeddings} tokens; use a shorter prompt or fewer new tokens."
            )

    def run_blocks(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: Cache | Appendable | None,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Every transformer block in turn: x [B, T, hidden] -> [B, T, hidden], each appending to `cache`.

        cos, sin [T, D] or [B, 1, T, D] (`rotary_cos_sin`); mask None (causal) or additive [T, S] / [B, 1, T, S].

            >>> x = model.run_blocks(model.embed_tokens(ids), cos, sin, cache=None, mask=None)  # [B, T, hidden]
        """
        for index, block in enumerate(self.layers):
            x = block(x, cos, sin, cache, index, mask)
        return x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm and output head: x [..., hidden] -> logits [..., vocab], float32."""
        return self.lm_head(self.norm(x)).float()

    def new_cache(self, batch_size: int = 1, max_length: int | None = None) -> KVCache:
        """An empty preallocated KV cache sized for this model (default: its whole context)."""
        return cache_for(self.config, self.embed_tokens.weight, batch_size, max_length)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> Llama:
        """labkit's Llama on the weights of a transformers `LlamaForCausalLM` (shared, not copied)."""
        check_record("hf_model", hf_model, "a transformers LlamaForCausalLM", of=nn.Module, has=("config",))
        if getattr(hf_model.config, "model_type", None) != "llama":
            raise ValueError(
                f"labkit's from-scratch model is a Llama; this model is "
                f"{hf_model.config.model_type!r}. Use impl='transformers' for it."
            )
        return on_hf_weights(lambda: cls(LlamaConfig.from_hf(hf_model.config)), hf_model)


class NotLabkitLlama(TypeError, ValueError):
    """A model that is not labkit's Llama, given where only labkit's Llama works. It is a TypeError (a wrong
    kind of argument) and, as these entry points raised before, a ValueError."""


def check_llama(model: object, user: str) -> Llama:
    """model, if it is labkit's Llama; else NotLabkitLlama saying that `user` needs it and how to load it.

    >>> check_llama(torch.nn.Linear(2, 2), "StaticDecoder")
    Traceback (most recent call last):
    NotLabkitLlama: StaticDecoder runs labkit's Llama (the from-scratch model), got Linear. ...
    """
    if not isinstance(model, Llama):
        raise NotLabkitLlama(
            f"{user} runs labkit's Llama (the from-scratch model), got {type(model).__name__}. "
            "Load it with labkit.load_model(name, impl='labkit'), or convert a transformers Llama "
            "with labkit.Llama.from_hf(model)."
        )
    return model
