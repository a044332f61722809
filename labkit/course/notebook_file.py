"""A notebook's file, read and checked once for every course tool: each tool reads .ipynb files and walks their
cells, so a path that is not a path, a file that is not JSON, or JSON that is not a Jupyter notebook (nbformat 4:
an object with a list of "cells", each a dict with its "cell_type" and "source") is refused at the door, with
the file's name, not deep inside json or the first loop over the cells.

    >>> read_notebook("notebooks/06_kv_cache.ipynb")["nbformat"]
    4
    >>> read_notebook("README.md")
    Traceback (most recent call last):
    ValueError: path 'README.md' must be a Jupyter notebook (nbformat 4 JSON with a list of "cells"), but it is
    not JSON: Expecting value: line 1 column 1 (char 0).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from labkit.core.doors import described

__all__ = ["read_notebook"]

NOTEBOOK = 'a Jupyter notebook (nbformat 4 JSON with a list of "cells")'
CELL = 'a dict with its "cell_type" and "source"'


def check_path(name: str, value: object) -> Path:
    """value as a Path, if it is a str or a path; else a TypeError naming `name`.

    >>> check_path("out_dir", "student")
    PosixPath('student')
    """
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file or folder's path (a str or Path), got {described(value)}.")
    return Path(value)


def check_paths(name: str, value: object) -> list[Path]:
    """value as a list of Paths, if it is a list (or any iterable but text) of paths; else a TypeError naming
    `name` (one path given alone is refused: its letters would be read as paths).

    >>> check_paths("paths", "notebooks/06_kv_cache.ipynb")
    Traceback (most recent call last):
    TypeError: paths must be a list of notebook paths, got str; wrap one path as [path].
    """
    if isinstance(value, (str, bytes, os.PathLike, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a list of notebook paths, got {described(value)}; wrap one path as [path]."
        )
    return [check_path(f"{name}[{index}]", path) for index, path in enumerate(value)]


def cells_problem(cells: object) -> str:
    """What is wrong with a notebook's list of cells ("" when nothing is): not a list, or its first bad cell."""
    if not isinstance(cells, list):
        return f"its cells are {described(cells)}, not a list"
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            return f"cells[{index}] is {described(cell)}, not {CELL}"
        missing = [key for key in ("cell_type", "source") if key not in cell]
        if missing:
            return f"cells[{index}] has no {' or '.join(map(repr, missing))}"
    return ""


def check_cells(name: str, value: object) -> list[dict]:
    """value, if it is a notebook's list of cells (each a dict with its "cell_type" and "source"); else a
    TypeError naming `name` and the first bad cell.

    >>> check_cells("cells", [{"cell_type": "code", "source": "x = 1"}, "y = 2"])
    Traceback (most recent call last):
    TypeError: cells must be a notebook's list of cells (notebook["cells"]), but its cells[1] is str, not a dict...
    """
    problem = cells_problem(value)
    if problem:
        raise TypeError(f'{name} must be a notebook\'s list of cells (notebook["cells"]), but {problem}.')
    return value


def check_notebook(name: str, value: object) -> dict:
    """value, if it is a notebook as loaded from its JSON; else a ValueError naming `name` and what is wrong.

    >>> check_notebook("notebook", {"metadata": {}})
    Traceback (most recent call last):
    ValueError: notebook must be a Jupyter notebook (nbformat 4 JSON with a list of "cells"), but it has no "cells".
    """
    if not isinstance(value, dict):
        problem = f"got {described(value)}"
    else:
        problem = 'it has no "cells"' if "cells" not in value else cells_problem(value["cells"])
    if problem:
        raise ValueError(f"{name} must be {NOTEBOOK}, but {problem}.")
    return value


def read_notebook(path: str | Path, name: str = "path") -> dict:
    """The notebook at `path`, loaded from its JSON and checked (`check_notebook`); a ValueError naming `name`
    and the file when it is not JSON or not a notebook. A missing file is the OS's own FileNotFoundError.

    >>> len(read_notebook("notebooks/06_kv_cache.ipynb")["cells"]) > 0
    True
    """
    path = check_path(name, path)
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{name} {str(path)!r} must be {NOTEBOOK}, but it is not JSON: {error}.") from None
    return check_notebook(f"{name} {str(path)!r}", notebook)
