"""labkit's public names, found where a user meets them: the flat API (`labkit.__all__`), every folder's
`__all__` (`labkit.engines`, `labkit.fast`, `labkit.models`, `labkit.serving.http`, ...), every labkit
function, class or constant a notebook imports or calls, and the doors of the modules in MODULE_DOORS: the
course tools (`labkit.course`, run by `make student`, `make site` and the slide checks, which no notebook
imports) and the prediction box (`labkit.viz.predict`). Each of those modules says which of its names are
doors in its own `__all__`; one without an `__all__` offers every public function and class it defines. A notebook's code cells are read with `ast`,
nothing run: `from labkit.x import y`, `labkit.x.y(...)`, and `alias.y(...)` where `alias` is a labkit
module the cell imported (`from labkit.viz import batch as batch_plots; batch_plots.plot_x(...)`).

The exercise checkers (`labkit.checks`) are left out: they take a student's answer and have their own
tests in tests/checks. A name is keyed by where it is defined (`labkit.decoding.generate.generate`, the
same function as `labkit.generate`), so each door is counted once.

    >>> names = public_names()
    >>> names["labkit.decoding.generate.generate"]
    'labkit.__all__'
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import types
from pathlib import Path

import labkit

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("labkit.checks",)  # the exercise checkers: tests/checks feeds them students' answers
MODULE_DOORS = ("labkit.course", "labkit.viz.predict")  # a package here: each of its modules


def is_labkit_code(obj: object) -> bool:
    """Whether obj is a function, method or class written in labkit."""
    obj = getattr(obj, "__func__", obj)
    return isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", "").startswith("labkit")


def qualified(obj: object, fallback: str) -> str:
    """Where obj is defined (module.qualname) for a function or class of labkit; else fallback."""
    obj = getattr(obj, "__func__", obj)
    return f"{obj.__module__}.{obj.__qualname__}" if is_labkit_code(obj) else fallback


def resolve(dotted: str) -> object:
    """The object that `dotted` ("labkit.x.y.z") names: the longest module prefix, imported, then its
    attributes (so `labkit.fast.optimize.optimize` is the function in the module, which the package's own
    `optimize` attribute, the same function, hides)."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part)
        return obj
    raise ModuleNotFoundError(dotted)


def folder_exports() -> dict[str, str]:
    """Every name in the __all__ of labkit and of each labkit package below it: dotted name -> source."""
    found: dict[str, str] = {}
    packages = [labkit.__name__] + [
        info.name
        for info in pkgutil.walk_packages(labkit.__path__, "labkit.")
        if info.ispkg and not info.name.startswith(LEFT_OUT)
    ]
    for package in packages:
        for name in getattr(importlib.import_module(package), "__all__", ()):
            found.setdefault(f"{package}.{name}", f"{package}.__all__")
    return found


def module_doors(name: str) -> dict[str, str]:
    """The doors of module `name` (for a package, of each module in it): its `__all__`, or where it has none,
    every public function and class it defines; dotted name -> source."""
    module = importlib.import_module(name)
    found: dict[str, str] = {}
    if hasattr(module, "__path__"):
        for info in pkgutil.iter_modules(module.__path__, f"{name}."):
            found.update(module_doors(info.name))
        return found
    exported = getattr(module, "__all__", None)
    if exported is None:
        exported = [
            key
            for key, value in vars(module).items()
            if not key.startswith("_") and is_labkit_code(value) and value.__module__ == name
        ]
    return {f"{name}.{key}": f"{name}.__all__" for key in exported}


def code_cells(notebook: Path) -> list[ast.Module]:
    """The parsed code cells of a notebook; IPython's magics and shell lines are blanked first."""
    trees = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            lines = "".join(cell["source"]).splitlines()
            trees.append(ast.parse("\n".join("" if line.lstrip()[:1] in "%!" else line for line in lines)))
    return trees


def called_path(call: ast.Call) -> list[str]:
    """['labkit', 'x', 'f'] for a call `labkit.x.f(...)`; [] for a call that is not on a dotted name."""
    parts, func = [], call.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    return [func.id, *reversed(parts)] if isinstance(func, ast.Name) and parts else []


def notebook_names(notebook: Path) -> set[str]:
    """The labkit names one notebook imports or calls, as dotted names. An alias holds from the cell that
    imports it to the end of the notebook, as in a kernel run top to bottom."""
    found: set[str] = set()
    aliases = {"labkit": "labkit"}
    for tree in code_cells(notebook):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labkit"):
                for alias in node.names:
                    found.add(f"{node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                aliases.update(
                    {
                        alias.asname: alias.name
                        for alias in node.names
                        if alias.asname and alias.name.startswith("labkit")
                    }
                )
        for node in ast.walk(tree):
            path = called_path(node) if isinstance(node, ast.Call) else []
            if path and path[0] in aliases:
                found.add(".".join([aliases[path[0]], *path[1:]]))
    return found


def public_names(root: Path = ROOT) -> dict[str, str]:
    """labkit's public doors: qualified name -> where the first user-facing mention of it was found.
    A module (`labkit.viz.batch`, imported whole) is no door itself: its functions the notebook calls are.
    A method called on a class (`labkit.Llama.from_hf`) is its own door."""
    mentions = folder_exports()
    for name in MODULE_DOORS:
        for dotted, source in module_doors(name).items():
            mentions.setdefault(dotted, source)
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        for name in sorted(notebook_names(notebook)):
            mentions.setdefault(name, f"notebooks/{notebook.name}")
    doors: dict[str, str] = {}
    for dotted, source in mentions.items():
        if dotted.startswith(LEFT_OUT) or dotted == "labkit.checks":
            continue
        obj, owner = resolve(dotted), resolve(dotted.rpartition(".")[0])
        if isinstance(obj, types.ModuleType) or not (
            is_labkit_code(obj) or isinstance(owner, types.ModuleType)
        ):
            continue  # a module imported whole, or a method of a plain value (EMBEDDED_MODELS.items)
        name = qualified(obj, dotted)
        doors.setdefault(name, source)
    return doors
