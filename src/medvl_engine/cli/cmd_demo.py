"""`medvl demo --out DIR`: synthetic slide and mammograms, the models on them, shown or saved.

Makes a synthetic H&E slide and a synthetic mammogram pair in DIR, runs the
demo pathology model for a text prompt (heatmap + top patches) and the TopK
mammography model where one is available, then either opens napari with the
layers (a display is available and MEDVL_HEADLESS is unset) or writes PNG
composites, QuPath GeoJSON and CSV files into DIR and prints their paths. A
missing model or engine piece is reported in one line and the demo goes on
without that overlay.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HELP = "make synthetic data, run the demo models on it and open napari (or write files headless)"

__all__ = ["HELP", "DemoScene", "add_arguments", "build_scene", "display_available", "run"]

DEMO_SEED = 11
DEMO_SLIDE_SIZE = (3072, 2048)
DEMO_SLIDE_CLASSES = ("tumor", "stroma", "lymphocytes", "adipose", "necrosis")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="output folder")
    parser.add_argument("--prompt", default="tumor", help="text prompt for the slide heatmap")
    parser.add_argument("--model", default="medvl-demo", help="pathology encoder name or folder")
    parser.add_argument(
        "--topk-model", default="topksiglip-demo", help="TopKSigLIP model name or folder"
    )
    parser.add_argument("--k", type=int, default=15, help="TopK patches per breast")
    parser.add_argument(
        "--slide-size",
        type=_size,
        default=DEMO_SLIDE_SIZE,
        metavar="WxH",
        help="synthetic slide size in level-0 px (default 3072x2048)",
    )
    parser.add_argument(
        "--headless", action="store_true", help="write files even when a display is available"
    )


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 3072x2048") from None
    if width < 256 or height < 256:
        raise argparse.ArgumentTypeError(f"slide size {text} is too small; use at least 256x256")
    return width, height


def virtual_display() -> bool:
    """True under xvfb-run, a display nobody looks at (its Xauthority is in /tmp/xvfb-run.*)."""
    return "xvfb-run." in os.environ.get("XAUTHORITY", "")


def display_available() -> bool:
    """True when a window can open: DISPLAY or WAYLAND_DISPLAY set and MEDVL_HEADLESS unset."""
    if os.environ.get("MEDVL_HEADLESS"):
        return False
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@dataclass
class DemoScene:
    """What the demo made and computed; every result may be None when its piece is missing.

    heatmap: the engine's similarity map for ``prompt`` (grid + world transform);
    top_patches: the engine's top patches (boxes (x0, y0, x1, y1) level-0 px + scores);
    topk: a TopKResult (boxes per view in source px); breast: the BreastImage it ran on.
    """

    out: Path
    slide_path: Path
    prompt: str
    cc_path: Path | None = None
    mlo_path: Path | None = None
    laterality: str | None = None
    model: str = "medvl-demo"
    topk_model: str = "topksiglip-demo"
    encoder: Any = None
    heatmap: Any = None
    top_patches: Any = None
    feature_store: Any = None
    topk: Any = None
    breast: Any = None
    notes: list[str] = field(default_factory=list)


def _say(message: str) -> None:
    print(f"medvl demo: {message}", flush=True)


def _make_inputs(scene_out: Path, slide_size: tuple[int, int]) -> tuple[Path, Any]:
    from medvl_engine.synthetic import make_synthetic_slide

    inputs = scene_out / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    slide_path = inputs / f"synthetic-he-{slide_size[0]}x{slide_size[1]}.tiff"
    if not slide_path.is_file():
        make_synthetic_slide(
            slide_path, seed=DEMO_SEED, size=slide_size, mpp=0.5, classes=DEMO_SLIDE_CLASSES
        )
    case = None
    try:
        from medvl_engine.synthetic import make_mammogram_case
    except ImportError:
        return slide_path, None
    mammograms = inputs / "mammograms"
    mammograms.mkdir(exist_ok=True)
    case = make_mammogram_case(mammograms, seed=DEMO_SEED, laterality="L")
    return slide_path, case


def _run_pathology(scene: DemoScene, model: str) -> None:
    from medvl_engine.errors import MedVLError

    try:
        from medvl_engine.encoders import load_encoder
        from medvl_engine.features import extract_features
        from medvl_engine.heatmap import similarity_map, top_patches
        from medvl_engine.io.slide import open_slide
        from medvl_engine.tiling import patch_grid
    except ImportError as error:
        scene.notes.append(f"slide heatmap skipped: {error.name or error} is not available yet")
        return
    try:
        _say(f"loading encoder {model}")
        encoder = load_encoder(model)
        slide = open_slide(scene.slide_path)
        grid = patch_grid(slide, patch_size=encoder.patch_size, target_mpp=encoder.target_mpp)
        _say(f"extracting features of {len(grid.coords)} patches")
        store = extract_features(slide, encoder, grid, scene.out / "features.zarr")
        text = encoder.encode_text([scene.prompt])
        scene.model, scene.encoder, scene.feature_store = model, encoder, store
        scene.heatmap = similarity_map(store, text, prompt=scene.prompt)
        scene.top_patches = top_patches(store, scene.heatmap.scores, n=10)
    except MedVLError as error:
        scene.notes.append(f"slide heatmap skipped: {error}")


def _run_mammography(scene: DemoScene, model: str, k: int) -> None:
    from medvl_engine.errors import MedVLError

    scene.topk_model = model
    if scene.cc_path is None or scene.mlo_path is None:
        scene.notes.append("TopK skipped: synthetic mammograms are not available yet")
        return
    try:
        from medvl_engine.io.mammo import breast_image, open_mammogram
        from medvl_engine.models.topksiglip import load_topksiglip, predict_topk
    except ImportError as error:
        scene.notes.append(f"TopK skipped: {error.name or error} is not available yet")
        return
    try:
        cc, mlo = open_mammogram(scene.cc_path), open_mammogram(scene.mlo_path)
        scene.breast = breast_image(cc, mlo)
        topk_model = load_topksiglip(model)
        _say(f"running TopK-Patch (K = {k})")
        scene.topk = predict_topk(topk_model, scene.breast, k=k)
    except MedVLError as error:
        scene.notes.append(f"TopK skipped: {error}")


def build_scene(
    out: Path,
    prompt: str,
    model: str,
    topk_model: str,
    k: int,
    slide_size: tuple[int, int] = DEMO_SLIDE_SIZE,
) -> DemoScene:
    """Make the demo inputs in ``out`` and run every available model on them."""
    out.mkdir(parents=True, exist_ok=True)
    _say(f"making synthetic slide and mammograms in {out / 'inputs'}")
    slide_path, case = _make_inputs(out, slide_size)
    scene = DemoScene(out=out, slide_path=slide_path, prompt=prompt)
    if case is not None:
        scene.cc_path, scene.mlo_path = Path(case.cc_path), Path(case.mlo_path)
        scene.laterality = case.laterality
    _run_pathology(scene, model)
    _run_mammography(scene, topk_model, k)
    return scene


def run(args: argparse.Namespace) -> int:
    scene = build_scene(args.out, args.prompt, args.model, args.topk_model, args.k, args.slide_size)
    for note in scene.notes:
        _say(note)
    from medvl_engine.cli._demo_files import write_scene

    show = display_available() and not args.headless
    if show and not virtual_display():
        from napari_medvl._demo_viewer import show_scene

        show_scene(scene)
        return 0
    notes_before = len(scene.notes)
    written = write_scene(scene)
    if show:  # a virtual display: render the viewers to files instead of waiting on a window
        from napari_medvl._demo_viewer import save_screenshots, show_scene

        written.extend(save_screenshots(show_scene(scene, run=False), scene.out))
    for note in scene.notes[notes_before:]:
        _say(note)
    _say(f"wrote {len(written)} file(s):")
    for path in written:
        print(path)
    return 0
