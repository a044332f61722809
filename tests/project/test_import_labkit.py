"""`import labkit` loads the flat API and no more: not the HTTP server, the engines, the benchmarks or the
figures, whose dependencies (FastAPI, uvicorn, httpx, matplotlib) a notebook that never serves need not pay
for. Every public name still resolves: `labkit.checks` and the folders load on first use (PEP 562).

Measured in a fresh interpreter, since this test session has long since imported everything."""

import json
import subprocess
import sys

import pytest

NOT_ON_IMPORT = ("labkit.serving.http", "labkit.checks", "labkit.engines", "labkit.benchmarks", "labkit.viz")
HEAVY_DEPENDENCIES = ("fastapi", "uvicorn", "httpx", "matplotlib", "ipywidgets")

PROBE = """
import json, sys
import labkit
loaded = sorted(sys.modules)
unresolved = []
for name in labkit.__all__:
    try:
        getattr(labkit, name)
    except AttributeError:
        unresolved.append(name)
from labkit import checks
print(json.dumps({"loaded": loaded, "unresolved": unresolved, "checks": checks.__name__,
                  "checker": checks.check_parameter_count.__module__}))
"""


@pytest.fixture(scope="module")
def fresh_import():
    """What a fresh `import labkit` loaded, and which public names then failed to resolve."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_labkit_loads_no_server_engine_benchmark_or_figure(fresh_import):
    loaded = fresh_import["loaded"]
    too_early = [m for m in loaded if any(m == p or m.startswith(p + ".") for p in NOT_ON_IMPORT)]
    assert not too_early, f"`import labkit` loaded {too_early}"
    heavy = [m for m in HEAVY_DEPENDENCIES if m in loaded]
    assert not heavy, f"`import labkit` loaded {heavy}"
    assert "labkit.core.llama" in loaded and "labkit.decoding.generate" in loaded  # the flat API's own


def test_every_public_name_resolves_after_a_fresh_import(fresh_import):
    assert fresh_import["unresolved"] == []
    assert fresh_import["checks"] == "labkit.checks"
    assert fresh_import["checker"] == "labkit.checks.foundation"


def test_folders_load_on_first_use_and_unknown_names_say_so():
    import labkit.checks

    assert labkit.checks is sys.modules["labkit.checks"]
    assert labkit.serving is sys.modules["labkit.serving"]
    assert set(labkit.__all__) <= set(dir(labkit))
    for name in ("no_such_name", "_private", "__wrapped__"):
        with pytest.raises(AttributeError, match=f"module 'labkit' has no attribute '{name}'"):
            getattr(labkit, name)
