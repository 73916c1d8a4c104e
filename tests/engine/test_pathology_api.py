"""The one engine call per pathology action: ``prompt_heatmap`` (partial maps, the view's
patches first, cancel) and ``classify``, each equal to what the ``medvl`` command writes."""

from __future__ import annotations

import json
import threading
import time

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


class _SlowPatches:
    """The demo encoder whose patch batches take ``delay_s`` each (a slow CPU)."""

    def __init__(self, encoder, delay_s: float):
        self._encoder, self._delay_s = encoder, delay_s

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode_patches(self, patches, normalize=True):
        time.sleep(self._delay_s)
        return self._encoder.encode_patches(patches, normalize=normalize)


def test_every_partial_map_shows_patches_the_one_before_did_not(tmp_path, demo_encoder):
    from medvl_engine.synthetic import make_synthetic_slide

    # more patches than one extraction batch (64), each batch far slower than the update
    # interval: the old loop yielded a map at every due poll, the same map again and again
    # (even maps of no patch) while no row arrived
    truth = make_synthetic_slide(tmp_path / "wide.tiff", seed=3, size=(4096, 3072))
    with open_slide(truth.path) as slide:
        maps = list(
            prompt_heatmap(
                slide,
                "tumor",
                _SlowPatches(demo_encoder(), delay_s=0.5),
                top_n=0,
                view=None,
                store_path=tmp_path / "slow.zarr",
                update_interval_s=0.05,
            )
        )
    *partials, complete = maps
    assert partials and complete.complete and not any(m.complete for m in partials)
    done = [m.done for m in maps]
    assert done[0] > 0 and all(b > a for a, b in zip(done, done[1:], strict=False)), done


def test_partial_maps_come_ever_less_often_while_the_slide_fills_in(tmp_path, demo_encoder):
    from medvl_engine.synthetic import make_synthetic_slide

    # 126 patches in batches of 8 that take 0.1 s each: with a map at every first chance
    # they came one per batch, 0.1 s apart
    truth = make_synthetic_slide(tmp_path / "wide.tiff", seed=3, size=(4096, 3072))
    with open_slide(truth.path) as slide:
        encoder = _SlowPatches(demo_encoder(), delay_s=0.1)
        partial = PartialFeatures.for_slide(slide, encoder, store_path=tmp_path / "s.zarr")
        steps = partial.fill(
            slide, encoder, None, interval_s=0.05, max_interval_s=0.4, batch_size=8
        )
        start, shown_at, known = time.perf_counter(), [], []
        while True:
            try:
                next(steps)
            except StopIteration as finished:
                store = finished.value
                break
            shown_at.append(time.perf_counter())
            known.append(partial.done)
    assert store.n_patches == partial.total == 126 and partial.complete
    assert len(shown_at) >= 3 and shown_at[0] - start >= 0.05
    waits = np.diff(shown_at)
    least = np.minimum(0.05 * 2.0 ** np.arange(1, len(shown_at)), 0.4)  # 0.1, 0.2, 0.4, 0.4...
    assert (waits >= least - 0.05).all(), (waits.round(3), least)  # the old loop: 0.1 s
    assert all(b > a for a, b in zip(known, known[1:], strict=False)), known


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


def test_templates_none_is_todays_heatmap_and_classification_to_the_bit(slide_path, demo_encoder):
    import inspect

    from medvl_engine.heatmap import similarity_map
    from medvl_engine.pathology import segment
    from medvl_engine.prompts import ensemble_embeddings, expand_classes
    from medvl_engine.slide_classification import classify_with_attention

    encoder = demo_encoder()
    prompts = ["tumor", "stroma"]
    two = ("an H&E image of {}.", "{}, H&E.")
    with open_slide(slide_path) as slide:
        store = final(prompt_heatmap(slide, "tumor", encoder, partials=False)).store
        today = similarity_map(store, encoder.encode_text(prompts), mode="softmax")
        for options in ({}, {"templates": "none"}):
            got = final(
                prompt_heatmap(slide, prompts, encoder, mode="softmax", features=store, **options)
            )
            np.testing.assert_array_equal(got.scores, today.scores)
        ensembled = final(prompt_heatmap(slide, "tumor", encoder, features=store, templates=two))
        tumor = ensemble_embeddings(encoder.encode_text, {"tumor": ("tumor",)}, two)
        np.testing.assert_allclose(ensembled.scores, store.features @ tumor[0].numpy(), atol=1e-6)
        plain = store.features @ encoder.encode_text(["tumor"])[0].numpy()
        assert np.abs(ensembled.scores - plain).max() > 1e-3

        classes = ["tumor", "adipose tissue"]
        before = classify_with_attention(store, encoder, classes, 0.05)
        off = classify(slide, classes, encoder, templates="none", features=store).classification
        np.testing.assert_array_equal(off.scores, before.scores)
        np.testing.assert_array_equal(off.attention, before.attention)
        on = classify(slide, classes, encoder, templates=two, features=store).classification
        recipe = expand_classes({c: (c,) for c in classes}, two)
        np.testing.assert_allclose(
            on.scores, classify_with_attention(store, encoder, recipe, 0.05).scores, rtol=1e-6
        )
        assert np.abs(on.scores - off.scores).max() > 1e-4
    # the defaults: CONCH's ensembles to classify and segment, plain prompts for heatmaps
    assert inspect.signature(classify).parameters["templates"].default == "conch"
    assert inspect.signature(segment).parameters["templates"].default == "conch"
    assert inspect.signature(prompt_heatmap).parameters["templates"].default == "none"


