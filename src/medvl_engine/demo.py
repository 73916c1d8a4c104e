"""The demo scene: synthetic slide and mammograms, the demo models run on them, files out.

``build_scene`` makes a synthetic H&E slide and a synthetic mammogram pair, runs the demo
pathology model for a text prompt (heatmap + top patches) and the TopK mammography model;
``write_scene`` writes what a viewer would show as files. The demo never trains: the demo
names (``medvl-demo``, ``topksiglip-demo``) resolve to the models shipped in
:mod:`medvl_engine.demo_models`. A missing model is reported as a note and the scene goes on
without that overlay. Every stage's wall time is kept in ``scene.timings``. Used headless by
``medvl demo`` and, with a viewer, by the plugin's demo (``make demo``); both take the options
of :func:`add_arguments` and print with :func:`say` and :func:`report`.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine.errors import MedVLError

if TYPE_CHECKING:
    import numpy as np

    from medvl_engine.synthetic import SyntheticMammoCase

__all__ = [
    "DEMO_SEED",
    "DEMO_SLIDE_CLASSES",
    "DEMO_SLIDE_SIZE",
    "DemoScene",
    "add_arguments",
    "build_scene",
    "format_timings",
    "report",
    "say",
    "write_scene",
]

DEMO_SEED = 11
DEMO_SLIDE_SIZE = (3072, 2048)
DEMO_SLIDE_CLASSES = ("tumor", "stroma", "lymphocytes", "adipose", "necrosis")


@dataclass
class DemoScene:
    """What the demo made and computed; every result may be None when its piece is missing.

    heatmap: the engine's similarity map for ``prompt`` (grid + world transform);
    top_patches: the engine's top patches (boxes (x0, y0, x1, y1) level-0 px + scores);
    topk: a TopKResult (boxes per view in source px); breast: the BreastImage it ran on;
    topk_run: the whole BreastTopK of :func:`medvl_engine.mammography.topk` (K, evaluated K,
    the views; what the DICOM exports take).
    features_path: the feature store written beside the outputs (``features.zarr``), from
    which a viewer's heatmap dock re-prompts without extracting again; None when not written.
    timings: (stage, wall seconds) in the order the stages ran.
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
    features_path: Path | None = None
    topk: Any = None
    breast: Any = None
    topk_run: Any = None
    notes: list[str] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block and append (name, seconds) to ``timings``, also when it raises."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings.append((name, time.perf_counter() - started))

    def mammogram_paths(self) -> tuple[Path, Path]:
        """(CC, MLO) files of the synthetic pair; made before the mammography step runs."""
        if self.cc_path is None or self.mlo_path is None:
            raise RuntimeError("the demo's mammograms have not been made yet")
        return self.cc_path, self.mlo_path


def format_timings(timings: list[tuple[str, float]]) -> str:
    """One line: ``stage 1.2 s, stage 0.3 s, ... (total 1.5 s)``."""
    parts = [f"{name} {seconds:.1f} s" for name, seconds in timings]
    total = sum(seconds for _, seconds in timings)
    return f"{', '.join(parts)} (total {total:.1f} s)"


Progress = Callable[[str], None]


def _quiet(message: str) -> None:
    """Default progress sink: say nothing."""


def _make_slide(inputs: Path, slide_size: tuple[int, int]) -> Path:
    from medvl_engine.synthetic import make_synthetic_slide

    slide_path = inputs / f"synthetic-he-{slide_size[0]}x{slide_size[1]}.tiff"
    if not slide_path.is_file():
        make_synthetic_slide(
            slide_path, seed=DEMO_SEED, size=slide_size, mpp=0.5, classes=DEMO_SLIDE_CLASSES
        )
    return slide_path


def _make_mammograms(inputs: Path) -> SyntheticMammoCase:
    from medvl_engine.synthetic import make_mammogram_case

    return make_mammogram_case(inputs / "mammograms", seed=DEMO_SEED, laterality="L")


def _load_models(model: str, topk_model: str) -> tuple[Future[Any], Future[Any]]:
    """Load the encoder, then the TopK model, in one background thread (futures of each).

    The main thread paints the synthetic inputs meanwhile: loading is mostly imports and file
    reads, painting mostly numpy, so on 2 cores the two overlap.
    """

    def encoder() -> Any:
        from medvl_engine.encoders import load_encoder

        return load_encoder(model)

    def topk() -> Any:
        from medvl_engine.models.topksiglip_folder import load_topksiglip

        return load_topksiglip(topk_model)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medvl-demo-load")
    loads = pool.submit(encoder), pool.submit(topk)
    pool.shutdown(wait=False)
    return loads


