"""A from-scratch Gemma-3 text decoder, readable top to bottom, on the same weights as transformers.

Gemma-3-270M: token embedding x sqrt(hidden) -> 18 x [norm -> attention -> norm -> residual, norm -> gated
GELU MLP -> norm -> residual] -> norm -> output head (tied to the embedding). Five of every six layers are
local: a query sees only the last `sliding_window` (512) keys, itself included, with RoPE base 10 000; the
sixth is global, every key before it, RoPE base 1 000 000 (Gemma Team 2025, "Gemma 3 Technical Report").
The layers' modules are in `labkit.core.gemma3_layers`, the sizes in `labkit.core.gemma3_config`; module
names mirror transformers' `Gemma3ForCausalLM`, so its state dict loads as is.

Shapes: input_ids [B, T] -> embeddings [B, T, hidden] -> logits [B, T, vocab] (float32). Each layer's keys
and values [B, n_kv_heads, T, head_dim] go to labkit's KV cache as a Llama's do; a local layer reads only the
cached keys its window can see (its mask covers just those columns, `window_columns`), so prefill then one
token at a time gives the full forward's logits, and a decode step's local layers read 512 keys at any
context.

    >>> hf_model, tokenizer = labkit.load_model("gemma3-270m")
    >>> model = Gemma3.from_hf(hf_model)           # shares the weight tensors, no copy
    >>> logits = model(input_ids)                  # [B, T, 262144]
"""

from __future__ import annotations

import torch
from torch import nn

from labkit.core.attention import causal_mask, rotary_cos_sin, sliding_window_mask, window_columns
from labkit.core.doors import check_record, check_tensor
from labkit.core.gemma3_config import Gemma3Config
from labkit.core.gemma3_layers import Block, RMSNorm
from labkit.core.hf_weights import on_hf_weights
from labkit.core.kv_cache import Cache, KVCache, cache_for