def test_segment_gives_the_regions_and_areas_medvl_segment_writes(
    slide_path, tmp_path, capsys, demo_encoder
):
    from medvl_engine.pathology import segment

    templates = tmp_path / "templates.txt"
    templates.write_text("an H&E image of {}.\n{}, H&E.\n", encoding="utf-8")
    classes = {
        "tumor": ("tumor", "carcinoma"),
        "stroma": ("stroma",),
        "adipose": ("adipose", "adipose tissue", "fat"),  # as --class adipose=adipose tissue,fat
    }
    result = segment(slide_path, classes, demo_encoder(), templates=templates)
    width, height = result.class_map.slide_dimensions
    assert result.regions and not result.notes
    assert result.templates == ("an H&E image of {}.", "{}, H&E.")
    shares = {row["class"]: row["share_of_tissue"] for row in result.table}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert min(shares["tumor"], shares["stroma"], shares["adipose"]) > 0.05  # all three drawn
    for region in result.regions:
        for ring in region.rings:
            assert (ring >= 0).all() and (ring <= (width, height)).all()
    outs = [tmp_path / "regions.geojson", tmp_path / "areas.csv", tmp_path / "map.png"]
    argv = ["segment", str(slide_path), "--class", "tumor=carcinoma", "--class", "stroma"]
    argv += ["--class", "adipose=adipose tissue,fat", "--json", "--max-size", "256"]
    argv += ["--templates", str(templates)]
    capsys.readouterr()
    assert main([*argv, *(a for out in outs for a in ("--out", str(out)))]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert json.loads(printed[0]) == result.table and printed[1:] == [str(o) for o in outs]
    written = json.loads(outs[0].read_text())
    assert len(written["features"]) == len(result.regions)
    assert written["features"][0]["properties"]["classification"]["name"] == result.regions[0].name


def test_segment_with_kept_embeddings_tissue_and_store_maps_as_from_the_slide(
    slide_path, demo_encoder
):
    from medvl_engine.errors import ConfigError
    from medvl_engine.pathology import segment
    from medvl_engine.prompts import ensemble_embeddings, resolve_templates
    from medvl_engine.tiling import tissue_mask

    encoder = demo_encoder()
    classes = {"tumor": ("tumor", "carcinoma"), "stroma": ("stroma",), "adipose": ("fat",)}
    with open_slide(slide_path) as slide:
        default = segment(slide, classes, encoder, overlap=2)  # CONCH templates, 1/2 grid
        stride_store = default.store
        kept = ensemble_embeddings(encoder.encode_text, classes, resolve_templates("conch"))
        tissue = tissue_mask(slide)

        class Silent:  # the encoder, refusing to encode text: the kept embeddings are used
            def __getattr__(self, name):
                return getattr(encoder, name)

            def encode_text(self, texts):
                raise AssertionError(f"text encoded again: {texts[:2]}")

        given = segment(
            slide,
            classes,
            Silent(),
            overlap=2,
            features=stride_store,  # the store of the 1/2 grid is used on its own grid
            class_embeddings=kept.numpy(),
            tissue=tissue,
        )
        with pytest.raises(ConfigError, match="2 class embeddings for 3 classes"):
            segment(slide, classes, encoder, features=stride_store, class_embeddings=kept[:2])
    assert given.store is stride_store and stride_store.stride == encoder.patch_size // 2
    assert not given.extracted
    np.testing.assert_array_equal(given.class_map.labels, default.class_map.labels)
    np.testing.assert_array_equal(given.class_map.probabilities, default.class_map.probabilities)
    assert given.table == default.table and given.notes == default.notes
    assert given.templates == default.templates == resolve_templates("conch")
    assert len(given.regions) == len(default.regions) > 0
    for mine, theirs in zip(given.regions, default.regions, strict=True):
        assert (mine.name, mine.area_px2) == (theirs.name, theirs.area_px2)
        for ring, other in zip(mine.rings, theirs.rings, strict=True):
            np.testing.assert_array_equal(ring, other)


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (["--class", "tumor"], "Segmenting needs at least two classes to choose between, got 1"),
        (["--class", "tumor", "--class", "=fat"], "Class '=fat' has an empty name"),
        (["--class", "a", "--class", "b", "--templates", "{T}"], "neither a set (conch, none)"),
        (["--class", "a", "--class", "b", "--out", "x.tiff"], "Output x.tiff has an unknown type"),
        (
            ["--class", "a", "--class", "b", "--overlap", "4", "--features", "f.zarr"],
            "brings its own",
        ),
        (["--preset", "liver"], "'liver' is not a class preset"),
    ],
)
def test_medvl_segment_refuses_bad_input_in_one_sentence(slide_path, argv, sentence, capsys):
    assert main(["segment", str(slide_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert sentence in err and len(err.splitlines()) == 1


def test_a_template_without_its_place_is_refused_from_the_file(tmp_path, capsys):
    templates = tmp_path / "mine.txt"
    templates.write_text("an H&E image of {}.\nan image of tumor.\n", encoding="utf-8")
    assert main(["segment", "--list-templates", "--templates", str(templates)]) == 2
    assert "Template 2 in mine.txt" in capsys.readouterr().err
    assert main(["segment", "--list-templates"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "{}, H&E."
