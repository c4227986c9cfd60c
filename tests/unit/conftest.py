"""Shared test helpers: where the real captured inputs live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The calibration set (real nvidia-smi outputs, real vLLM failure logs) sits beside the checkout.
CALIBRATION = REPO.parent / "shared" / "calibration"
STANDIN_DIR = REPO / "tests" / "fixtures" / "nvidia-smi-standin"


def calibration_dir(name: str) -> Path:
    path = CALIBRATION / name
    if not path.is_dir():
        pytest.skip(f"calibration captures not found at {path} (expected <repo>/../shared/calibration)")
    return path


def calibration_files(name: str, pattern: str) -> list[str]:
    """Names of the fixture files, for parametrize (empty when the set is absent; tests then skip)."""
    path = CALIBRATION / name
    return sorted(p.name for p in path.glob(pattern)) if path.is_dir() else []
