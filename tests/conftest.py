"""Shared fixtures. Tests never touch the network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DATA = Path(os.environ.get("MEDVL_SAMPLE_DATA", REPO_ROOT.parent / "shared" / "sample-data"))


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """Folder of real sample files (../shared/sample-data); skips when absent."""
    if not SAMPLE_DATA.is_dir():
        pytest.skip(f"sample data folder {SAMPLE_DATA} is absent")
    return SAMPLE_DATA


@pytest.fixture(scope="session")
def sample_file(sample_data: Path):
    """Return a function giving the path of one sample file, skipping when it is absent."""

    def get(relative: str) -> Path:
        path = sample_data / relative
        if not path.exists():
            pytest.skip(f"sample file {relative} is absent")
        return path

    return get