def _run_pathology(scene: DemoScene, model: str, loading: Future[Any], progress: Progress) -> None:
    from medvl_engine.pathology import final, prompt_heatmap

    scene.model = model
    try:
        progress(f"loading encoder {model}")
        with scene.stage("load encoder"):  # the part not hidden behind the inputs' painting
            encoder = loading.result()
        said: list[int] = []

        def say_total(done: int, total: int) -> None:
            if not said:
                said.append(total)
                progress(f"extracting features of {total} patches")

        with scene.stage("features and heatmap"):
            result = final(
                prompt_heatmap(
                    scene.slide_path,
                    scene.prompt,
                    encoder,
                    top_n=10,
                    store_path=scene.out / "features.zarr",
                    partials=False,
                    progress=say_total,
                )
            )
        scene.encoder, scene.feature_store = encoder, result.store
        scene.features_path = result.store_path
        scene.heatmap, scene.top_patches = result.heatmap, result.top_patches
    except MedVLError as error:
        scene.notes.append(f"slide heatmap skipped: {error}")


def _run_mammography(
    scene: DemoScene, model: str, loading: Future[Any], k: int | None, progress: Progress
) -> None:
    from medvl_engine.io.mammo import check_pair
    from medvl_engine.mammography import open_views, resolve_k, topk

    scene.topk_model = model
    try:
        with scene.stage("open mammograms"):
            cc, mlo = open_views(*scene.mammogram_paths())
            check_pair(cc, mlo)
        progress(f"loading TopKSigLIP model {model}")
        with scene.stage("load TopK model"):
            topk_model = loading.result()
        k = resolve_k(topk_model, k or None, model)  # default: the K the model was evaluated at
        progress(f"running TopK-Patch (K = {k})")
        with scene.stage("TopK"):  # the path of medvl topk, the dock and the evaluation
            run = topk(cc, mlo, topk_model, k=k, model_name=model)
            scene.topk, scene.breast, scene.topk_run = run.result, run.breast, run
    except MedVLError as error:
        scene.notes.append(f"TopK skipped: {error}")


def build_scene(
    out: Path,
    prompt: str,
    model: str,
    topk_model: str,
    k: int | None,
    slide_size: tuple[int, int] | None = None,
    progress: Progress = _quiet,
) -> DemoScene:
    """Make the demo inputs in ``out`` and run both demo models on them.

    k: TopK patches per breast (None: the K the TopK model was evaluated with).
    slide_size: (width, height) of the synthetic slide in level-0 px (None: DEMO_SLIDE_SIZE).
    A model that cannot be loaded leaves its result None and a one-sentence note in
    ``scene.notes``.
    """
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    import medvl_engine.synthetic  # noqa: F401  (imports torch before the loader thread does)

    encoder_loading, topk_loading = _load_models(model, topk_model)
    progress(f"making synthetic slide and mammograms in {out / 'inputs'}")
    inputs = out / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    slide_path = _make_slide(inputs, slide_size or DEMO_SLIDE_SIZE)
    scene = DemoScene(out=out, slide_path=slide_path, prompt=prompt)
    scene.timings.append(("synthetic slide", time.perf_counter() - started))
    with scene.stage("synthetic mammograms"):
        case = _make_mammograms(inputs)
    scene.cc_path, scene.mlo_path = Path(case.cc_path), Path(case.mlo_path)
    scene.laterality = case.laterality
    _run_pathology(scene, model, encoder_loading, progress)
    _run_mammography(scene, topk_model, topk_loading, k, progress)
    return scene


_PREVIEW_PX = 1600


def _write_png(path: Path, pixels: np.ndarray) -> Path:
    import numpy as np
    from PIL import Image

    from medvl_engine.common.atomic import atomic_write

    image = Image.fromarray(np.ascontiguousarray(pixels))
    return atomic_write(path, lambda temporary: image.save(temporary, format="PNG"))


