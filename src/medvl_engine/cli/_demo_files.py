"""Headless output of ``medvl demo``: what the viewer would show, as files in the output folder.

Slide: PNG composite (slide + heatmap + top patches), QuPath GeoJSON and CSV of the
top patches through medvl_engine.export; mammograms: the TopK PNG, GeoJSON and CSV
through the TopK exporter. Without a result (model or engine piece missing) the
plain image is written instead so the demo still shows its inputs. Every file is
written to a temporary name in the output folder and renamed when complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_scene"]

_PREVIEW_PX = 1600


def _write_png(path: Path, pixels: np.ndarray) -> Path:
    from PIL import Image

    from medvl_engine._atomic import atomic_write

    image = Image.fromarray(np.ascontiguousarray(pixels))
    return atomic_write(path, lambda temporary: image.save(temporary, format="PNG"))


def _write_slide(scene: Any) -> list[Path]:
    from medvl_engine.io.slide import open_slide

    out = Path(scene.out)
    with open_slide(scene.slide_path) as slide:
        try:
            from medvl_engine.export import export_heatmap
        except ImportError:
            if scene.heatmap is not None:
                scene.notes.append("heatmap files skipped: medvl_engine.export is not available")
            export_heatmap = None
        if scene.heatmap is None or export_heatmap is None:
            return [_write_png(out / "slide.png", slide.thumbnail(_PREVIEW_PX))]

        boxes, box_scores = scene.top_patches if scene.top_patches is not None else (None, None)
        return [
            export_heatmap(
                out / name,
                scene.heatmap,
                scene.feature_store,
                slide=slide,
                boxes=boxes,
                box_scores=box_scores,
                max_size=_PREVIEW_PX,
            )
            for name in ("heatmap.png", "heatmap.geojson", "top_patches.csv", "heatmap.tiff")
        ]


def _write_mammograms(scene: Any) -> list[Path]:
    out = Path(scene.out)
    if scene.topk is not None:
        from medvl_engine.models._topk_export import write_topk_outputs

        sources = {"CC": Path(scene.cc_path), "MLO": Path(scene.mlo_path)}
        targets = [out / "topk.png", out / "topk.geojson", out / "topk.csv"]
        return list(write_topk_outputs(scene.topk, scene.breast.image, sources, targets))
    from medvl_engine.io.mammo import open_mammogram

    views = [open_mammogram(scene.cc_path), open_mammogram(scene.mlo_path)]
    height = max(view.pixels.shape[0] for view in views)
    gap = np.zeros((height, 16), dtype=np.float32)
    padded = [np.pad(v.pixels, ((0, height - v.pixels.shape[0]), (0, 0))) for v in views]
    side_by_side = np.concatenate([padded[0], gap, padded[1]], axis=1)
    return [_write_png(out / "mammograms.png", (side_by_side * 255 + 0.5).astype(np.uint8))]


def write_scene(scene: Any) -> list[Path]:
    """Write the demo scene's images and overlays into ``scene.out``; return the paths."""
    written = _write_slide(scene)
    if scene.cc_path is not None and scene.mlo_path is not None:
        written.extend(_write_mammograms(scene))
    return written
