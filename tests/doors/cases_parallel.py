"""Bad-input cases of labkit's parallel/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.parallel.cluster import H100_SXM, LLAMA_3_70B, NVLINK_4, decode_step, this_machine_link
from labkit.parallel.disagg_run import compare_disaggregated
from labkit.parallel.router import start_router
from labkit.parallel.routing_run import chat_trace, compare_routing
from labkit.parallel.vllm_split import compare_if_installed, compare_vllm_split

CLUSTER = "labkit.parallel.cluster"

CASES = [
    wrong("labkit.parallel.ranks.run_ranks", words=("function",)),
    wrong("labkit.parallel.tensor_run.tp_session", words=("ids",)),
    wrong("labkit.parallel.tensor_run.decode_costs", words=("decode_costs", "Llama")),
    wrong("labkit.parallel.pipeline.pp_sweep", words=("ids",)),
    wrong("labkit.parallel.pipeline.stage_layers", words=("stage_layers", "Llama")),
    wrong("labkit.parallel.pipeline.bubble_fraction", words=("stages",)),
    # a split wider than the model's heads, a link measured at one size only, times that fall with size
    Door(
        f"{CLUSTER}.decode_step",
        lambda kit: decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=128, pp=1, batch=1, context=4096),
        ValueError,
        ("tp", "at most one query head per GPU", "128"),
    ),
    Door(
        f"{CLUSTER}.this_machine_link",
        lambda kit: this_machine_link({576: 1e-4}),
        ValueError,
        ("all_reduce_seconds_by_size", "at least two message sizes"),
    ),
    Door(
        f"{CLUSTER}.this_machine_link",
        lambda kit: this_machine_link({576: 2e-4, 49152: 1e-4}),
        ValueError,
        ("do not grow with the message size",),
    ),
    wrong(f"{CLUSTER}.Accelerator", words=("memory_bytes",)),
    wrong(f"{CLUSTER}.Link", words=("bytes_per_s",)),
    wrong(f"{CLUSTER}.ModelDims", words=("n_layers",)),
    wrong(f"{CLUSTER}.dims_of", words=("model", "ModelDims")),
    wrong(f"{CLUSTER}.ring_all_reduce_seconds", words=("nbytes",)),
    wrong(f"{CLUSTER}.ring_all_gather_seconds", words=("nbytes",)),
    wrong(f"{CLUSTER}.decode_step", words=("model",)),
    wrong(f"{CLUSTER}.layouts", words=("gpus_per_node",)),
    wrong(f"{CLUSTER}.format_layouts", words=("rows", "DecodeStep")),
    wrong(f"{CLUSTER}.this_machine_link", words=("all_reduce_seconds_by_size",)),
    wrong(f"{CLUSTER}.tp_collective_prediction", words=("model",)),
    wrong("labkit.parallel.router.start_router", words=("urls",)),
    Door(
        "labkit.parallel.router.start_router",
        lambda kit: start_router(["http://127.0.0.1:1"], "random"),
        ValueError,
        ("policy", "round-robin", "prefix"),
    ),
    Door(
        "labkit.parallel.routing_run.compare_routing",
        lambda kit: compare_routing(policies=("random",)),
        ValueError,
        ("policies", "round-robin"),
    ),
    Door(
        "labkit.parallel.routing_run.chat_trace",
        lambda kit: chat_trace(n_conversations=0),
        ValueError,
        ("n_conversations",),
    ),
    wrong("labkit.parallel.routing_run.routing_table", words=("results", "RoutingResult")),
    wrong("labkit.parallel.vllm_split.vllm_split_table", words=("runs", "SplitRun")),
    Door(
        "labkit.parallel.vllm_split.compare_if_installed",
        lambda kit: compare_if_installed(repeats=0),
        ValueError,
        ("repeats",),
    ),
    Door(
        "labkit.parallel.vllm_split.compare_vllm_split",
        lambda kit: compare_vllm_split(prompts=[]),
        ValueError,
        ("prompts",),
    ),
    wrong("labkit.parallel.disaggregated.mixed_trace", words=("tokenizer",)),
    # no required argument: each bad one is refused before a worker starts
    Door(
        "labkit.parallel.disagg_run.compare_disaggregated",
        lambda kit: compare_disaggregated(tpot_target_s=-1),
        ValueError,
        ("tpot_target_s",),
    ),
    Door(
        "labkit.parallel.disagg_run.compare_disaggregated",
        lambda kit: compare_disaggregated(quick="yes"),
        TypeError,
        ("quick", "True or False"),
    ),
    Door(
        "labkit.parallel.disagg_run.compare_disaggregated",
        lambda kit: compare_disaggregated(colocated_chunked=1),
        TypeError,
        ("colocated_chunked", "True or False"),
    ),
    Door(
        "labkit.parallel.disagg_run.compare_disaggregated",
        lambda kit: compare_disaggregated(trace=[1, 2]),
        TypeError,
        ("trace", "TraceRequest"),
    ),
    wrong("labkit.parallel.disagg_run.disaggregated_table", words=("results", "DisaggResult")),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    **{
        f"{CLUSTER}.{name}": "a constant: a published preset the notebook reads, not a call"
        for name in [
            "H100_SXM",
            "A100_80GB",
            "NVLINK_4",
            "PCIE_4",
            "PCIE_5",
            "ETHERNET_100G",
            "ETHERNET_25G",
            "INFINIBAND_NDR",
            "LLAMA_3_70B",
            "SMOLLM2_135M",
        ]
    },
}
