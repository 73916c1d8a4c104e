"""Reading back a store being written never blocks on a chunk that is a named pipe."""

from __future__ import annotations

import os
import textwrap

import numpy as np

from medvl_engine.features import FeatureStore
from medvl_engine.features.store import write_imported_store


def test_read_stored_skips_a_store_whose_chunk_is_a_named_pipe(tmp_path, run_limited):
    rng = np.random.default_rng(0)
    coords = np.array([[256 * i, 0] for i in range(4)], dtype=np.int64)
    store = FeatureStore(
        features=rng.standard_normal((4, 8)).astype(np.float32),
        coords=coords,
        patch_size_level0=256,
        patch_size=256,
    )
    path = tmp_path / "cache.zarr"
    write_imported_store(path, store, source_fingerprint="test")
    (chunk,) = [p for p in (path / "features").rglob("*") if p.is_file() and p.name != "zarr.json"]
    chunk.unlink()
    os.mkfifo(chunk)  # reading this chunk would wait for a writer forever
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        import numpy as np
        from medvl_engine.features import FeatureStore
        from medvl_engine.features import PartialFeatures
        coords = np.array([[256 * i, 0] for i in range(4)], dtype=np.int64)
        store = FeatureStore(
            features=np.zeros((4, 8), np.float32), coords=coords, patch_size_level0=256,
            patch_size=256,
        )
        partial = PartialFeatures(
            store=store, known=np.zeros(4, bool), grid=None, store_path=Path({str(path)!r})
        )
        print("read", partial.read_stored(), "rows")
        """
    )
    returncode, out, err, _ = run_limited(code, timeout_s=60, max_mb=1024)
    assert returncode == 0, err
    assert out.strip() == "read 0 rows"
