"""Bad-input cases of labkit's core/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

import torch
from door import Door, wrong

from labkit.core.forward import decode_step, prefill

CASES = [
    wrong("labkit.core.forward.all_logits", words=("model",), missing="TypeError at labkit/core/forward.py:168"),
    wrong("labkit.core.forward.decode_step", words=("model must be a causal LM",)),
    Door("labkit.core.forward.decode_step", lambda kit: decode_step(kit.tiny, [5], None), TypeError,
         ("token_ids must be an integer tensor [B]", "got list")),
    Door("labkit.core.forward.decode_step", lambda kit: decode_step(kit.tiny, torch.tensor([[5]]), None), TypeError,
         ("token_ids", "shape (1, 1)")),
    wrong("labkit.core.forward.greedy_decode", words=("n_tokens",)),
    wrong("labkit.core.forward.prefill", words=("model must be a causal LM",)),
    Door("labkit.core.forward.prefill", lambda kit: prefill(kit.tiny, torch.tensor([[1.0, 2.0]])), TypeError,
         ("input_ids must be an integer tensor [B, T]", "torch.float32")),
    wrong("labkit.core.inspect_forward.all_attention_weights", words=("trace",),
          missing="AttributeError at labkit/core/inspect_forward.py:120"),
    wrong("labkit.core.inspect_forward.attention_output", words=("trace",),
          missing="AttributeError at labkit/core/inspect_forward.py:110"),
    wrong("labkit.core.inspect_forward.format_shape_table", words=("rows",),
          missing="TypeError at labkit/core/inspect_forward.py:183"),
    wrong("labkit.core.inspect_forward.previous_token_share", words=("weights",),
          missing="AttributeError at labkit/core/inspect_forward.py:137"),
    wrong("labkit.core.inspect_forward.shape_rows", words=("trace",),
          missing="AttributeError at labkit/core/inspect_forward.py:148"),
    wrong("labkit.core.inspect_forward.top_heads", words=("attention_to",),
          missing="AttributeError at labkit/core/inspect_forward.py:125"),
    wrong("labkit.core.inspect_forward.trace_forward", words=("model",)),
    wrong("labkit.core.kv_cache.KVCache", words=("batch_size",)),
    wrong("labkit.core.llama.Llama", words=("config",), missing="AttributeError at labkit/core/llama.py:212"),
    wrong("labkit.core.llama.Llama.from_hf", words=("hf_model",),
          missing="AttributeError at labkit/core/llama.py:307"),
    wrong("labkit.core.llama.attention", words=("q",), missing="AttributeError at labkit/core/llama.py:160"),
    wrong("labkit.core.llama.attention_explicit", words=("q",), missing="AttributeError at labkit/core/llama.py:165"),
    wrong("labkit.core.llama.causal_mask", words=("new_tokens",), missing="TypeError at labkit/core/llama.py:173"),
    wrong("labkit.core.paged.BlockPool", words=("n_blocks",)),
    wrong("labkit.core.paged.BlockPool.for_model", words=("model",),
          missing="AttributeError at labkit/core/paged.py:139"),
    wrong("labkit.core.paged.sharing_summary", words=("caches",), missing="TypeError at labkit/core/paged.py:339"),
    wrong("labkit.core.text.chat_prompt", words=("tokenizer",)),
    wrong("labkit.core.text.encode_prompt", words=("prompt",)),
    wrong("labkit.core.text.token_pieces", words=("tokenizer",), missing="TypeError at labkit/core/text.py:60"),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.core.forward.NoCache": "takes no argument: the stand-in cache for uncached decoding",
    "labkit.core.llama.LlamaConfig": "a frozen dataclass of sizes; Llama(config) is the door that uses them",
}
