"""A static decode step: every tensor shape fixed, so `torch.compile` compiles it once.

labkit's ordinary loop (`prefill` then `decode_step`) grows the attended keys by one each token and
keeps the position as a Python int: fine eagerly, but a compiler sees a new shape (and a new constant)
every step. Here, as in gpt-fast, the KV cache has a fixed length S and the position is a tensor:

    keys, values  n_layers tensors [1, n_kv_heads, S, head_dim] each, written with index_copy_ at `position`
    cos, sin      [S, head_dim], computed once, indexed by `position`
    mask          [1, S]: 0 for keys at or before `position`, -inf after (the empty slots)

so one decode step is the same graph for every token: embedding -> 30 blocks -> head -> argmax,
token [1, 1] and position [1] in, next token [1, 1] and logits [1, vocab] out. Attention reads all S
slots every step (the masked ones too): S is rounded up from what the request needs, not the model's
whole context. The blocks are the model's own modules (fused, quantized or bfloat16 alike); only the
cache they append to differs.

    >>> decoder = StaticDecoder(model, max_length=256, compile=True)   # compiles on the first token
    >>> ids = decoder.generate(prompt_ids, max_new_tokens=64)          # greedy, list of new token ids
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from pathlib import Path

import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

from labkit.core.arguments import check_int
from labkit.core.llama import Llama, check_llama, rotary_cos_sin
from labkit.core.text import check_token_ids
from labkit.speculative.drafters import PromptLookupDrafter
from labkit.speculative.rule import accept_greedy
from labkit.timing import time_once

SLOT_MULTIPLE = 64  # S is rounded up to a multiple of this, so nearby request sizes share one compiled step


def inductor_cache() -> Path:
    """Where torch inductor keeps what it compiled: $TORCHINDUCTOR_CACHE_DIR, by default
    /tmp/torchinductor_<user>. A later decoder of the same shape, in this process or another one,
    finds its step there and compiles in seconds instead of minutes."""
    return Path(inductor_cache_dir())


def break_even_tokens(compile_seconds: float, eager_tps: float, compiled_tps: float) -> float:
    """Tokens after which compiling pays for itself: the compile time over the seconds it saves per token,
    1 / eager - 1 / compiled; math.inf when the compiled path is no faster.

        >>> break_even_tokens(12.0, eager_tps=8.0, compiled_tps=16.0)
        192.0
    """
    saved = 1 / eager_tps - 1 / compiled_tps  # seconds saved per token
    return compile_seconds / saved if saved > 0 else math.inf


class StaticKVCache:
    """Keys and values, one [1, n_kv_heads, S, head_dim] tensor per layer, written at tensor positions.

    `positions` [T] (long) says where the tokens of the current forward pass go; `append` writes them
    there and returns the whole buffers: the mask, not a slice, hides the empty slots, so the shapes
    never change. This is the `append` labkit's blocks call (see labkit.core.kv_cache.Cache).

    One tensor per layer, not one [n_layers, ...] tensor, as in gpt-fast: torch.compile writes into a
    whole input tensor in place, but a write into a slice of one becomes a copy of all of it (every
    layer's cache, once per layer and step: 3 ms of a 13 ms step, measured on SmolLM2-135M).
    """

    def __init__(self, model: Llama, max_length: int):
        c = model.config
        shape = (1, c.n_kv_heads, max_length, c.head_dim)
        dtype, device = model.embed_tokens.weight.dtype, model.embed_tokens.weight.device
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(c.n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(c.n_layers)]
        self.dtype = dtype
        self.positions = torch.zeros(1, dtype=torch.long, device=device)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [1, n_kv_heads, T, D] at `positions`; return all keys, values [1, H, S, D]."""
        self.keys[layer].index_copy_(2, self.positions, k)
        self.values[layer].index_copy_(2, self.positions, v)
        return self.keys[layer], self.values[layer]


def compiled(step):
    """torch.compile(step), a bound method of one decoder, with fixed shapes and no guards on its model.

    Before each call of a compiled function, dynamo re-checks every guard it recorded, among them
    every attribute of every module of the model, in case one was swapped: 1.1 ms of an 11 ms step on
    SmolLM2-135M (30 blocks, 341 guards on a 2-block model). A decoder's model no longer changes, so
    the step skips those guards (torch.compiler.skip_guard_on_all_nn_modules_unsafe). Dynamo keeps its
    compiled graphs per code object, and without those guards a second decoder's model would reuse
    the first one's graph: each decoder compiles its own copy of the method's code instead.
    """
    return types.MethodType(compiled_function(step.__func__), step.__self__)


def compiled_function(function):
    """torch.compile of a copy of `function` with a code object of its own (see `compiled`): fixed shapes
    unless an input is marked dynamic, no guards on nn.Modules, one whole graph, and no size asserts: inductor's
    Python wrapper otherwise checks the size and strides of every kernel's output on every call, 581 checks a
    decode step of the serving engine's SmolLM2 (fuse+q4_1, batch 1), 0.4 ms of its 6.2 under cProfile; the
    step ran 8.09 against 8.42 ms without them (idle but drifting 2-core AMD EPYC, 8 runs each in turns).

        >>> step = compiled_function(decode_graph)    # labkit.serving.compiled_step: one per engine
    """
    own_code = types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    return torch.compile(
        own_code,
        fullgraph=True,
        dynamic=False,
        options={
            "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe,
            "size_asserts": False,
        },
    )


def slots_for(needed: int, context: int) -> int:
    """The static cache length for `needed` tokens: rounded up to SLOT_MULTIPLE, at most `context`.

    >>> slots_for(137, 8192)
    192
    """
    check_int("needed", needed, minimum=0)
    check_int("context", context, minimum=1)
    return min(-(-needed // SLOT_MULTIPLE) * SLOT_MULTIPLE, context)


class StaticDecoder:
    """Greedy batch-1 generation with a static cache; `compile=True` runs the decode step compiled.

    model: labkit's Llama (any labkit.fast steps applied). max_length: the slots S of the cache,
    prompt plus new tokens at most. The decoder owns one cache: one sequence at a time.
    `compile_seconds` {"decode" or "verify": seconds} times the first call of each step: with
    compile=True, the call that compiles it (cached on disk by torch inductor, so a second process
    compiles faster).
    """

    def __init__(self, model: Llama, max_length: int, compile: bool = False):
        check_llama(model, "StaticDecoder")
        context = model.config.max_position_embeddings
        check_int("max_length", max_length, minimum=2, maximum=context, note="the model's context")
        self.model, self.max_length, self.compiled = model, max_length, compile
        self.cache = StaticKVCache(model, max_length)
        c = model.config
        cos, sin = rotary_cos_sin(torch.arange(max_length, device=model.device), c.head_dim, c.rope_theta)
        self.cos, self.sin = cos.to(self.cache.dtype), sin.to(self.cache.dtype)  # [S, D]
        self.slots = torch.arange(max_length, device=model.device)  # [S]
        # torch.compile only wraps here; each step compiles on its first call
        self.step = compiled(self.decode) if compile else self.decode
        self.verify_step = compiled(self.verify) if compile else self.verify
        self.compile_seconds: dict[str, float] = {}

    def run(
        self, token_ids: torch.Tensor, positions: torch.Tensor, every_position: bool = False
    ) -> torch.Tensor:
        """token_ids [1, T] at positions [T] -> logits [1, vocab] of the last (or [T, vocab]), float32."""
        model = self.model
        self.cache.positions = positions
        cos, sin = self.cos[positions], self.sin[positions]  # [T, D]
        mask = torch.where(self.slots[None, :] <= positions[:, None], 0.0, float("-inf"))  # [T, S]
        x = model.run_blocks(model.embed_tokens(token_ids), cos, sin, self.cache, mask)  # [1, T, hidden]
        return model.logits(x[0] if every_position else x[:, -1])

    def decode(self, token: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One greedy step, the function compiled: token [1, 1], position [1] -> (next token [1, 1], logits)."""
        logits = self.run(token, position)
        return logits.argmax(-1, keepdim=True), logits

    def verify(self, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The speculative step, compiled for one T: token_ids [1, T] at positions [T] -> greedy choice after each [T]."""
        return self.run(token_ids, positions, every_position=True).argmax(-1)

    def check_request(self, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
        """A ValueError unless prompt_ids is a list of token ids in the vocabulary and max_new_tokens a whole
        number, with the prompt and the new tokens fitting the cache's slots."""
        if (
            isinstance(prompt_ids, (str, bytes))
            or not isinstance(prompt_ids, Sequence)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt_ids)
        ):
            raise ValueError(
                f"prompt_ids must be a list of token ids (ints), e.g. tokenizer(text)['input_ids'], "
                f"got {type(prompt_ids).__name__}: {str(prompt_ids)[:60]!r}."
            )
        check_token_ids(prompt_ids, self.model.config.vocab_size, "prompt")
        check_int("max_new_tokens", max_new_tokens, minimum=1)
        prompt_length = len(prompt_ids)
        if prompt_length < 1 or max_new_tokens < 1 or prompt_length + max_new_tokens > self.max_length:
            raise ValueError(
                f"The prompt ({prompt_length} tokens) plus max_new_tokens ({max_new_tokens}) must fit "
                f"this decoder's {self.max_length} slots, with at least one of each; make a "
                f"StaticDecoder with max_length >= {prompt_length + max_new_tokens}."
            )

    def prefill(self, prompt_ids: Sequence[int]) -> int:
        """The prompt in one eager pass (its length varies, so it is not compiled); the first new token id."""
        positions = torch.arange(len(prompt_ids), device=self.model.device)
        return int(self.run(torch.tensor([list(prompt_ids)], device=self.model.device), positions).argmax())

    def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, eos_id: int | None = None
    ) -> list[int]:
        """Greedy: the prompt in one eager pass, then one (compiled) step per token; the new ids.

        Stops after max_new_tokens or at eos_id (included). Nothing in the loop but one call of the
        step and one comparison per token.

            >>> StaticDecoder(model, 64).generate([1, 2, 3], max_new_tokens=4)
            [504, 3458, 28, 260]
        """
        self.check_request(prompt_ids, max_new_tokens)
        with torch.no_grad():
            new_ids = [self.prefill(prompt_ids)]
            token = torch.tensor([new_ids], device=self.model.device)  # [1, 1]
            for position in range(len(prompt_ids), len(prompt_ids) + max_new_tokens - 1):
                if new_ids[-1] == eos_id:
                    break
                token, _ = self.timed(
                    "decode", self.step, token, torch.tensor([position], device=self.model.device)
                )
                new_ids.append(int(token))
        return new_ids

    def generate_with_lookup(
        self, prompt_ids: Sequence[int], max_new_tokens: int, gamma: int = 4, eos_id: int | None = None
    ) -> tuple[list[int], int]:
        """Greedy with prompt-lookup speculation: (the new ids, the number of verify calls).

        Every call verifies gamma guesses after the last accepted token in one pass of T = gamma + 1
        tokens: the prompt-lookup drafter's proposal, padded with the last token when it proposes
        fewer (any guess is a fair guess: greedy verification keeps exactly the tokens the model
        itself would choose). The output equals `generate`'s, up to float rounding between a
        1-token and a (gamma+1)-token pass. Rolling back a rejected guess costs nothing: its slot is
        masked for every earlier position and overwritten when the sequence gets there.

            >>> ids, calls = decoder.generate_with_lookup(prompt_ids, max_new_tokens=64)
        """
        check_int("gamma", gamma, minimum=1, note="guesses per verify call")
        self.check_request(prompt_ids, max_new_tokens)
        drafter, context, calls = PromptLookupDrafter(), list(prompt_ids), 0
        last_slot = self.max_length - 1
        with torch.no_grad():
            new_ids = [self.prefill(prompt_ids)]
            while len(new_ids) < max_new_tokens and new_ids[-1] != eos_id:
                guesses = drafter.propose(context + new_ids, gamma)[0]  # at most gamma
                guesses += [new_ids[-1]] * (gamma - len(guesses))
                start = len(context) + len(new_ids) - 1  # position of the last accepted token
                positions = torch.arange(start, start + gamma + 1).clamp(max=last_slot)  # beyond: never read
                tokens = torch.tensor([[new_ids[-1]] + guesses])
                kept, choice = accept_greedy(
                    guesses, self.timed("verify", self.verify_step, tokens, positions).tolist()
                )
                new_ids += guesses[:kept] + [choice]
                calls += 1
        new_ids = new_ids[:max_new_tokens]
        if eos_id in new_ids:
            new_ids = new_ids[: new_ids.index(eos_id) + 1]
        return new_ids, calls

    def timed(self, name: str, step, *args):
        """Call a step; its first call is timed into compile_seconds[name] (with compile=True, it compiles)."""
        if name in self.compile_seconds:
            return step(*args)
        out, self.compile_seconds[name] = time_once(lambda: step(*args))
        return out
