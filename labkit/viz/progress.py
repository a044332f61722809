"""Progress bars in saved notebooks: show where they ended, not where they began.

A tqdm bar in a notebook is an ipywidgets widget. Its saved output keeps the widget's reference plus a
text fallback, and the fallback is the bar as it was first drawn: "0%| | 0/7". Viewers without the
widget state (GitHub, JupyterLab before the kernel runs, text diffs) show that stale start. The final
bar is in the notebook's saved widget state; `finish_progress_fallbacks` copies it into the fallback.

    >>> finish_progress_fallbacks("notebooks/08_quantization.ipynb")
    1
    $ python -m labkit.viz.progress notebooks/*.ipynb
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def final_bar_text(state: dict, model_id: str) -> str | None:
    """The text of a finished tqdm bar from saved widget state: "variants: 100%|██████████| 7/7 [...]".

    A tqdm bar is an HBox of [HTML label, FloatProgress, HTML counts]; None for any other widget.
    """
    box = state.get(model_id, {})
    children = [
        state.get(ref.removeprefix("IPY_MODEL_"), {}) for ref in box.get("state", {}).get("children", [])
    ]
    if box.get("model_name") != "HBoxModel" or [c.get("model_name") for c in children] != [
        "HTMLModel",
        "FloatProgressModel",
        "HTMLModel",
    ]:
        return None
    label, bar, counts = (c["state"] for c in children)
    filled = round(10 * bar.get("value", 0) / bar["max"]) if bar.get("max") else 0
    text = f"{label.get('value', '')}|{'█' * filled}{' ' * (10 - filled)}|{counts.get('value', '')}"
    return html.unescape(text).replace("\u2007", " ")


def finish_progress_fallbacks(path: str | Path) -> int:
    """Rewrite the text fallback of every saved tqdm bar in the notebook at `path` to its final state;
    returns how many were rewritten (the file is written only if one was)."""
    path = Path(path)
    notebook = json.loads(path.read_text())
    state = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    rewritten = 0
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            text = final_bar_text(state, view["model_id"]) if view else None
            if text is not None and output["data"].get("text/plain") != text:
                output["data"]["text/plain"] = text
                rewritten += 1
    if rewritten:
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return rewritten


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: {finish_progress_fallbacks(name)} progress bar(s) finished")
