"""The modules a source file imports through importlib by name, read with `ast` (nothing is imported).

`importlib.import_module(TOPICS[topic])` is an import like any other when the name is written out: a
literal, or a module-level list, tuple, set or dict (its values) of literals. tests/project/test_structure.py
adds these to its import graph, and lists the calls whose labkit name is built at run time instead.

    >>> tree = ast.parse('TOPICS = {"decode": "labkit.benchmarks.decode"}\nimport_module(TOPICS[name])')
    >>> list(dynamic_imports(tree))
    ['labkit.benchmarks.decode']
"""

import ast
from collections.abc import Iterator


def literal_strings(node: ast.expr | None) -> list[str]:
    """The text a literal holds: a string, or the strings of a list, tuple or set, or a dict's string values."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    items = node.values if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def module_literals(tree: ast.Module) -> dict[str, list[str]]:
    """name -> the strings it holds, for every module-level `NAME = <literal>` (TOPICS = {"decode": "..."})."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name) and isinstance(node, (ast.Assign, ast.AnnAssign)):
                found[target.id] = literal_strings(node.value)
    return found


def is_import_module(call: ast.Call) -> bool:
    """Whether `call` is importlib.import_module(...) (or `import_module(...)`, imported by name)."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )


def dynamic_imports(tree: ast.Module) -> Iterator[str]:
    """The modules `importlib.import_module` is given by name: a literal (`import_module("labkit.x")`), or a
    module-level literal or mapping of literals (`import_module(TOPICS[topic])`, `import_module(MODULES)`,
    `import_module(TOPICS.get(topic))`): each name it may hold. A name built at run time is not seen."""
    literals = module_literals(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and is_import_module(node) and node.args):
            continue
        argument = node.args[0]
        if isinstance(argument, ast.Subscript):
            argument = argument.value
        elif isinstance(argument, ast.Call) and isinstance(argument.func, ast.Attribute):
            argument = argument.func.value  # TOPICS.get(topic)
        if isinstance(argument, ast.Name):
            yield from literals.get(argument.id, [])
        else:
            yield from literal_strings(argument)


def built_at_run_time(tree: ast.Module, prefix: str) -> list[int]:
    """The lines of import_module calls whose name starts with the text `prefix` and goes on with what
    is only known at run time: f"{prefix}{name}" or "prefix" + name."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and is_import_module(node) and node.args):
            continue
        argument = node.args[0]
        first = argument.values[0] if isinstance(argument, ast.JoinedStr) and argument.values else None
        first = argument.left if isinstance(argument, ast.BinOp) else first
        if any(text.startswith(prefix) for text in literal_strings(first)):
            lines.append(node.lineno)
    return sorted(lines)
