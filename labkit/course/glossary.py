"""The course's terms, each with one line of meaning and the notebook and section that teach it.

The site (labkit.course.site) writes them as its glossary page, each term linked to the section's heading on
its notebook's page, and the site's tests search for them. A term belongs to the notebook where it is taught,
not the first one that mentions it (notebook 00's tour names nearly everything once), and to the section that
explains it, not the outcomes list under the title that names it first; a test checks that the section is a
heading of that notebook and that the notebook does use the term.

    >>> GLOSSARY["KV cache"].notebook, GLOSSARY["KV cache"].section
    ('06_kv_cache', '1. Why recomputation is quadratic')
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.doors import check_fields

__all__ = ["GLOSSARY", "Term"]


@dataclass(frozen=True)
class Term:
    """One entry of the glossary; each field text (a TypeError names the one that is not)."""

    meaning: str  # one sentence, in the course's words
    notebook: str  # the notebook that teaches it, its file name without .ipynb
    section: str  # the heading of the section that teaches it, as the notebook writes it (without the #s)

    def __post_init__(self) -> None:
        check_fields(self)


T01, T02, T03, T04 = (
    "01_tokens_prompts_chat_templates",
    "02_the_generation_loop",
    "03_deterministic_decoding",
    "04_sampling",
)
T05, T06, T07, T08 = (
    "05_beyond_the_basics",
    "06_kv_cache",
    "07_prefill_vs_decode_and_metrics",
    "08_quantization",
)
T09, T10, T11, T12 = (
    "09_speculative_decoding",
    "10_batching",
    "11_serving",
    "12_run_locally_and_choose_a_model",
)
T13, T14, T15 = "13_how_fast_can_we_decode", "14_spending_compute_at_inference_time", "15_long_context"
T16 = "16_past_one_machine"

GLOSSARY: dict[str, Term] = {
    "tokenizer": Term(
        "Splits text into the integer ids a model reads, and turns ids back into text.",
        T01,
        "1. Text becomes tokens",
    ),
    "chat template": Term(
        "The model's own format that turns a list of chat messages into one prompt string, special "
        "tokens included.",
        T01,
        "4. Chat templates",
    ),
    "special token": Term(
        "A token with a role rather than a text, such as the end of a turn or of the text.",
        T01,
        "3. Special tokens",
    ),
    "context length": Term(
        "The most tokens, prompt and answer together, that a model can attend to.", T01, "5. Context length"
    ),
    "logits": Term(
        "The model's raw score for every token of the vocabulary at one position; softmax turns them into "
        "probabilities.",
        T02,
        "1. One forward pass by hand",
    ),
    "softmax": Term(
        "exp(logit) divided by the sum of exp over the vocabulary: scores into a distribution.",
        T02,
        "2. The next-token distribution",
    ),
    "teacher forcing": Term(
        "Feeding the known text, not the model's own choices, so that one forward pass scores "
        "every position at once.",
        T02,
        "Every row at once: how the model was trained",
    ),
    "greedy decoding": Term(
        "Always taking the most likely next token.", T03, "1. Greedy decoding and its loops"
    ),
    "beam search": Term(
        "Keeping the few best partial sequences by summed log-probability at every step.",
        T03,
        "3. Beam search",
    ),
    "length bias": Term(
        "Summed log-probabilities favour short sequences, the empty answer above all.",
        T03,
        "The mode may be empty",
    ),
    "temperature": Term(
        "Divides the logits before the softmax: below 1 sharpens the distribution, above 1 flattens "
        "it, 0 means greedy.",
        T04,
        "1. Temperature",
    ),
    "top-k": Term("Keeps only the k most likely tokens before sampling.", T04, "2. Truncation: cut the tail"),
    "top-p": Term(
        "Nucleus sampling: keeps the fewest most likely tokens whose probabilities add up to p.",
        T04,
        "2. Truncation: cut the tail",
    ),
    "min-p": Term(
        "Keeps the tokens at least min_p times as likely as the most likely one.",
        T04,
        "5. Min-p and typical, one line each",
    ),
    "repetition penalty": Term(
        "Lowers the logits of tokens already in the text.", T04, "7. Penalties and stop strings"
    ),
    "Mirostat": Term(
        "A sampler that steers each token's surprise toward a target number of bits.",
        T05,
        "1. Surprise, and Mirostat",
    ),
    "minimum Bayes risk": Term(
        "MBR: among several samples, choose the one most like the others.",
        T05,
        "3. MBR: pick the answer the samples agree on",
    ),
    "KV cache": Term(
        "The keys and values of every past token, kept so that each decode step computes only the new "
        "token's.",
        T06,
        "1. Why recomputation is quadratic",
    ),
    "grouped-query attention": Term(
        "Several query heads share one key/value head, so the KV cache is smaller.",
        T06,
        "5. What the cache costs: memory",
    ),
    "prefill": Term(
        "The forward pass over the whole prompt that fills the KV cache and gives the first token.",
        T07,
        "1. Two phases, by prompt length",
    ),
    "roofline": Term(
        "A speed limit drawn from the machine's measured memory bandwidth and compute peak.",
        T07,
        "3. A roofline of this machine",
    ),
    "TTFT": Term(
        "Time to first token: from the request to the first token of the answer.",
        T07,
        "4. The metrics of real requests",
    ),
    "TPOT": Term(
        "Time per output token: the time between tokens once decoding runs.",
        T07,
        "4. The metrics of real requests",
    ),
    "quantization": Term(
        "Storing weights in fewer bits (int8, int4, NF4) with a scale per group.",
        T08,
        "2. Absmax and zero-point, by hand",
    ),
    "NF4": Term(
        "4-bit NormalFloat: 16 levels placed for normally distributed weights (QLoRA, bitsandbytes).",
        T08,
        "5. NF4: 16 levels where the weights are",
    ),
    "GGUF": Term(
        "llama.cpp's model file format: the weights in quantized blocks, with the tokenizer and settings.",
        T08,
        "6. Inside the GGUF file",
    ),
    "perplexity": Term(
        "exp of the mean negative log-likelihood per token: how surprised a model is by a text.",
        T08,
        "8. What each scheme costs: the results table",
    ),
    "speculative decoding": Term(
        "A small draft proposes tokens and the target model checks them all in one pass, "
        "keeping its own distribution exactly.",
        T09,
        "2. The algorithm, round by round",
    ),
    "prompt lookup": Term(
        "Drafting the next tokens by copying what followed the same words earlier in the prompt.",
        T09,
        "2. The algorithm, round by round",
    ),
    "static batching": Term(
        "Running a fixed set of requests together until the longest one ends.",
        T10,
        "2. Static batching by hand",
    ),
    "continuous batching": Term(
        "Adding and removing requests at every engine step.",
        T10,
        "3. Continuous batching with labkit's Engine",
    ),
    "chunked prefill": Term(
        "Splitting a long prompt's prefill across steps so running requests keep decoding.",
        T10,
        "Chunked prefill: a long prompt arrives while others decode",
    ),
    "prefix caching": Term(
        "Reusing the KV cache blocks of a prompt prefix that an earlier request computed.",
        T10,
        "4. Prefix caching: a shared system prompt",
    ),
    "preemption": Term(
        "Taking a running request's KV cache blocks back when memory runs out, to resume it later.",
        T10,
        "Preemption: a pool too small",
    ),
    "goodput": Term(
        "The requests per second served within their latency targets.",
        T11,
        "Users who do not wait: an open loop and goodput",
    ),
    "structured output": Term(
        "Decoding constrained by a JSON schema: a mask on the logits allows only tokens that "
        "keep the answer valid.",
        T11,
        "Structured output: a JSON schema, through both clients",
    ),
    "llama-server": Term(
        "llama.cpp's own HTTP server, with parallel slots and continuous batching.",
        T12,
        "1. The engines on this machine",
    ),
    "Modelfile": Term(
        "Ollama's recipe for a model: its weights, template and parameters.",
        T12,
        "6. Ollama: the official client, and the real thing",
    ),
    "torch.compile": Term(
        "PyTorch's compiler that fuses a model's operations into fewer kernels.",
        T13,
        "6. When does compiling pay for itself?",
    ),
    "self-consistency": Term(
        "Sampling several answers and taking the most common one.", T14, "3. Choosing among samples"
    ),
    "best-of-n": Term(
        "Sampling n answers and keeping the one a scorer ranks highest.", T14, "3. Choosing among samples"
    ),
    "thinking budget": Term(
        "A cap on how many tokens a model may spend reasoning before it answers.", T14, "5. A budget to think"
    ),
    "FlashAttention": Term(
        "Attention computed one tile of keys at a time with an online softmax, never holding the score matrix.",
        T15,
        "2. Attention in tiles",
    ),
    "online softmax": Term(
        "A softmax built block by block from a running max and sum, rescaling what was summed when the max grows.",
        T15,
        "2. Attention in tiles",
    ),
    "quantized KV cache": Term(
        "A KV cache that stores keys and values in fewer bits (int8, 4-bit, fp8) with their scales.",
        T15,
        "3. Fewer bits per cached number",
    ),
    "sliding window": Term(
        "Attention (and a cache) that keeps only the last W tokens, so the cache stops growing.",
        T15,
        "4. A window, and its sinks",
    ),
    "attention sinks": Term(
        "The first few tokens, on which a model parks much of its attention; a window that keeps them holds.",
        T15,
        "4. A window, and its sinks",
    ),
    "tensor parallelism": Term(
        "Every layer's matrices split across devices (heads, then MLP columns and rows), summed by all-reduces.",
        T16,
        "2. Tensor parallelism: every layer split",
    ),
    "all-reduce": Term(
        "A collective in which every rank ends with the sum of all ranks' tensors.",
        T16,
        "2. Tensor parallelism: every layer split",
    ),
    "pipeline parallelism": Term(
        "Consecutive layers on each device, micro-batches passed from stage to stage.",
        T16,
        "3. Pipeline parallelism: layers in stages",
    ),
    "disaggregated prefill": Term(
        "Prefill and decode on separate workers; the prompt's KV cache is handed from one to the other.",
        T16,
        "5. Prefill and decode apart",
    ),
    "pipeline bubble": Term(
        "The share of a pipeline's run its stages wait: (S - 1) / (M + S - 1) with equal stages.",
        T16,
        "3. Pipeline parallelism: layers in stages",
    ),
}
