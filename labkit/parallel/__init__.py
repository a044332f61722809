"""Past one machine, run on one (notebook 16): a model split across real processes that talk over
torch.distributed (gloo), measured on this machine's cores.

    ranks            run_ranks: one function in `world` processes joined by gloo, results in rank order
    tensor_parallel  shard_llama: Megatron's split of every layer (heads, MLP columns, vocabulary)
    tensor_run       tp_session: what each rank runs (logits, greedy text, a decode step's cost, the link)
    pipeline         pp_forward, pp_sweep: consecutive stages of layers, micro-batches sent on, the bubble
    cluster          decode_step, layouts: tensor and pipeline parallelism priced on a real cluster
    router           start_router: an OpenAI-API router in front of replicas, round-robin or prefix-aware
    routing_run      compare_routing: both policies on a multi-turn chat trace, prefix-cache hits and TTFT
    disaggregated    a prefill worker and a decode worker, the prompt's KV handed over through shared memory
    disagg_run       compare_disaggregated: disaggregated against colocated replicas, TTFT, TPOT, goodput
"""
