"""One engine call per mammography action: :func:`topk` on a breast (CC + MLO views).

``medvl topk``, the plugin's TopK dock and the demo all run TopK-Patch through :func:`topk`,
and the evaluation (``medvl-train topksiglip eval``) scores its breasts with the same
computation (:func:`medvl_engine.models.topksiglip_inference.score_breasts`): open the two
views (:func:`open_views`), check that they are one breast, load the model folder, choose K
(:func:`resolve_k`; by default the K the model was evaluated with, :func:`evaluated_k`), stack
the views into the breast image at the model's own side S (CC over MLO,
:func:`medvl_engine.io.mammo.breast_image`, as the evaluation's
:func:`medvl_engine.data.mammo_dataset.load_breast` does), select the K patches and read the
zero-shot prompts (:func:`medvl_engine.models.topksiglip_inference.predict_topk`). The answer
is a :class:`BreastTopK`: the boxes in each view's source px, the importance grid, the
readouts, the breast image they were computed on and the K used beside the evaluated K; its
:meth:`BreastTopK.summary` is the same run without the model (plain data, picklable, torch-free:
:class:`medvl_engine.models.topksiglip_results.TopKRunSummary`), which the DICOM writers and the
plugin's model process pass on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine.errors import ConfigError, ModelNotFoundError
from medvl_engine.models.topksiglip_results import TopKRunReadouts

if TYPE_CHECKING:
    from medvl_engine.io.mammo import BreastImage, Mammogram
    from medvl_engine.models.topksiglip import TopKSigLIP
    from medvl_engine.models.topksiglip_results import TopKResult, TopKRunSummary

__all__ = ["BreastTopK", "evaluated_k", "open_views", "resolve_k", "topk"]

_MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class BreastTopK(TopKRunReadouts):
    """TopK-Patch on one breast: what :func:`topk` computed and what it computed it on.

    result: the TopKResult (boxes ``{"CC": [M, 4], "MLO": [M', 4]}`` (x0, y0, x1, y1) source px
    of each view, ranks and scores ``{view: [M]}``, breast_boxes ``[K, 4]`` breast-image px,
    importance ``[G, G]`` = w / sum w on the candidate grid, zero_shot
    ``{task: {class: probability}}``, embedding ``[C]``); breast: the BreastImage (``image``
    float32 ``[S, S]``, S the model's side, CC rows over MLO rows) the model saw; cc / mlo: the
    two views; model: the TopKSigLIP that ran; k: the patches selected; evaluated_k: the K the
    model was evaluated with (:func:`evaluated_k`); model_name: the folder or registered name
    the model was loaded from (None when not known).
    """

    result: TopKResult
    breast: BreastImage
    cc: Mammogram
    mlo: Mammogram
    model: TopKSigLIP
    k: int
    evaluated_k: int
    model_name: str | None = None

    @property
    def image_size(self) -> int:
        """Side S of the breast image the model scored (its ``config.image_size``)."""
        return int(self.breast.image.shape[0])

    def summary(self) -> TopKRunSummary:
        """This run without its model: the result, the breast image, the views' files and VOI,
        the model's name, demo notice, K, evaluated K, side S and grid G (plain data)."""
        from medvl_engine.demo_models import demo_notice_for
        from medvl_engine.models.topksiglip_results import TopKRunSummary, TopKViewSource

        return TopKRunSummary(
            result=self.result,
            breast=self.breast,
            cc=TopKViewSource.of(self.cc),
            mlo=TopKViewSource.of(self.mlo),
            model_name=self.model_name,
            demo_notice=demo_notice_for(self.model_name) or "",
            k=int(self.k),
            evaluated_k=int(self.evaluated_k),
            image_size=int(self.model.config.image_size),
            grid=int(self.model.geometry.grid),
        )


def _folder_values(name_or_path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """(config.json path, its values) of a TopKSigLIP model folder or registered name."""
    from medvl_engine.encoders.resolve import resolve_topksiglip

    folder = resolve_topksiglip(str(name_or_path)).path
    config = folder / "config.json"
    try:
        if config.stat().st_size > _MAX_CONFIG_BYTES:
            raise ValueError("too large")
        values = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        values = None
    if not isinstance(values, dict):
        raise ModelNotFoundError(
            f"{config} is missing or not a readable JSON object; pass a TopKSigLIP model "
            "folder saved by medvl-train topksiglip.",
            config,
        )
    return config, values


def _recipe_eval_k(values: dict[str, Any]) -> Any:
    """``task.eval_k`` of the recipe a folder records (flat or by sections), else None."""
    recipe = values.get("recipe")
    task = recipe.get("task") if isinstance(recipe, dict) else None
    if not isinstance(task, dict):
        return None
    if task.get("eval_k") is not None:
        return task["eval_k"]
    section = task.get("eval")
    return section.get("eval_k") if isinstance(section, dict) else None


def evaluated_k(model: TopKSigLIP | str | os.PathLike[str]) -> int:
    """The K a TopKSigLIP model was evaluated with: the default K of every user path.

    A model folder or registered name: the recipe's ``task.eval_k`` that its config.json
    records (``"recipe"``, written flat or by sections) when set, else the model's ``k``. A
    loaded model (no folder at hand): its ``config.k``. Reads one small JSON file and imports
    no torch for a folder, so the TopK dock can ask on the GUI thread. Raises
    ModelNotFoundError when the folder cannot be found or read, or records an evaluated K that
    is not a whole number from 1 to its G^2 candidates.
    """
    if not isinstance(model, (str, os.PathLike)):
        return int(model.config.k)
    config, values = _folder_values(model)
    chosen = _recipe_eval_k(values)
    if chosen is None:
        chosen = values.get("k")
    if chosen is None:  # a config without k: the loader's default
        from medvl_engine.models.topksiglip import TopKSigLIPConfig

        chosen = TopKSigLIPConfig.k
    from medvl_engine.encoders.resolve import TOPKSIGLIP_GRID

    grid = values.get("grid", TOPKSIGLIP_GRID)
    candidates = grid * grid if isinstance(grid, int) and not isinstance(grid, bool) else 0
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 1 <= chosen <= candidates:
        raise ModelNotFoundError(
            f"{config} records the evaluated K {chosen!r}, which is not a whole number from 1 "
            f"to the model's {candidates} candidate patches; restore the model folder.",
            config,
        )
    return chosen


def open_views(
    cc: Mammogram | str | os.PathLike[str],
    mlo: Mammogram | str | os.PathLike[str],
    voi_index: int = 0,
) -> tuple[Mammogram, Mammogram]:
    """(CC, MLO) Mammograms: a path is opened with ``voi_index`` (the DICOM VOI window), a
    Mammogram is passed through. The pair is not checked here (see :func:`topk`)."""
    from medvl_engine.io.mammo import open_mammogram

    def opened(view: Mammogram | str | os.PathLike[str]) -> Mammogram:
        if isinstance(view, (str, os.PathLike)):
            return open_mammogram(view, voi_index=voi_index)
        return view

    return opened(cc), opened(mlo)


def resolve_k(model: TopKSigLIP, k: int | None, name: str | os.PathLike[str] | None = None) -> int:
    """The K to select: ``k``, or when None the K the model was evaluated with
    (:func:`evaluated_k` of ``name``, the folder or registered name the model was loaded
    from, else of the loaded model).

    Raises ConfigError unless 1 <= K <= G^2, the model's candidate patches (``name`` is named
    in the sentence).
    """
    chosen = evaluated_k(name if name is not None else model) if k is None else int(k)
    candidates = int(model.geometry.num_candidates)
    if not 1 <= chosen <= candidates:
        which = f"TopK model {name}" if name else "this TopK model"
        why = f"it exceeds the {candidates} candidate patches; " if chosen > candidates else ""
        raise ConfigError(
            f"K = {chosen} is not possible with {which}: {why}choose 1 to {candidates}."
        )
    return chosen


def topk(
    cc: Mammogram | str | os.PathLike[str],
    mlo: Mammogram | str | os.PathLike[str],
    model: TopKSigLIP | str | os.PathLike[str],
    *,
    k: int | None = None,
    voi_index: int = 0,
    device: str = "cpu",
    model_name: str | os.PathLike[str] | None = None,
    zero_shot: bool = True,
) -> BreastTopK:
    """TopK-Patch boxes and zero-shot readouts on the breast of views ``cc`` and ``mlo``.

    cc, mlo: Mammograms or files (DICOM, PNG, TIFF; opened with ``voi_index``). model: a
    loaded TopKSigLIP, or a model folder / registered name loaded on ``device`` (the pair is
    checked before it loads, so a wrong pair is refused at once); model_name: the folder or
    name a loaded model came from (its evaluated K is read there). k: patches to select (None:
    the model's evaluated K, :func:`evaluated_k`; 1 <= K <= G^2, see :func:`resolve_k`). The
    breast image ``[S, S]`` is built at the model's own side S (each view in an S x S/2 slot),
    the image the evaluation scores; the model scores the G x G candidate grid (log w
    ``[G^2]``), keeps the hard top-K of log w (eval mode: no Gumbel noise, so the same inputs
    give the same boxes), maps each box back to the view holding its centre (source px,
    clipped to the view) and, with ``zero_shot``, reads the paper's prompts as softmax
    probabilities over each task's classes.
    """
    from medvl_engine.io.mammo import breast_image, check_pair
    from medvl_engine.models.topksiglip_inference import predict_topk

    cc_view, mlo_view = open_views(cc, mlo, voi_index=voi_index)
    if isinstance(model, (str, os.PathLike)):
        from medvl_engine.models.topksiglip_folder import load_topksiglip

        model_name = model_name or model
        check_pair(cc_view, mlo_view)  # before the model loads: a wrong pair is refused at once
        model = load_topksiglip(model if isinstance(model, str) else Path(model), device=device)
    evaluated = evaluated_k(model_name if model_name is not None else model)
    chosen = resolve_k(model, evaluated if k is None else k, model_name)
    side = int(model.config.image_size)
    breast = breast_image(cc_view, mlo_view, size=(side, side // 2))
    result = predict_topk(model, breast, k=chosen, zero_shot=zero_shot)
    result = dataclasses.replace(result, evaluated_k=evaluated)
    return BreastTopK(
        result=result,
        breast=breast,
        cc=cc_view,
        mlo=mlo_view,
        model=model,
        k=chosen,
        evaluated_k=evaluated,
        model_name=None if model_name is None else str(model_name),
    )