class Gemma3(nn.Module):
    """The whole model: input_ids [B, T] -> logits [B, T, vocab]."""

    def __init__(self, config: Gemma3Config):
        super().__init__()
        self.config = check_record(
            "config", config, "a Gemma3Config (e.g. Gemma3Config.tiny())", of=Gemma3Config
        )
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, config.is_sliding(i)) for i in range(config.n_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: Cache | None = None,
        logits_at: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        window_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, vocab] (float32), or [B, vocab] at `logits_at` [B] (one index
        into T per row).

        Without `positions`, the T tokens continue the `cache.length` tokens already in the cache (0 without
        one): their keys and values are appended, the cache is advanced by T, and a position beyond the
        context is a ValueError. With `positions` [B, T] (long), rows sit at their own positions, as in the
        serving engine's mixed batches (`Llama.forward` says the same): the cache only appends, and the
        caller gives the global layers' `mask` and the local layers' `window_mask`, both [B, 1, T, S]
        additive (`labkit.serving.batch_cache`'s layout(T) and layout(T, window)).

            >>> cache = model.new_cache(max_length=64)
            >>> logits = model(prompt_ids, cache)            # prefill
            >>> logits = model(next_id[:, None], cache)      # one token further
        """
        check_tensor("input_ids", input_ids, "[B, T] of token ids", dims=2)
        new_tokens, counted = input_ids.shape[1], positions is None  # counted: the cache counts its tokens
        if counted:
            past = cache.length if cache is not None else 0
            self.check_position(past + new_tokens - 1)
            positions = torch.arange(past, past + new_tokens, device=input_ids.device)
            mask = causal_mask(new_tokens, past + new_tokens, input_ids.device)
            window = self.config.sliding_window
            seen = window_columns(new_tokens, past + new_tokens, window)  # all the local layers read
            window_mask = sliding_window_mask(new_tokens, past + new_tokens, window, mask.device)[:, seen]
        elif mask is None or window_mask is None:
            raise ValueError(
                "With positions, give both masks: mask (global layers) and window_mask (local ones)."
            )
        x = self.run_blocks(self.embed(input_ids), positions, {False: mask, True: window_mask}, cache)
        if counted and cache is not None:
            cache.advance(new_tokens)
        if logits_at is not None:
            x = x[torch.arange(x.shape[0], device=x.device), logits_at.to(x.device)]  # [B, hidden]
        return self.logits(x)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, T] -> [B, T, hidden]: the embedding rows times sqrt(hidden), the factor rounded to
        the weights' dtype first as transformers does (sqrt(640) = 25.30 becomes 25.25 in bfloat16)."""
        x = self.embed_tokens(input_ids)
        return x * torch.tensor(self.config.hidden_size**0.5).to(x.dtype)

    def run_blocks(
        self, x: torch.Tensor, positions: torch.Tensor, masks: dict[bool, torch.Tensor], cache: Cache | None
    ) -> torch.Tensor:
        """Every layer in turn: x [B, T, hidden] of the tokens at `positions` ([T] or [B, T]) -> [B, T,
        hidden], each layer appending its keys and values to `cache`.

        Two RoPE tables and two masks serve all the layers: local layers read (local base, masks[True], the
        sliding window), global ones (global base, masks[False], causal), each mask [T, S] or [B, 1, T, S].
        The tables are rounded to x's dtype first, as transformers rounds them: Gemma-3-270M in bfloat16
        then gives its logits bit for bit (measured on three prompts).

            >>> masks = {False: causal_mask(T, T, "cpu"), True: sliding_window_mask(T, T, 512, "cpu")}
            >>> x = model.run_blocks(model.embed(ids), torch.arange(T), masks, cache=None)
        """
        c = self.config
        tables = {
            sliding: tuple(t.to(x.dtype) for t in rotary_cos_sin(positions, c.head_dim, base))
            for sliding, base in ((False, c.rope_theta), (True, c.rope_local_theta))
        }
        for index, block in enumerate(self.layers):
            sliding = block.self_attn.sliding
            x = block(x, *tables[sliding], masks[sliding], cache, index)
        return x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm and output head: x [..., hidden] -> logits [..., vocab], float32, soft-capped as
        cap * tanh(logits / cap) when the config sets `final_logit_softcapping`."""
        logits = self.lm_head(self.norm(x))
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits.float()

    def check_position(self, last: int) -> None:
        """A ValueError when position `last` (a Python int: the furthest any token reaches) is beyond the
        context."""
        if last >= self.config.max_position_embeddings:
            raise ValueError(
                f"Position {last} is beyond the model's context of "
                f"{self.config.max_position_embeddings} tokens; use a shorter prompt or fewer new tokens."
            )

    def new_cache(self, batch_size: int = 1, max_length: int | None = None) -> KVCache:
        """An empty preallocated KV cache sized for this model (default: its whole context). Every layer
        keeps every token: a local layer reads only its window's (a windowed cache would drop the rest)."""
        return cache_for(self.config, self.embed_tokens.weight, batch_size, max_length)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> Gemma3:
        """labkit's Gemma3 on the weights of a transformers `Gemma3ForCausalLM` or its `Gemma3TextModel`
        (shared, not copied).

            >>> model = Gemma3.from_hf(labkit.load_model("gemma3-270m")[0])
        """
        check_record("hf_model", hf_model, "a transformers Gemma3ForCausalLM", of=nn.Module, has=("config",))
        if getattr(hf_model.config, "model_type", None) != "gemma3_text":
            raise ValueError(
                f"labkit's Gemma3 is Gemma 3's text decoder (model_type 'gemma3_text'); this model is a "
                f"{type(hf_model).__name__} of model_type {getattr(hf_model.config, 'model_type', None)!r}. "
                "Use impl='transformers' for it."
            )
        return on_hf_weights(lambda: cls(Gemma3Config.from_hf(hf_model.config)), hf_model)
