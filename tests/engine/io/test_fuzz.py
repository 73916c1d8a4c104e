"""Damaged copies of the sample files: opening and reading them raises only MedVLError."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sample_fuzz import load_originals

REPO_ROOT = Path(__file__).resolve().parents[3]
FUZZ_TIME_LIMIT_S = 240.0
FUZZ_MEMORY_LIMIT_MB = 1024.0


def test_damaged_samples_raise_only_medvl_errors_within_bounds(sample_data, run_limited):
    # in a child process with limited address space: a blow-up fails the test, not the machine
    if not load_originals(sample_data):
        pytest.skip("no sample files to damage")
    code = (
        "import sys; from pathlib import Path; "
        f"sys.path.insert(0, {str(REPO_ROOT)!r}); "
        "from tests.support.sample_fuzz import fuzz_damaged_samples, load_originals; "
        f"fuzz_damaged_samples(load_originals(Path({str(sample_data)!r}))); "
        "print('fuzzed')"
    )
    returncode, stdout, stderr, peak_mb = run_limited(
        code, timeout_s=FUZZ_TIME_LIMIT_S, max_mb=FUZZ_MEMORY_LIMIT_MB
    )
    assert returncode == 0 and "fuzzed" in stdout, stderr[-3000:]
    assert peak_mb < FUZZ_MEMORY_LIMIT_MB
