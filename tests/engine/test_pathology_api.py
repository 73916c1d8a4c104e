"""The one engine call per pathology action: ``prompt_heatmap`` (partial maps, the view's
patches first, cancel) and ``classify``, each equal to what the ``medvl`` command writes."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from medvl_engine.cli.main import main
from medvl_engine.errors import CancelledError, DataError
from medvl_engine.features import FeatureStore, PartialFeatures
from medvl_engine.io.slide import open_slide
from medvl_engine.pathology import check_features_fit, classify, final, prompt_heatmap

VIEW = (0.0, 0.0, 700.0, 700.0)  # a corner of the slide, (x0, y0, x1, y1) level-0 px


@pytest.fixture(scope="module")
def slide_path(tmp_path_factory, demo_encoder):
    from medvl_engine.synthetic import make_synthetic_slide

    demo_encoder()  # builds the demo model once, in the test cache
    folder = tmp_path_factory.mktemp("api")
    truth = make_synthetic_slide(
        folder / "case.tiff", seed=3, size=(2048, 2048), classes=("tumor", "stroma", "adipose")
    )
    return truth.path


def test_prompt_heatmap_yields_the_view_first_then_the_map_medvl_heatmap_writes(
    slide_path, tmp_path, demo_encoder
):
    with open_slide(slide_path) as slide:
        maps = list(
            prompt_heatmap(
                slide,
                "tumor",
                demo_encoder(),
                top_n=3,
                view=VIEW,
                store_path=tmp_path / "fresh.zarr",
                update_interval_s=0.05,
            )
        )
    *partials, complete = maps
    assert partials and not any(m.complete for m in partials) and complete.complete
    first = partials[0]
    assert 0 < first.done < first.total and first.label == "tumor" and first.model == "medvl-demo"
    assert np.isnan(first.scores[~first.known]).all()
    assert np.isfinite(first.scores[first.known]).all()
    # the first map's patches all overlap the view
    size = first.store.patch_size_level0
    corners = first.coords[first.known]
    assert (corners[:, 0] < VIEW[2]).all() and (corners[:, 1] < VIEW[3]).all()
    assert [m.done for m in maps] == sorted(m.done for m in maps)
    assert complete.done == complete.total and complete.extracted
    boxes, box_scores = complete.top_patches
    assert boxes.shape == (3, 4) and (boxes[:, 2] - boxes[:, 0] == size).all()
    assert box_scores[0] == pytest.approx(np.nanmax(complete.scores))
    # the partial map lands on the complete map's grid
    assert first.heatmap.grid.shape == complete.heatmap.grid.shape
    assert first.heatmap.scale == complete.heatmap.scale
    assert first.heatmap.translate == complete.heatmap.translate

    out = tmp_path / "cli.npz"
    assert main(["heatmap", str(slide_path), "--prompt", "tumor", "--out", str(out)]) == 0
    with np.load(out) as written:
        np.testing.assert_array_equal(written["coords"], complete.coords)
        np.testing.assert_allclose(written["scores"], complete.scores, atol=1e-5)


def test_a_given_store_gives_one_complete_map_and_a_partial_continues(
    slide_path, tmp_path, demo_encoder
):
    encoder = demo_encoder()
    with open_slide(slide_path) as slide:
        reference = final(
            prompt_heatmap(slide, "stroma", encoder, store_path=tmp_path / "a.zarr", partials=False)
        )
        (only,) = prompt_heatmap(slide, "stroma", encoder, features=reference.store)
        assert only.complete and not only.extracted
        np.testing.assert_array_equal(only.scores, reference.scores)
        by_path = prompt_heatmap(slide_path, "stroma", "medvl-demo", features=reference.store_path)
        from_path = final(by_path)
        np.testing.assert_allclose(from_path.scores, reference.scores, atol=1e-6)

        partial = PartialFeatures.for_slide(slide, encoder, store_path=tmp_path / "b.zarr")
        partial.encode(slide, encoder, np.arange(3))
        maps = list(prompt_heatmap(slide, "stroma", encoder, features=partial))
        assert maps[-1].complete and partial.complete
        np.testing.assert_allclose(maps[-1].scores, reference.scores, atol=1e-5)


def test_cancel_stops_the_heatmap_and_keeps_what_was_computed(slide_path, tmp_path, demo_encoder):
    encoder = demo_encoder()
    stop = threading.Event()
    with open_slide(slide_path) as slide:
        partial = PartialFeatures.for_slide(slide, encoder, store_path=tmp_path / "c.zarr")
        maps = prompt_heatmap(slide, "tumor", encoder, features=partial, view=VIEW, cancel=stop)
        first = next(maps)
        stop.set()
        with pytest.raises(CancelledError, match="cancelled"):
            next(maps)
    assert 0 < first.done <= partial.done < partial.total


def test_features_of_another_width_are_refused_once(slide_path, demo_encoder):
    encoder = demo_encoder()
    store = FeatureStore(
        features=np.ones((2, encoder.embed_dim + 1), np.float32),
        coords=np.array([[0, 0], [224, 0]]),
        patch_size_level0=224,
        patch_size=224,
        encoder="other",
    )
    with pytest.raises(DataError, match=r"dimensional features \(other\) but medvl-demo"):
        check_features_fit(store, encoder)
    with pytest.raises(DataError, match="choose the model the features were extracted with"):
        final(prompt_heatmap(slide_path, "tumor", encoder, features=store))


def test_classify_gives_the_scores_medvl_classify_prints(slide_path, capsys, demo_encoder):
    classes = ["tumor", "stroma", "adipose tissue"]
    result = classify(slide_path, classes, "medvl-demo")
    capsys.readouterr()
    assert main(["classify", str(slide_path), "--json", "--classes", *classes]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(row["class"], row["score"]) for row in printed] == result.ranked
    maps = result.attention_maps()
    assert set(maps) == set(classes)
    np.testing.assert_allclose(
        maps[result.ranked[0][0]].scores.mean(), 1.0, rtol=1e-4
    )  # alpha_i * N averages to 1
