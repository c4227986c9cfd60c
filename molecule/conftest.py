"""Every scenario's tests import the shared helpers (molecule/shared/helpers.py) as `helpers`.

pytest loads this file for any test under molecule/ (the rootdir is the project's, by pyproject.toml).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "shared"))
