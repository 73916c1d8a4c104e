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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", help="also run tests marked slow (minutes each)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` tests opt in (--run-slow or -m slow); `gpu` tests need CUDA."""
    selected_by_marker = "slow" in (config.getoption("-m") or "")
    run_slow = config.getoption("--run-slow") or selected_by_marker
    cuda = None
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: run with --run-slow"))
        if "gpu" in item.keywords:
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
