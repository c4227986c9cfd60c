"""Shared test helpers: where the real captured inputs live."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Real nvidia-smi outputs, vLLM logs and HF configs, copied into the repository (sources in SOURCES.md).
CALIBRATION = REPO / "tests" / "fixtures" / "calibration"
MODELS_DIR = CALIBRATION / "models"
STANDIN_DIR = REPO / "tests" / "fixtures" / "nvidia-smi-standin"


class MissingFixture(AssertionError):
    """A fixture file the tests need is not in the checkout: a failure, never a skip."""


def calibration_dir(name: str) -> Path:
    path = CALIBRATION / name
    if not path.is_dir():
        raise MissingFixture(f"fixture directory missing: {path} (see tests/fixtures/calibration/SOURCES.md)")
    return path


def calibration_file(*parts: str) -> Path:
    path = CALIBRATION.joinpath(*parts)
    if not path.is_file():
        raise MissingFixture(f"fixture file missing: {path} (see tests/fixtures/calibration/SOURCES.md)")
    return path


def model_config_path(name: str) -> Path:
    """config.json of a calibration model, by its <org>__<name> directory."""
    return calibration_file("models", name, "config.json")


def calibration_files(name: str, pattern: str) -> list[str]:
    """Names of the fixture files, for parametrize; raises (collection error) when none match,
    so an absent or emptied set cannot turn into zero test cases."""
    names = sorted(p.name for p in calibration_dir(name).glob(pattern))
    if not names:
        raise MissingFixture(f"no fixture matches {CALIBRATION / name / pattern}")
    return names
