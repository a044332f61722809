"""vLLM's CPU build next to labkit: its OpenAI-compatible server on labkit's own safetensors folder.

vLLM lives in its own environment (`.engines/vllm`, from `make engines`), so a notebook reaches it over
HTTP with the same `openai` client code as any other server. Three things make it start here (measured on
the course's 2-core machines): the CUDA builds of torchvision/torchaudio are removed at install;
the server starts as a module, not through the `vllm` command (which looks up the wrong package name);
and `--enforce-eager` skips a torch.compile step that takes minutes on 2 cores.

    >>> with start_vllm_server() as server:                      # ready in about a minute
    ...     openai.OpenAI(base_url=server.url + "/v1", api_key="none").models.list()
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from labkit.core.arguments import check_choice, check_int, check_seconds
from labkit.engines.install import engine_cache_env, require_vllm
from labkit.fast.processes import check_policy
from labkit.launcher import ServerHandle, check_address, launch, require_free_port, tail
from labkit.models.registry import build_cache, known_model

DEFAULT_CONTEXT = 2048
DEFAULT_KV_CACHE_GIB = 1  # 2048-token requests need 45 MB each for SmolLM2: room for ~22 at once
DTYPES = ("float32", "bfloat16", "float16")  # what vLLM's CPU backend runs
# The libraries vLLM's CPU docs ask to preload (its start-up log warns without them): tcmalloc (Debian's
# libtcmalloc-minimal4, installed by .ci/run) and Intel OpenMP (libiomp5, in vLLM's environment through
# intel-openmp). Measured (vLLM all cores, idle 2-core AMD EPYC, 2 rounds of 3 in turns, tokens/s at 1 and 16
# clients): its defaults 20.6-30.0 and 152-227; both preloaded 28.9-47.8 and 190-267; Intel OpenMP alone
# 29.9-41.2 and 154-234; tcmalloc alone 24.8-28.6 and 177-219.
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
READY_TIMEOUT_S = 300.0  # measured: ready 49-79 s after launch on 2 cores, longer under load
OUT_OF_MEMORY_HINTS = (
    "out of memory",
    "memoryerror",
    "cannot allocate memory",
    "insufficient memory",
    "less than requested memory",
)


def vllm_server_command(
    python: Path,
    folder: Path,
    model: str,
    host: str,
    port: int,
    max_model_len: int,
    dtype: str,
    tensor_parallel_size: int = 1,
) -> list[str]:
    """The vLLM API server on a local Hugging Face folder, served under labkit's model name; with
    tensor_parallel_size > 1, the model split over that many worker processes on this machine."""
    split = ["--tensor-parallel-size", str(tensor_parallel_size), "--distributed-executor-backend", "mp"]
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--served-model-name",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
        "--disable-log-stats",
        *(split if tensor_parallel_size > 1 else []),
    ]


def preloads(python: Path) -> list[Path]:
    """The libraries of TCMALLOC and vLLM's own libiomp5.so (next to `python`'s environment) that exist here.

    >>> [p.name for p in preloads(require_vllm())]
    ['libtcmalloc_minimal.so.4', 'libiomp5.so']
    """
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    return [path for path in (TCMALLOC, iomp) if path.is_file()]


def preload_env(python: Path) -> dict[str, str]:
    """{"LD_PRELOAD": ...} with `preloads(python)` before any preload already set; {} when none exists."""
    paths = [str(path) for path in preloads(python)]
    earlier = os.environ.get("LD_PRELOAD")
    return {"LD_PRELOAD": ":".join(paths + ([earlier] if earlier else []))} if paths else {}


def all_cores_env(cores: int | None = None) -> dict[str, str]:
    """vLLM's CPU settings for one OpenMP thread per core, bound in order, and no core kept for its API server.

    >>> all_cores_env(2)
    {'VLLM_CPU_OMP_THREADS_BIND': '0-1', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}
    """
    cores = cores or os.cpu_count() or 1
    return {"VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def tensor_parallel_env(size: int) -> dict[str, str]:
    """vLLM's CPU settings for `size` tensor-parallel ranks, rank i's one OpenMP thread bound to core i.

    vLLM otherwise reserves `size` cores for its API server and, with `auto`, wants one NUMA node per rank.

    >>> tensor_parallel_env(2)
    {'VLLM_CPU_OMP_THREADS_BIND': '0|1', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}
    """
    check_int("tensor_parallel_size", size, minimum=1, maximum=os.cpu_count() or 1)
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(map(str, range(size))), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def check_heads_divide(folder: Path, size: int) -> None:
    """Raise a ValueError unless the model in `folder` has a number of attention heads that `size` divides.

    vLLM splits attention by heads; a model with fewer KV heads than ranks gets them copied to every rank.
    """
    heads = json.loads((folder / "config.json").read_text())["num_attention_heads"]
    if heads % size:
        raise ValueError(
            f"tensor_parallel_size must divide the model's {heads} attention heads, got {size}; "
            "use 1, or a model such as 'gemma3-270m' (4 heads)."
        )


def start_vllm_server(
    model: str = "smollm2-135m",
    port: int = 0,
    max_model_len: int = DEFAULT_CONTEXT,
    kv_cache_gib: int = DEFAULT_KV_CACHE_GIB,
    dtype: str = "float32",
    host: str = "127.0.0.1",
    timeout: float = READY_TIMEOUT_S,
    wait_policy: str | None = None,
    all_cores: bool = False,
    tensor_parallel_size: int = 1,
    preload: bool = True,
) -> ServerHandle:
    """Start vLLM's OpenAI server on labkit's safetensors cache of `model`; return once /v1/models answers.

    Offline (HF_HUB_OFFLINE=1); vLLM's and inductor's caches stay in .engines/cache. wait_policy:
    OMP_WAIT_POLICY for its processes, "PASSIVE" or "ACTIVE" (None: this process's own). all_cores: its
    OpenMP threads bound to every core and none reserved for its API server (all_cores_env); by default
    vLLM keeps one core for the API server and runs the model on the rest. tensor_parallel_size: the model
    split over that many ranks, one core each (tensor_parallel_env); it must divide the model's attention
    heads (SmolLM2 has 9, Gemma-3-270M 4) and cannot be combined with all_cores. preload: tcmalloc and
    Intel OpenMP in LD_PRELOAD where found, as vLLM's CPU docs ask (`preloads`; False: neither). When the server
    dies while starting, the error carries the end of its log (and says so when memory ran out). Every
    argument is checked first: a bad one raises a ValueError naming it, and no process starts.
    """
    known_model(model)
    check_int("max_model_len", max_model_len, minimum=16)
    check_int("kv_cache_gib", kv_cache_gib, minimum=1)
    check_choice("dtype", dtype, DTYPES)
    check_address(host, port)
    check_seconds("timeout", timeout)
    for name, flag in (("all_cores", all_cores), ("preload", preload)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}.")
    split = tensor_parallel_env(tensor_parallel_size)  # checks it: a whole number from 1 to the cores
    if tensor_parallel_size == 1:
        split = {}  # one rank keeps vLLM's default binding, or all_cores
    if all_cores and split:
        raise ValueError("all_cores and tensor_parallel_size > 1 both bind the cores: pass one of them.")
    folder = build_cache(model)
    if split:
        check_heads_divide(folder, tensor_parallel_size)
    policy = {} if wait_policy is None else {"OMP_WAIT_POLICY": check_policy(wait_policy)}
    python = require_vllm()
    port = require_free_port(host, port)
    command = vllm_server_command(
        python, folder, model, host, port, max_model_len, dtype, tensor_parallel_size
    )
    cores = split or (all_cores_env() if all_cores else {})
    temp = Path(tempfile.mkdtemp(prefix="vllm-temp-"))  # its ranks' rendezvous file, removed at stop
    env = {
        **os.environ,
        **engine_cache_env(),
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        **policy,
        **cores,
        **(preload_env(python) if preload else {}),
        "TMPDIR": str(temp),
    }
    return launch(
        command,
        "vllm-server-",
        f"http://{host}:{port}",
        timeout,
        health_path="/v1/models",
        env=env,
        own_session=True,
        explain=explain_failure,
        on_stop=lambda: remove_rendezvous(temp),
        sweep_shared_memory=True,  # its ranks' message queues (psm_<id>), left behind when a rank is killed
    )


def remove_rendezvous(temp: Path, shared_memory: Path = Path("/dev/shm")) -> None:
    """Remove what a stopped vLLM leaves behind: the file its ranks met through, vllm_dist_<id>, in its own
    temporary folder `temp` (deleted too), and the shared-memory segments of its tensor-parallel all-reduce
    named after that file (vllm_dist_<id>-tp:0-[0-1]-cpushm_<rank>, 4 MB each), which vLLM does not unlink.
    The launcher's sweep removes them too when a rank still maps them at stop; found by name here, they go
    even when the server died before it was stopped.

        >>> remove_rendezvous(Path("/tmp/vllm-temp-ab12"))
    """
    for rendezvous in temp.glob("vllm_dist_*"):
        for segment in shared_memory.glob(rendezvous.name + "-*"):
            segment.unlink(missing_ok=True)
    shutil.rmtree(temp, ignore_errors=True)


def explain_failure(message: str, log: Path) -> str:
    """The start-up error with its cause first: the log's last error line, and a hint when memory ran out."""
    text = tail(log, 50_000)
    errors = [line.strip() for line in text.splitlines() if "Error:" in line]
    cause = f"vLLM did not start: {errors[-1]}\n" if errors else ""
    if any(hint in text.lower() for hint in OUT_OF_MEMORY_HINTS):
        cause += "It ran out of memory: lower kv_cache_gib or max_model_len, or stop other servers.\n"
    return cause + message
