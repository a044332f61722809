"""Past one GPU, on paper: what tensor (TP) and pipeline (PP) parallelism cost a decode step on a real
cluster, for a model that does not fit one GPU (Llama-3-70B in bf16: 141 GB of weights, an 80 GB H100).

A decode step reads every weight once and the KV cache once; split across tp x pp GPUs, each reads its share
from its own memory, and the split adds talk:

    weights per GPU     params x bytes / (tp x pp)            read at the GPU's HBM speed, every step
    KV per GPU          2 x layers/pp x ceil(kv_heads/tp) x head_dim x context x batch x 2 bytes
    TP all-reduce       2 per layer (after attention, after the MLP) of batch x hidden x 2 bytes, ring:
                        2 (p - 1) / p x bytes / bandwidth + 2 (p - 1) x latency
    PP send             batch x hidden x 2 bytes from each stage to the next: bytes / bandwidth + latency
    step                pp x stage + sends: at batch 1 a token visits the stages one after the other (no
                        micro-batching in decode), so pipeline stages add up rather than overlap

    >>> step = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=4, pp=1, batch=1, context=4096)
    >>> round(step.seconds * 1e3, 2), round(step.tokens_per_s)
    (12.56, 80)

`layouts` runs every (tp, pp) of a cluster; `this_machine_link` fits a Link to all-reduces measured here
(labkit.parallel.tensor_run.link_seconds), and `tp_collective_prediction` says what notebook 16's 2-rank split
of SmolLM2 should spend in its 61 collectives a step. Published figures only; nothing here is measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.core.arguments import check_int
from labkit.core.doors import check_number
from labkit.models.footprint import check_size
from labkit.table import Column, format_table


@dataclass(frozen=True)
class Accelerator:
    """One GPU: memory_bytes (its HBM, bytes), hbm_bytes_per_s (read bandwidth, bytes/s), peak_flops (dense
    bf16 FLOP/s, no sparsity)."""

    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops: float

    def __post_init__(self):
        for field in ("memory_bytes", "hbm_bytes_per_s", "peak_flops"):
            check_number(field, getattr(self, field), above=0)


@dataclass(frozen=True)
class Link:
    """A wire between GPUs: bytes_per_s (each direction, bytes/s), latency_s (seconds a message waits
    before its first byte arrives)."""

    name: str
    bytes_per_s: float
    latency_s: float

    def __post_init__(self):
        check_number("bytes_per_s", self.bytes_per_s, above=0)
        check_number("latency_s", self.latency_s, minimum=0)


# NVIDIA H100 datasheet (SXM5): 80 GB HBM3, 3.35 TB/s, 989 TFLOP/s dense bf16 (1,979 with sparsity).
H100_SXM = Accelerator("H100 SXM 80 GB", 80e9, 3.35e12, 989e12)
# NVIDIA A100 datasheet (SXM, 80 GB): HBM2e 2.0 TB/s (2,039 GB/s), 312 TFLOP/s dense bf16.
A100_80GB = Accelerator("A100 80 GB", 80e9, 2.0e12, 312e12)
# NVLink 4 (H100 SXM): 900 GB/s total, 450 GB/s each direction; ~2 us per message through NVSwitch.
NVLINK_4 = Link("NVLink 4", 450e9, 2e-6)
# PCIe 4.0 x16: 32 GB/s raw each direction, ~25 GB/s after protocol overhead; PCIe 5.0 x16 twice that.
PCIE_4 = Link("PCIe 4.0 x16", 25e9, 5e-6)
PCIE_5 = Link("PCIe 5.0 x16", 50e9, 5e-6)
# Ethernet: 100 Gb/s = 12.5 GB/s, ~10 us through the kernel's TCP stack and a switch; 25 Gb/s = 3.125 GB/s.
ETHERNET_100G = Link("Ethernet 100 Gb/s", 12.5e9, 10e-6)
ETHERNET_25G = Link("Ethernet 25 Gb/s", 3.125e9, 10e-6)
# InfiniBand NDR: 400 Gb/s = 50 GB/s per port, ~2 us with RDMA (no kernel on the path).
INFINIBAND_NDR = Link("InfiniBand NDR 400 Gb/s", 50e9, 2e-6)


@dataclass(frozen=True)
class ModelDims:
    """The sizes a parallel split depends on (ModelShape lacks the hidden, MLP and vocabulary widths).
    n_params counts a Llama of these sizes: attention, SwiGLU MLP, two norms a layer, embedding and head."""

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = False  # the head reuses the embedding matrix

    def __post_init__(self):
        for field in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "intermediate", "vocab"):
            check_size(field, getattr(self, field))

    @property
    def n_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.n_layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


# config.json of meta-llama/Meta-Llama-3-70B (70.55e9 parameters by this count; the card says 70.6B)
LLAMA_3_70B = ModelDims("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256)
# config.json of HuggingFaceTB/SmolLM2-135M (134,515,008 parameters, head tied to the embedding)
SMOLLM2_135M = ModelDims("smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, tied=True)


def dims_of(model_or_config) -> ModelDims:
    """ModelDims of a ModelDims, labkit's Llama (or its LlamaConfig) or a transformers model or config."""
    if isinstance(model_or_config, ModelDims):
        return model_or_config
    config = getattr(model_or_config, "config", model_or_config)

    def get(*names):
        for name in names:
            if getattr(config, name, None) is not None:
                return getattr(config, name)
        raise TypeError(
            f"model: {type(config).__name__} has no {' or '.join(names)}; pass a ModelDims (LLAMA_3_70B), "
            "labkit's Llama, a transformers model, or either's config."
        )

    heads, hidden = get("n_heads", "num_attention_heads"), get("hidden_size")
    return ModelDims(
        getattr(config, "name_or_path", None) or "model",
        get("n_layers", "num_hidden_layers"),
        hidden,
        heads,
        get("n_kv_heads", "num_key_value_heads"),
        getattr(config, "head_dim", None) or hidden // heads,
        get("intermediate_size"),
        get("vocab_size"),
        bool(getattr(config, "tie_word_embeddings", False)),
    )


