"""Every saved timing names its machine: a notebook whose saved outputs print a duration or a rate (ms,
tokens/s, GB/s ...) prints `labkit.this_machine.run_line()` under its set-up, and the saved line says the
run was idle. The prose quotes that saved run ("the saved run, a 2-core AMD EPYC"), so a reader can tell
its numbers from their own, and a saved run made on a busy machine is caught here, not by a reader.
Only the notebooks' JSON is read: nothing runs.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
UNITS = r"(?:ms|us|µs|tokens/s|tok/s|tokens per second|GB/s|GFLOP/s)"
TIMING = re.compile(
    rf"\d\s?{UNITS}(?![\w/])"  # a number with its unit: "75.1 us", "36.4 GB/s"
    rf"|^.*(?<![\w/]){UNITS}(?![\w/]).*\n(?=.*\d)"  # a table's header naming a unit over a row of numbers
    r"|\dx the time of",  # a measured time as a ratio: "1.71x the time of one"
    re.M,
)
RUN_LINE = re.compile(
    r"^this run: (?P<machine>.+) · vector units: .+ · other work \d+% of the cores: (?P<state>\w+)", re.M
)


def printed(cell: dict) -> str:
    """What a code cell's saved outputs print (streams and plain text)."""
    texts = []
    for output in cell.get("outputs", []):
        texts.append("".join(output.get("text", "")))
        texts.append("".join(output.get("data", {}).get("text/plain", "")))
    return "\n".join(texts)


def timing_notebooks() -> list[Path]:
    """The notebooks whose saved outputs print a timing."""
    return [
        path
        for path in NOTEBOOKS
        if any(TIMING.search(printed(cell)) for cell in json.loads(path.read_text())["cells"])
    ]


def test_the_scan_finds_the_timing_notebooks():
    # the notebooks that measure speed: a scan that found none would pass every notebook below
    names = {path.name[:2] for path in timing_notebooks()}
    assert {"00", "06", "07", "08", "09", "10", "11", "12", "13"} <= names, names


def test_the_scan_reads_tables_and_ratios():
    table = "task       prefill ms  decode tok/s\nextractive        365  16.8 [16.6-17.9]\n"
    assert TIMING.search(table)
    assert TIMING.search("2 new token(s) in one pass: 1.71x the time of one")
    assert not TIMING.search("replace None with the two measured times (in seconds)")


@pytest.mark.parametrize("path", timing_notebooks(), ids=lambda path: path.name[:2])
def test_a_saved_timing_names_its_idle_machine(path):
    cells = json.loads(path.read_text())["cells"]
    lines = [
        match for cell in cells if cell["cell_type"] == "code" for match in RUN_LINE.finditer(printed(cell))
    ]
    assert lines, f"{path.name} saves timings but no `print(run_line())` output names the machine they ran on"
    first_timing = next(i for i, cell in enumerate(cells) if TIMING.search(printed(cell)))
    first_line = next(i for i, cell in enumerate(cells) if RUN_LINE.search(printed(cell)))
    assert first_line < first_timing, (
        f"{path.name}: the machine is named after the first timing (cell {first_timing})"
    )
    assert all(line["state"] == "idle" for line in lines), (
        f"{path.name}'s saved run was made on a busy machine ({lines[0].group(0)}): re-execute it idle"
    )
