"""Gemma-3's sizes and choices as one frozen dataclass: labkit's `Gemma3Config`, read from and written to
transformers' `Gemma3TextConfig`.

Besides a Llama's sizes it holds what makes Gemma 3 itself: which layers are local (a sliding window of
keys) and which global (`layer_types`: five local, then one global, for Gemma-3-270M's 18 layers), the
window, a RoPE base for each kind of layer, the attention scale and the optional soft-cap of the logits.

    >>> config = Gemma3Config.from_hf(hf_model.config)    # Gemma-3-270M: 18 layers, window 512
    >>> config.is_sliding(5), config.is_sliding(6)
    (False, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import Gemma3TextConfig

from labkit.core.arguments import InvalidArgument, check_int
from labkit.core.doors import check_fields, check_record

LOCAL, GLOBAL = "sliding_attention", "full_attention"  # transformers' names of the two kinds of layer
GEMMA3_270M_LAYERS = ((LOCAL,) * 5 + (GLOBAL,)) * 3  # Gemma 3's pattern: 5 local layers, then 1 global


@dataclass(frozen=True)
class Gemma3Config:
    vocab_size: int = 262144  # number of token ids
    hidden_size: int = 640  # width of the residual stream
    intermediate_size: int = 2048  # width of the gated GELU MLP
    n_layers: int = 18  # transformer blocks
    n_heads: int = 4  # query heads
    n_kv_heads: int = 1  # key/value heads (grouped-query attention when < n_heads)
    head_dim: int = 256  # width of one attention head
    rope_theta: float = 1_000_000.0  # RoPE base of the global (full-attention) layers
    rope_local_theta: float = 10_000.0  # RoPE base of the local (sliding-window) layers
    rms_norm_eps: float = 1e-6  # added to the mean square before the square root
    max_position_embeddings: int = 32768  # context length the model was trained for
    sliding_window: int = 512  # a local layer's query sees itself and the window - 1 keys before it
    layer_types: tuple[str, ...] = GEMMA3_270M_LAYERS  # per layer: "sliding_attention" or "full_attention"
    query_pre_attn_scalar: int = 256  # attention scores are scaled by query_pre_attn_scalar ** -0.5
    final_logit_softcapping: float | None = None  # cap of the output logits, None: off
    tie_word_embeddings: bool = True  # output head reuses the token-embedding matrix

    def __post_init__(self) -> None:
        check_fields(self)
        check_int("n_layers", self.n_layers, minimum=1)
        check_int("sliding_window", self.sliding_window, minimum=1, note="keys a local layer's query sees")
        kinds = self.layer_types
        if not isinstance(kinds, tuple) or len(kinds) != self.n_layers or not set(kinds) <= {LOCAL, GLOBAL}:
            raise InvalidArgument(
                f"layer_types must be a tuple of n_layers={self.n_layers} names, each {LOCAL!r} or "
                f"{GLOBAL!r}, got {kinds!r}.",
                "layer_types",
                kinds,
            )

    def is_sliding(self, layer: int) -> bool:
        """Whether layer `layer` (from 0) is local: a sliding window of keys and the local RoPE base."""
        return self.layer_types[layer] == LOCAL

    @classmethod
    def tiny(cls) -> Gemma3Config:
        """3 layers (local, local, global) with a window of 4 keys and Gemma's vocabulary: random weights,
        milliseconds per step. Its attention scale (32 ** -0.5) differs from head_dim ** -0.5 on purpose."""
        return cls(
            hidden_size=64,
            intermediate_size=128,
            n_layers=3,
            n_heads=4,
            n_kv_heads=2,
            head_dim=16,
            max_position_embeddings=512,
            sliding_window=4,
            layer_types=(LOCAL, LOCAL, GLOBAL),
            query_pre_attn_scalar=32,
        )

    @classmethod
    def from_hf(cls, config: Gemma3TextConfig) -> Gemma3Config:
        """labkit's config of a transformers `Gemma3TextConfig`; a ValueError for what labkit does not build
        (RoPE scaling, bidirectional attention, biases, another activation)."""
        check_record("config", config, "a transformers Gemma3TextConfig", has=("layer_types", "head_dim"))
        check_supported(config)
        rope = getattr(config, "rope_parameters", None) or {}
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            n_layers=config.num_hidden_layers,
            n_heads=config.num_attention_heads,
            n_kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            rope_theta=rope.get(GLOBAL, {}).get("rope_theta", getattr(config, "rope_theta", 1_000_000.0)),
            rope_local_theta=rope.get(LOCAL, {}).get(
                "rope_theta", getattr(config, "rope_local_base_freq", 1e4)
            ),
            rms_norm_eps=config.rms_norm_eps,
            max_position_embeddings=config.max_position_embeddings,
            sliding_window=config.sliding_window,
            layer_types=tuple(config.layer_types),
            query_pre_attn_scalar=config.query_pre_attn_scalar,
            final_logit_softcapping=config.final_logit_softcapping,
            tie_word_embeddings=config.tie_word_embeddings,
        )

    def to_hf(self) -> Gemma3TextConfig:
        """The same architecture as a transformers config (used to build `tiny()` peers)."""
        return Gemma3TextConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.n_layers,
            num_attention_heads=self.n_heads,
            num_key_value_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            rope_parameters={
                GLOBAL: {"rope_type": "default", "rope_theta": self.rope_theta},
                LOCAL: {"rope_type": "default", "rope_theta": self.rope_local_theta},
            },
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_position_embeddings,
            sliding_window=self.sliding_window,
            layer_types=list(self.layer_types),
            query_pre_attn_scalar=self.query_pre_attn_scalar,
            final_logit_softcapping=self.final_logit_softcapping,
            tie_word_embeddings=self.tie_word_embeddings,
            hidden_activation="gelu_pytorch_tanh",
        )


def check_supported(config: object) -> None:
    """A ValueError naming what a transformers Gemma-3 text config asks for that labkit's Gemma3 does not
    build: RoPE scaling (the larger Gemma 3 models' global layers), bidirectional attention (EmbeddingGemma),
    biased projections, an activation other than GELU's tanh approximation, or Gemma 2's soft-capping of
    the attention scores (Gemma 3 replaced it by QK-norm; transformers' Gemma3 reads the field and never
    applies it, so no one value of it would match transformers and mean what it says).

        >>> check_supported(hf_model.config)       # Gemma-3-270M: nothing to refuse
    """
    rope = getattr(config, "rope_parameters", None) or {}
    refused = [
        f"{kind} RoPE of type {params['rope_type']!r}"
        for kind, params in rope.items()
        if isinstance(params, dict) and params.get("rope_type", "default") != "default"
    ]
    if getattr(config, "use_bidirectional_attention", False):
        refused.append("bidirectional attention")
    if getattr(config, "attention_bias", False):
        refused.append("attention biases")
    if getattr(config, "hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        refused.append(f"the activation {config.hidden_activation!r}")
    if getattr(config, "attn_logit_softcapping", None) is not None:
        refused.append("soft-capped attention scores")
    if refused:
        raise ValueError(
            "labkit's Gemma3 implements plain RoPE, causal attention without soft-capping, no biases and "
            f"GELU (tanh); this model asks for {', '.join(refused)}. Use impl='transformers' for it."
        )
