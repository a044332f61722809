"""Bad-input cases of labkit's fast/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

import subprocess
from unittest import mock

import pytest
from door import Door, wrong

import labkit
from labkit.fast.cost import kv_bytes_read
from labkit.fast.dot_exercise import CompileError, build_matvec, missing_tools
from labkit.fast.optimize import optimize
from labkit.fast.static import slots_for
from labkit.fast.threads import using_threads

COMPILER = subprocess.Popen  # the real one: this case's compiler may run where other cases' processes may not


def optimize_twice(first: tuple[str, ...], then: tuple[str, ...]):
    """optimize on a fresh tiny model (not the shared fixture: optimize changes a model in place), then again."""
    return optimize(optimize(labkit.tiny_model(impl="labkit"), first), then)


def compile_student_loop(group_dot: str):
    """build_matvec on a student's group_dot, the compiler allowed to run; skipped where this machine has
    no compiler or ninja."""
    if missing_tools():
        pytest.skip(f"cannot compile C++ here: {missing_tools()} missing")
    with mock.patch.object(subprocess, "Popen", COMPILER):
        return build_matvec(group_dot)


CASES = [
    # a negative count, and a thread count of 0 refused at the call, not when the block is entered
    Door("labkit.fast.static.slots_for", lambda kit: slots_for(-5, 8192), ValueError, ("needed", "-5")),
    Door(
        "labkit.fast.threads.using_threads", lambda kit: using_threads(0), ValueError, ("count", "1 or more")
    ),
    # a second set of steps on a model optimized already: both sets named, and the way out
    Door(
        "labkit.fast.optimize.optimize",
        lambda kit: optimize_twice(("int8",), ("int4",)),
        ValueError,
        ("steps ('int4',)", "applied already ('int8',)", "at most one of onednn, int8, int4", "fresh model"),
    ),
    Door(
        "labkit.fast.cost.kv_bytes_read",
        lambda kit: kv_bytes_read(kit.tiny, rows=-2, context=10, tokens=1),
        ValueError,
        ("rows", "-2"),
    ),
    # the compiler's first error and its line of the student's loop, not the build log (a real compile, ~20 s)
    Door(
        "labkit.fast.dot_exercise.build_matvec",
        lambda kit: compile_student_loop("int32_t dot = 0;\nreturn dot * w;"),
        CompileError,
        ("group_dot does not compile, line 2: error:", "return dot * w;"),
        slow=True,
    ),
    wrong("labkit.fast.cost.cost_table", words=("named",)),
    wrong("labkit.fast.cost.measure_step", words=("model",)),
    wrong("labkit.fast.dot_exercise.build_matvec", words=("group_dot",)),
    wrong("labkit.fast.dot_exercise.matvec_bandwidth", words=("matvec",)),
    wrong("labkit.fast.dot_exercise.race_with_kernel", words=("weight",)),
    wrong("labkit.fast.machine.spread_suffix", words=("spread",)),
    wrong("labkit.fast.optimize.check_steps", words=("steps",)),
    wrong("labkit.fast.optimize.optimize", words=("model",)),
    wrong("labkit.fast.profile.step_breakdown", words=("decoder",)),
    wrong("labkit.fast.q4_linear.q4_1_linear", words=("weight",)),
    wrong("labkit.fast.q4_linear.quantize_q4_1", words=("weight",)),
    wrong("labkit.fast.static.StaticDecoder", words=("model",)),
    wrong("labkit.fast.static.slots_for", words=("needed",)),
    wrong("labkit.fast.threads.using_threads", words=()),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.fast.STEPS": "a constant: data the notebooks read, not a call",
    "labkit.fast.processes.WAIT_POLICIES": "a constant: data the notebooks read, not a call",
    "labkit.fast.dot_exercise.missing_tools": "takes no argument: which build tools this machine lacks",
    "labkit.fast.kernel.load_kernel": "only a reload flag; it never raises, its status says what failed",
    "labkit.fast.machine.measure_machine": "takes no argument: measures this machine",
    "labkit.fast.processes.current_policy": "takes no argument: reads OMP_WAIT_POLICY",
    "labkit.fast.roofline.read_bandwidth": "only optional sizes of a measurement with sound defaults",
    "labkit.fast.static.inductor_cache": "takes no argument: a folder from the environment",
}