def check_link(name: str, link) -> Link:
    if not isinstance(link, Link):
        raise TypeError(
            f"{name} must be a labkit.parallel.cluster.Link (NVLINK_4, ETHERNET_100G, ...), got {link!r}."
        )
    return link


def ring_all_reduce_seconds(nbytes: float, ranks: int, link: Link) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `ranks` ranks: each rank sends and receives 2 (p - 1) / p
    of the message (reduce-scatter, then all-gather) in 2 (p - 1) steps, each paying the latency once.

        >>> ring_all_reduce_seconds(16384, 4, NVLINK_4) * 1e6   # 1.5 x 16 KB / 450 GB/s + 6 x 2 us
        12.054613333333334
    """
    return 2 * ring_all_gather_seconds(nbytes, ranks, link)  # a reduce-scatter costs what an all-gather does


def ring_all_gather_seconds(nbytes: float, ranks: int, link: Link) -> float:
    """Seconds of a ring all-gather whose gathered result is `nbytes` (each rank brings nbytes / ranks):
    (p - 1) / p x nbytes / bandwidth + (p - 1) x latency, half an all-reduce.

        >>> ring_all_gather_seconds(2e6, 2, PCIE_4) * 1e6   # 1 MB each way at 25 GB/s + 5 us
        45.0
    """
    check_number("nbytes", nbytes, minimum=0)
    check_int("ranks", ranks, minimum=1)
    link = check_link("link", link)
    if ranks == 1:
        return 0.0
    return (ranks - 1) / ranks * nbytes / link.bytes_per_s + (ranks - 1) * link.latency_s


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of `batch` sequences on tp x pp GPUs. Bytes per GPU; seconds per step, the per-stage
    terms counted once for each of the pp stages the token visits."""

    tp: int
    pp: int
    batch: int
    context: int
    fits: bool  # weights + KV of one GPU within its memory
    memory_per_gpu: float  # bytes
    weight_read_s: float  # all stages: weight bytes per GPU / HBM bandwidth, x pp
    kv_read_s: float  # all stages: KV bytes per GPU / HBM bandwidth, x pp
    compute_s: float  # all stages: 2 x params x batch / (tp x pp) / peak FLOP/s, x pp
    all_reduce_s: float  # 2 per layer, every layer of every stage
    send_s: float  # pp - 1 activations passed from stage to stage
    seconds: float  # pp x max(reads, compute) + all-reduces + sends
    tokens_per_s: float  # batch / seconds


