"""The heatmap module imports torch only where it scores: a Heatmap can be placed, pickled and
read back in a process that never loads torch (napari's process, fed by the model process)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

_PLACE_AND_PICKLE = """
import json, pickle, sys
import numpy as np
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import Heatmap, place_scores, top_patches
coords = np.array([[0, 0], [10, 0], [0, 10], [10, 10]], dtype=np.int64)
store = FeatureStore(np.eye(4, dtype=np.float32), coords, patch_size_level0=10, patch_size=10,
                     mpp=(0.5, 0.5))
heatmap = place_scores(store, np.array([0.1, 0.9, np.nan, 0.4], np.float32), prompt="tumor")
boxes, scores = top_patches(store, heatmap.scores, 1)
back = pickle.loads(pickle.dumps(heatmap))
assert type(back) is Heatmap
print("torch", "torch" in sys.modules)
print("grid", json.dumps([None if v != v else v for v in back.grid.ravel().tolist()]))
print("box", boxes.tolist(), "scale", back.scale, "units", back.units)
"""


def test_a_heatmap_is_placed_and_pickled_without_importing_torch():
    done = subprocess.run(
        [sys.executable, "-c", _PLACE_AND_PICKLE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "torch False"
    grid = np.array(json.loads(lines[1].removeprefix("grid ")), dtype=float)
    np.testing.assert_allclose(grid, [0.1, 0.9, np.nan, 0.4], rtol=1e-6)  # (x, y) -> [row, col]
    assert lines[2] == "box [[10, 0, 20, 10]] scale (5.0, 5.0) units um"