def _write_slide(scene: DemoScene) -> list[Path]:
    from medvl_engine.export import export_heatmap
    from medvl_engine.io.slide import open_slide

    out = Path(scene.out)
    with open_slide(scene.slide_path) as slide:
        if scene.heatmap is None:
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
                model=scene.model,
            )
            for name in ("heatmap.png", "heatmap.geojson", "top_patches.csv", "heatmap.tiff")
        ]


def _write_mammograms(scene: DemoScene) -> list[Path]:
    out = Path(scene.out)
    if scene.topk is not None:
        from medvl_engine.export import write_topk_outputs
        from medvl_engine.export.topk import TOPK_PNG_SIDE

        cc_path, mlo_path = scene.mammogram_paths()
        sources = {"CC": cc_path, "MLO": mlo_path}
        targets = [out / "topk.png", out / "topk.geojson", out / "topk.csv"]
        return list(
            write_topk_outputs(
                scene.topk,
                scene.breast.image,
                sources,
                targets,
                model=scene.topk_model,
                display_side=TOPK_PNG_SIDE,
            )
        )
    import numpy as np

    from medvl_engine.io.mammo import open_mammogram

    views = [open_mammogram(path) for path in scene.mammogram_paths()]
    height = max(view.pixels.shape[0] for view in views)
    gap = np.zeros((height, 16), dtype=np.float32)
    padded = [np.pad(v.pixels, ((0, height - v.pixels.shape[0]), (0, 0))) for v in views]
    side_by_side = np.concatenate([padded[0], gap, padded[1]], axis=1)
    return [_write_png(out / "mammograms.png", (side_by_side * 255 + 0.5).astype(np.uint8))]


def write_scene(scene: DemoScene) -> list[Path]:
    """Write the demo scene's images and overlays into ``scene.out``; return the paths.

    Slide: PNG composite (slide + heatmap + top patches), QuPath GeoJSON, CSV of the top
    patches and the heatmap as a pyramidal TIFF; mammograms: the TopK PNG, GeoJSON and CSV.
    Without a result (a model missing) the plain image is written instead, so the demo
    still shows its inputs. Every file is written under a temporary name and renamed.
    """
    with scene.stage("slide exports"):
        written = _write_slide(scene)
    with scene.stage("mammogram exports"):
        written.extend(_write_mammograms(scene))
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (``--out``, ``--prompt``, ``--model``, ``--topk-model``, ``--k``,
    ``--slide-size``), shared by ``medvl demo`` and ``napari-medvl-demo``."""
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="output folder")
    parser.add_argument("--prompt", default="tumor", help="text prompt for the slide heatmap")
    parser.add_argument("--model", default="medvl-demo", help="pathology encoder name or folder")
    parser.add_argument(
        "--topk-model", default="topksiglip-demo", help="TopKSigLIP model name or folder"
    )
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="TopK patches per breast (default: the K the TopK model was evaluated with)",
    )
    parser.add_argument(
        "--slide-size",
        type=_size,
        default=None,
        metavar="WxH",
        help="synthetic slide size in level-0 px (default 3072x2048)",
    )


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 3072x2048") from None
    if width < 256 or height < 256:
        raise argparse.ArgumentTypeError(f"slide size {text} is too small; use at least 256x256")
    return width, height


def say(message: str) -> None:
    """Print one progress line of the demo."""
    print(f"medvl demo: {message}", flush=True)


def report(scene: DemoScene, written: list[Path]) -> None:
    """Print the demo's notes, what each model is, the stage timings and the files written."""
    from medvl_engine.demo_models import demo_notice_for

    for note in scene.notes:
        say(note)
    results = ((scene.model, scene.heatmap), (scene.topk_model, scene.topk))
    for model, result in results:
        notice = demo_notice_for(model)
        if result is not None and notice:
            say(f"{model}: {notice}")
    if scene.topk is not None:
        from medvl_engine.export.topk import k_sentence

        side = scene.topk.image_size
        readout = scene.topk.zero_shot.get("cancer", {}).get("positive")
        say(
            f"{scene.topk_model}: {k_sentence(scene.topk.k, scene.topk.evaluated_k)}, breast "
            f"image {side} x {side} px"
            + ("" if readout is None else f", zero-shot p(cancer) = {readout:.3f}")
        )
    say(f"timings: {format_timings(scene.timings)}")
    say(f"wrote {len(written)} file(s):")
    for path in written:
        print(path)
