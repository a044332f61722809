"""Bad-input cases of labkit's core/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

import torch
from door import Door, wrong

from labkit.core.attention import attention, causal_mask, sliding_window_mask
from labkit.core.forward import decode_step, prefill
from labkit.core.gemma3 import Gemma3, Gemma3Config
from labkit.core.inspect_forward import previous_token_share
from labkit.core.sink_cache import SinkKVCache
from labkit.core.streaming_perplexity import read_long_text
from labkit.core.tiled_attention import attend_in_tiles, tiled_attention

CASES = [
    wrong("labkit.core.attention.attention", words=("q",)),
    wrong("labkit.core.attention.attention_explicit", words=("q",)),
    wrong("labkit.core.attention.causal_mask", words=("new_tokens",)),
    Door(
        "labkit.core.attention.causal_mask",
        lambda kit: causal_mask(4, 2, "cpu"),
        ValueError,
        ("total_tokens", "4 or more", "got 2"),
    ),
    Door(
        "labkit.core.attention.attention",
        lambda kit: attention(
            torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 3, 8), torch.zeros(2, 3, 8), torch.zeros(3, 3)
        ),
        ValueError,
        ("v must be a tensor [B, H, T, D]", "shape (2, 3, 8)"),
    ),
    wrong("labkit.core.attention.sliding_window_mask", words=("window",)),
    Door(
        "labkit.core.attention.sliding_window_mask",
        lambda kit: sliding_window_mask(1, 4, window=0, device="cpu"),
        ValueError,
        ("window must be a whole number of 1 or more", "got 0"),
    ),
    wrong("labkit.core.tiled_attention.tiled_attention", words=("q must be a tensor [B, heads, T, D]",)),
    wrong("labkit.core.tiled_attention.attend_in_tiles", words=("q must be a tensor [B, heads, T, D]",)),
    Door(
        "labkit.core.tiled_attention.tiled_attention",
        lambda kit: tiled_attention(
            torch.zeros(1, 8, 4, 16), torch.zeros(1, 3, 4, 16), torch.zeros(1, 3, 4, 16)
        ),
        ValueError,
        ("q's heads must be a multiple of k's kv_heads", "got 8 heads and 3 kv_heads"),
    ),
    Door(
        "labkit.core.tiled_attention.attend_in_tiles",
        lambda kit: attend_in_tiles(*(torch.zeros(1, 1, 4, 16) for _ in range(3)), tile=0),
        ValueError,
        ("tile must be a whole number of 1 or more", "got 0"),
    ),
    wrong("labkit.core.forward.all_logits", words=("model",)),
    wrong("labkit.core.forward.decode_step", words=("model must be a causal LM",)),
    Door(
        "labkit.core.forward.decode_step",
        lambda kit: decode_step(kit.tiny, [5], None),
        TypeError,
        ("token_ids must be an integer tensor [B]", "got list"),
    ),
    Door(
        "labkit.core.forward.decode_step",
        lambda kit: decode_step(kit.tiny, torch.tensor([[5]]), None),
        TypeError,
        ("token_ids", "shape (1, 1)"),
    ),
    wrong("labkit.core.forward.greedy_decode", words=("n_tokens",)),
    wrong("labkit.core.forward.prefill", words=("model must be a causal LM",)),
    Door(
        "labkit.core.forward.prefill",
        lambda kit: prefill(kit.tiny, torch.tensor([[1.0, 2.0]])),
        TypeError,
        ("input_ids must be an integer tensor [B, T]", "torch.float32"),
    ),
    wrong("labkit.core.inspect_forward.all_attention_weights", words=("trace",)),
    wrong("labkit.core.inspect_forward.attention_output", words=("trace",)),
    wrong("labkit.core.inspect_forward.format_shape_table", words=("rows",)),
    wrong("labkit.core.inspect_forward.previous_token_share", words=("weights",)),
    Door(
        "labkit.core.inspect_forward.previous_token_share",
        lambda kit: previous_token_share(torch.rand(2, 5, 5)),
        ValueError,
        ("weights must be a tensor [n_layers, n_heads, T, T]", "shape (2, 5, 5)"),
    ),
    wrong("labkit.core.inspect_forward.shape_rows", words=("trace",)),
    wrong("labkit.core.inspect_forward.top_heads", words=("attention_to",)),
    wrong("labkit.core.inspect_forward.trace_forward", words=("model",)),
    wrong("labkit.core.gemma3.Gemma3", words=("config must be a Gemma3Config",)),
    wrong("labkit.core.gemma3.Gemma3.from_hf", words=("hf_model must be a transformers Gemma3ForCausalLM",)),
    Door(
        "labkit.core.gemma3.Gemma3.from_hf",
        lambda kit: Gemma3.from_hf(kit.tiny),
        ValueError,
        ("model_type 'gemma3_text'", "a Llama of model_type None", "impl='transformers'"),
    ),
    Door(
        "labkit.core.gemma3.Gemma3",
        lambda kit: Gemma3(Gemma3Config.tiny())([5, 6, 7]),
        TypeError,
        ("input_ids must be a tensor [B, T]", "got list"),
    ),
    # 2 layers given, Gemma-3-270M's 18 layer types left as they were
    Door(
        "labkit.core.gemma3_config.Gemma3Config",
        lambda kit: Gemma3Config(n_layers=2),
        ValueError,
        ("layer_types must be a tuple of n_layers=2 names", "'sliding_attention' or 'full_attention'"),
    ),
    Door(
        "labkit.core.gemma3_config.Gemma3Config",
        lambda kit: Gemma3Config(sliding_window="512"),
        TypeError,
        ("Gemma3Config's sliding_window must be int", "got str"),
    ),
    wrong("labkit.core.kv_cache.KVCache", words=("batch_size",)),
    wrong("labkit.core.llama.Llama", words=("config",)),
    wrong("labkit.core.llama.Llama.from_hf", words=("hf_model",)),
    wrong("labkit.core.paged.BlockPool", words=("n_blocks",)),
    wrong("labkit.core.paged.BlockPool.for_model", words=("model",)),
    wrong("labkit.core.paged.sharing_summary", words=("caches",)),
    wrong("labkit.core.bpe.apply_merges", words=("word",)),
    wrong("labkit.core.bpe.learn_merges", words=("n_merges",)),
    wrong("labkit.core.bpe.pre_tokenize", words=("text",)),
    wrong("labkit.core.bpe.tokenizer_merges", words=("tokenizer",)),
    wrong("labkit.core.text.chat_prompt", words=("tokenizer",)),
    wrong("labkit.core.text.encode_prompt", words=("prompt",)),
    wrong("labkit.core.text.token_pieces", words=("tokenizer",)),
    wrong("labkit.core.sink_cache.SinkKVCache", words=("n_layers must be a whole number",)),
    wrong(
        "labkit.core.sink_cache.SinkKVCache.for_model", words=("SinkKVCache.for_model runs labkit's Llama",)
    ),
    Door(
        "labkit.core.sink_cache.SinkKVCache.for_model",
        lambda kit: SinkKVCache.for_model(kit.tiny, sinks=4, window=500, chunk=16),
        ValueError,
        ("sinks + window + chunk = 520 positions is beyond the model's context of 512",),
    ),
    Door(
        "labkit.core.sink_cache.SinkKVCache",
        lambda kit: kit.tiny(torch.zeros(1, 5, dtype=torch.long), SinkKVCache(2, 2, 16, 4, 8, chunk=4)),
        ValueError,
        ("at most chunk=4 new tokens a forward pass; got 5", "create the cache with chunk=5"),
    ),
    wrong("labkit.core.streaming_perplexity.read_long_text", words=("model",)),
    Door(
        "labkit.core.streaming_perplexity.read_long_text",
        lambda kit: read_long_text(
            kit.tiny, torch.zeros(1, 100, dtype=torch.long), kit.tiny.new_cache(1, 64)
        ),
        ValueError,
        ("ids has 100 tokens", "this KVCache holds 64", "use a SinkKVCache"),
    ),
    Door(
        "labkit.core.streaming_perplexity.read_long_text",
        lambda kit: read_long_text(kit.tiny, torch.zeros(1, 10, dtype=torch.long), "cache"),
        TypeError,
        ("cache must be a labkit cache (KVCache, SinkKVCache, QuantizedKVCache)", "got str"),
    ),
    wrong("labkit.core.streaming_perplexity.reads_table", words=("reads must be a list of LongRead",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.core.forward.NoCache": "takes no argument: the stand-in cache for uncached decoding",
    "labkit.core.llama.LlamaConfig": "a frozen dataclass of sizes; Llama(config) is the door that uses them",
}