def decode_step(
    model,
    accelerator: Accelerator,
    link: Link,
    tp: int,
    pp: int,
    batch: int,
    context: int,
    bytes_per_weight: float = 2,
    pp_link: Link | None = None,
) -> DecodeStep:
    """A decode step's cost on tp x pp `accelerator`s: TP's all-reduces over `link`, PP's sends over `pp_link`
    (`link` if None). Weights split evenly over the tp x pp GPUs; KV heads over tp (replicated where tp
    exceeds them, as vLLM does), layers over pp; activations and KV in 2-byte bf16. A stage reads its
    weights and KV or computes, whichever is slower (a roofline); at batch 1 the stages run one after the
    other (no micro-batching during decode), and a larger batch moves through them as one.

        >>> step = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=2, pp=1, batch=1, context=4096)
        >>> step.fits, round(step.memory_per_gpu / 1e9, 1), round(step.weight_read_s * 1e3, 2)
        (True, 71.2, 21.06)
    """
    dims = dims_of(model)
    if not isinstance(accelerator, Accelerator):
        raise TypeError(
            f"accelerator must be a labkit.parallel.cluster.Accelerator (H100_SXM), got {accelerator!r}."
        )
    link = check_link("link", link)
    pp_link = link if pp_link is None else check_link("pp_link", pp_link)
    check_int("tp", tp, minimum=1, maximum=dims.n_heads, note="at most one query head per GPU")
    check_int("pp", pp, minimum=1, maximum=dims.n_layers, note="at least one layer per stage")
    check_int("batch", batch, minimum=1)
    check_int("context", context, minimum=0)
    check_number("bytes_per_weight", bytes_per_weight, above=0)
    gpus, layers = tp * pp, math.ceil(dims.n_layers / pp)
    weights = dims.n_params * bytes_per_weight / gpus
    kv = 2 * layers * math.ceil(dims.n_kv_heads / tp) * dims.head_dim * context * batch * 2
    activation = batch * dims.hidden * 2  # bytes a token batch's hidden state takes in bf16
    weight_s, kv_s = weights / accelerator.hbm_bytes_per_s, kv / accelerator.hbm_bytes_per_s
    compute_s = 2 * dims.n_params * batch / gpus / accelerator.peak_flops
    all_reduce_s = 2 * dims.n_layers * ring_all_reduce_seconds(activation, tp, link)
    send_s = (pp - 1) * (activation / pp_link.bytes_per_s + pp_link.latency_s)
    seconds = pp * max(weight_s + kv_s, compute_s) + all_reduce_s + send_s
    return DecodeStep(
        tp, pp, batch, context, weights + kv <= accelerator.memory_bytes, weights + kv,
        pp * weight_s, pp * kv_s, pp * compute_s, all_reduce_s, send_s, seconds, batch / seconds,
    )  # fmt: skip


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(
    model,
    accelerator: Accelerator,
    intra_link: Link,
    inter_link: Link,
    gpus_per_node: int,
    nodes: int,
    batch: int,
    context: int,
    bytes_per_weight: float = 2,
) -> list[DecodeStep]:
    """`decode_step` for every layout of the cluster: tp a divisor of gpus_per_node (TP stays inside a node,
    over intra_link), pp a divisor of the GPUs left (gpus_per_node x nodes / tp). PP's sends use inter_link
    once tp x pp spans more than one node (every send counted at the slower link: a bound), else intra_link.

        >>> rows = layouts(LLAMA_3_70B, H100_SXM, NVLINK_4, ETHERNET_100G, 4, 2, batch=1, context=4096)
        >>> [(r.tp, r.pp) for r in rows if r.fits]
        [(1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2)]
    """
    check_int("gpus_per_node", gpus_per_node, minimum=1)
    check_int("nodes", nodes, minimum=1)
    intra_link, inter_link = check_link("intra_link", intra_link), check_link("inter_link", inter_link)
    rows = []
    for tp in divisors(gpus_per_node):
        for pp in divisors(gpus_per_node * nodes // tp):
            link = inter_link if tp * pp > gpus_per_node else intra_link
            rows.append(
                decode_step(model, accelerator, intra_link, tp, pp, batch, context, bytes_per_weight, link)
            )
    return rows


LAYOUT_COLUMNS = [
    Column("tp", 3),
    Column("pp", 3),
    Column("fits", 5),
    Column("GB/GPU", 8, ".1f"),
    Column("weights ms", 11, ".2f"),
    Column("KV ms", 7, ".2f"),
    Column("all-red ms", 11, ".2f"),
    Column("send ms", 8, ".3f"),
    Column("step ms", 8, ".2f"),
    Column("tok/s", 8, ".0f"),
]


def format_layouts(rows: list[DecodeStep]) -> str:
    """`layouts`' rows as a text table (labkit.table): a layout that does not fit says "-" for its times.

    >>> table = format_layouts(layouts(LLAMA_3_70B, H100_SXM, NVLINK_4, NVLINK_4, 8, 1, 1, 4096))
    >>> print(table.splitlines()[0][:22])
     tp  pp  fits   GB/GPU
    """
    if not isinstance(rows, list | tuple) or not all(isinstance(row, DecodeStep) for row in rows):
        raise TypeError(
            f"rows must be a list of DecodeStep (what layouts returns), got {type(rows).__name__}."
        )
    cells = []
    for r in rows:
        times = [r.weight_read_s * 1e3, r.kv_read_s * 1e3, r.all_reduce_s * 1e3, r.send_s * 1e3]
        times += [r.seconds * 1e3, r.tokens_per_s]
        cells.append(
            [r.tp, r.pp, "yes" if r.fits else "no", r.memory_per_gpu / 1e9] + (times if r.fits else ["-"] * 6)
        )
    return format_table(LAYOUT_COLUMNS, cells, gap=" ")


def this_machine_link(
    all_reduce_seconds_by_size: dict[int, float], ranks: int = 2, bytes_per_number: int = 4
) -> Link:
    """The Link whose ring all-reduce best matches measured times ({float32 numbers: seconds}, what
    labkit.parallel.tensor_run.link_seconds returns): a least-squares line seconds = slope x bytes +
    intercept, read as slope = 2 (p - 1) / p / bandwidth and intercept = 2 (p - 1) x latency (0 if the fit
    goes below).

        >>> link = this_machine_link({1_000: 60e-6, 100_000: 140e-6, 1_000_000: 860e-6})
        >>> round(link.bytes_per_s / 1e9, 2), round(link.latency_s * 1e6, 1)
        (5.0, 29.8)
    """
    if not isinstance(all_reduce_seconds_by_size, dict) or len(all_reduce_seconds_by_size) < 2:
        raise ValueError(
            "all_reduce_seconds_by_size must be a dict {numbers: seconds} of at least two message sizes "
            f"(link_seconds' result), got {all_reduce_seconds_by_size!r}."
        )
    check_int("ranks", ranks, minimum=2, note="a link needs two ranks")
    check_int("bytes_per_number", bytes_per_number, minimum=1)
    for size, seconds in all_reduce_seconds_by_size.items():
        check_int("a message size", size, minimum=1)
        check_number(f"the seconds of size {size}", seconds, above=0)
    xs = [size * bytes_per_number for size in all_reduce_seconds_by_size]
    ys = list(all_reduce_seconds_by_size.values())
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0
    if slope <= 0:
        raise ValueError(
            "the measured times do not grow with the message size, so no bandwidth can be read from them: "
            "measure sizes further apart (from 1,000 to 1,000,000 numbers)."
        )
    intercept = max(0.0, mean_y - slope * mean_x)
    steps = 2 * (ranks - 1)
    return Link("this machine (fitted)", steps / ranks / slope, intercept / steps)


@dataclass(frozen=True)
class TPCollectives:
    """A tensor-parallel decode step's collectives: `calls` of them, all-reduces of `all_reduce_bytes` each
    (one after attention, one after the MLP, each layer) and one all-gather of the head's logits."""

    calls: int
    all_reduce_bytes: int
    all_reduce_seconds: float  # one
    all_gather_bytes: int  # the gathered row: every rank's slice, padded to the largest
    all_gather_seconds: float
    seconds: float  # all of them: 2 x layers x all-reduce + all-gather


def tp_collective_prediction(
    model, link: Link, batch: int = 1, world: int = 2, bytes_per_number: int = 4
) -> TPCollectives:
    """What labkit.parallel.tensor_parallel's split spends talking in one decode step (batch tokens): 2 x
    layers all-reduces of batch x hidden numbers, then the head's all-gather of world x ceil(vocab / world)
    numbers a token. SmolLM2, 2 float32 ranks: 60 all-reduces of 2,304 bytes and one all-gather of 196,608.

        >>> link = Link("gloo", 1e9, 50e-6)
        >>> round(tp_collective_prediction(SMOLLM2_135M, link).seconds * 1e3, 3)   # 61 calls
        6.287
    """
    dims, link = dims_of(model), check_link("link", link)
    check_int("batch", batch, minimum=1)
    check_int("world", world, minimum=1)
    check_int("bytes_per_number", bytes_per_number, minimum=1)
    reduce_bytes = batch * dims.hidden * bytes_per_number
    gather_bytes = world * math.ceil(dims.vocab / world) * batch * bytes_per_number
    one_reduce = ring_all_reduce_seconds(reduce_bytes, world, link)
    gather = ring_all_gather_seconds(gather_bytes, world, link)
    calls = 2 * dims.n_layers + 1 if world > 1 else 0
    seconds = 2 * dims.n_layers * one_reduce + gather
    return TPCollectives(calls, reduce_bytes, one_reduce, gather_bytes, gather, seconds)
