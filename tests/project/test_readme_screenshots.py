"""tools/readme_screenshots.py makes the README's dock screenshots: small PNGs showing the docks'
results (a diverging contrast heatmap, TopK importance on hung mammograms, an attention map)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.gui

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "readme_screenshots.py"
SHOTS = ("heatmap", "topk", "classify")


def _colour_counts(path: Path) -> dict[str, int]:
    """Pixels of the overlays' colours: the warm half of the diverging map (red), the low end of
    viridis (purple) that the TopK importance and attention maps paint over the images."""
    pixels = np.asarray(Image.open(path).convert("RGB")).astype(int)
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    return {
        "red": int(((red > blue + 60) & (red > green + 40)).sum()),
        "purple": int(((red > green + 30) & (blue > green + 30)).sum()),
        # the top cells of viridis (yellow, green) over the canvas, left of the dock
        "tinted_canvas": int(
            (
                ((red - blue > 25) & (green - blue > 25))
                | ((green - red > 25) & (green - blue > 25))
            )[15:610, 210:705].sum()
        ),
    }


def test_script_writes_small_screenshots_that_show_each_docks_result(request, tmp_path):
    environment = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # the seeded sample data is made once per pytest cache, as for the other plugin tests
    environment["MEDVL_CACHE"] = str(request.config.cache.mkdir("medvl-cache"))
    out = tmp_path / "screenshots"
    completed = subprocess.run(
        [str(REPO / "tools" / "with_display.sh"), sys.executable, str(SCRIPT), "--out", str(out)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]

    assert sorted(path.name for path in out.iterdir()) == sorted(f"{n}.png" for n in SHOTS)
    sizes = {}
    for name in SHOTS:
        path = out / f"{name}.png"
        sizes[name] = path.stat().st_size
        assert str(path) in completed.stdout  # the script names each file it wrote
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.format == "PNG"
            assert image.width == 1000
            assert 500 <= image.height <= 800
            pixels = np.asarray(image.convert("RGB"))
        assert pixels.std() > 25, f"{name}.png looks blank"
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100, f"{name}.png has few colours"
        assert sizes[name] <= 150 * 1024, f"{name}.png is {sizes[name] / 1024:.0f} KB"
    assert sum(sizes.values()) <= 600 * 1024

    counts = {name: _colour_counts(out / f"{name}.png") for name in SHOTS}
    # contrast "tumor - stroma" on blue-white-red: the tumour side shows red cells
    assert counts["heatmap"]["red"] > 5000, counts
    # the other docks have no red overlay, but cover their images with their maps' low end
    assert counts["topk"]["red"] < 500 and counts["classify"]["red"] < 500, counts
    # the TopK importance map hides its faint cells (no purple wash) but shows its top cells
    assert counts["topk"]["purple"] < 500, counts
    assert counts["topk"]["tinted_canvas"] > 400, counts
    assert counts["classify"]["purple"] > 10000, counts
    # no temporary files left behind by the atomic writes
    assert not [path for path in out.iterdir() if path.name.startswith(".")]


def test_script_refuses_a_dock_that_does_not_finish_in_time(request, tmp_path):
    environment = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    environment["MEDVL_CACHE"] = str(request.config.cache.mkdir("medvl-cache"))
    out = tmp_path / "screenshots"
    completed = subprocess.run(
        [
            str(REPO / "tools" / "with_display.sh"),
            sys.executable,
            str(SCRIPT),
            "--out",
            str(out),
            "--only",
            "classify",
            "--timeout",
            "0.01",
        ],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 2
    assert "did not finish within 0 s" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not (out / "classify.png").exists()
