"""tests/project/test_structure.py imports dynamic_imports.py as a module of this folder: pytest's importlib
mode puts no test folder on sys.path, so this puts this one there."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
