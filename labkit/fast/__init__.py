"""labkit's fast batch-1 decode path (notebook 13): named steps applied to labkit's Llama, each measured
by `python -m labkit.bench fast` and checked by tests/fast/.

    fuse.py       fused QKV and gate/up projections
    precision.py  weight-only int8 / int4 with the output head too, bfloat16
    onednn_linear.py  float32 weights packed once for oneDNN's matmul (the step "onednn")
    threads.py    the torch thread count, measured (it is a setting of the process, not of the model)
    repack.py     Q4_1 / Q8_0 weights repacked 16 rows at a time: the layout the q4_1 step's layers run on
    allocator.py  glibc's malloc keeps freed memory, so a serving step reuses its pages (a setting of the process)
    optimize.py   `optimize(model, steps)`: the one entry point, with its step names (STEPS)
    roofline.py   bytes read per token and the read bandwidth: how close a path runs to the memory limit
    machine.py    what this machine can do: read bandwidth, a matmul peak per data type, a thread wake-up
    ops.py        what a step dispatches: aten ops (eager) and kernel calls (compiled), counted
    cost.py       the cost model of a step: overhead + thread wake-ups + matmul kernels + KV cache
    regime.py     the regime a step's terms name, with its margin; borderline within the probes' spread
    step_runs.py  one forward pass to time, doing the same work on every call (what cost.py times)
    processes.py  a measurement in a process of its own per OpenMP wait policy (peers at their best)
    static.py     StaticDecoder: a fixed-shape KV cache and decode step, torch.compile'd once; prompt lookup on it
    profile.py    where one decode step's time goes: matmul kernels, attention, everything else

    >>> model, tokenizer = labkit.load_model("smollm2-135m", impl="labkit")
    >>> from labkit.fast import optimize
    >>> optimize(model, steps=("fuse", "int4"))
    >>> StaticDecoder(model, max_length=192, compile=True).generate(prompt_ids, max_new_tokens=128)
"""

from labkit.fast.optimize import STEPS, check_steps, optimize
from labkit.fast.static import StaticDecoder

__all__ = ["STEPS", "StaticDecoder", "check_steps", "optimize"]
