"""Alternative texts written by hand, kept across re-executions of the notebooks.

Every figure gets a text made from what it draws (labkit.viz.alt): right, but a list of axes and values.
Where a figure's point needs words, a person writes its text once, in data/course/alt_texts.json
({notebook stem: {cell id: text}}); `make notebooks` re-executes the notebooks, which rewrites every figure's
generated text, and then `apply_alt_texts` puts the written ones back into the saved outputs' metadata
(`{"image/png": {"alt": text}}`), which JupyterLab and the course's site write into `<img alt>`.

    >>> apply_alt_texts("notebooks/07_prefill_vs_decode_and_metrics.ipynb")
    5
    $ python -m labkit.course.alt_texts notebooks/*.ipynb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from labkit.core.doors import check_table
from labkit.course.notebook_file import check_path, read_notebook

__all__ = ["apply_alt_texts"]

ALT_TEXTS_PATH = Path(__file__).resolve().parents[2] / "data" / "course" / "alt_texts.json"


def written_alt_texts(path: Path = ALT_TEXTS_PATH) -> dict[str, dict[str, str]]:
    """{notebook stem: {cell id: alternative text}}, as written in data/course/alt_texts.json."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def figure_outputs(cell: dict) -> list[dict]:
    """The outputs of a code cell that hold a PNG figure."""
    return [output for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]


def apply_alt_texts(notebook_path: str | Path, texts: dict[str, dict[str, str]] | None = None) -> int:
    """Put the written alternative texts of this notebook's figures into its saved outputs, in place;
    returns how many figures changed. A written text whose cell is gone or holds no figure is an error.

    >>> apply_alt_texts("notebooks/06_kv_cache.ipynb")
    0
    """
    path = check_path("notebook_path", notebook_path)
    if texts is not None:
        check_table("texts", texts, "{cell id: alternative text} dicts by notebook stem", of=dict)
    written = (written_alt_texts() if texts is None else texts).get(path.stem, {})
    if not written:
        return 0
    notebook = read_notebook(path, "notebook_path")
    cells = {cell.get("id"): cell for cell in notebook["cells"]}
    changed = 0
    for cell_id, text in written.items():
        figures = figure_outputs(cells.get(cell_id, {}))
        if not figures:
            raise ValueError(
                f"{path.name}: cell {cell_id!r} holds no figure, yet {ALT_TEXTS_PATH.name} writes its text."
            )
        for output in figures:
            alt = output.setdefault("metadata", {}).setdefault("image/png", {})
            changed += alt.get("alt") != text
            alt["alt"] = text
    if changed:
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


if __name__ == "__main__":
    for name in sys.argv[1:]:
        count = apply_alt_texts(name)
        if count:
            print(f"{name}: {count} written alternative text(s) restored")
