"""The door tests import their tables (cases.py, cases_<folder>.py, door.py, public_names.py) as modules
of this folder: pytest's importlib mode puts no test folder on sys.path, so this puts this one there."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
