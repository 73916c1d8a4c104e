"""Pure layer builders: world coordinates of slides, mammograms, boxes and score grids."""

from __future__ import annotations

from types import SimpleNamespace

import dask.array as da
import numpy as np
import pytest

from napari_medvl._layers import (
    WorldFrame,
    boxes_layer,
    grid_image_layer,
    mammogram_layers,
    slide_frame,
    slide_layer,
    topk_layers,
)


def _fake_slide(mpp):
    levels = [da.zeros((400, 600, 3), dtype=np.uint8), da.zeros((100, 150, 3), dtype=np.uint8)]
    return SimpleNamespace(path="/data/case.svs", levels=levels, mpp=mpp)


def test_slide_layer_is_multiscale_rgb_in_micrometres_with_top_left_origin():
    data, kwargs, layer_type = slide_layer(_fake_slide((0.25, 0.5)))
    assert layer_type == "image"
    assert [level.shape for level in data] == [(400, 600, 3), (100, 150, 3)]
    assert kwargs["rgb"] and kwargs["multiscale"]
    assert kwargs["scale"] == (0.5, 0.25)  # (y, x) um per level-0 px
    # pixel (0, 0) covers [0, mpp): its centre is half a pixel from the origin
    assert kwargs["translate"] == (0.25, 0.125)
    assert kwargs["name"] == "case.svs"
    assert kwargs["metadata"]["mpp"] == (0.25, 0.5)
    assert kwargs["metadata"]["slide"].path == "/data/case.svs"


def test_slide_without_mpp_is_placed_in_level0_pixels():
    _, kwargs, _ = slide_layer(_fake_slide(None))
    assert kwargs["scale"] == (1.0, 1.0)
    assert kwargs["translate"] == (0.5, 0.5)
    assert slide_frame(None).units == "px"
    assert slide_frame((0.0, 0.0)).units == "px"


def _fake_mammogram(shape, laterality, view, path):
    return SimpleNamespace(
        pixels=np.linspace(0, 1, shape[0] * shape[1], dtype=np.float32).reshape(shape),
        laterality=laterality,
        view=view,
        path=path,
        pixel_spacing=(0.1, 0.1),
    )


def test_mammograms_open_side_by_side_with_windowing_and_view_names():
    cc = _fake_mammogram((300, 200), "L", "CC", "/x/1_L_CC.dcm")
    mlo = _fake_mammogram((320, 210), "L", "MLO", "/x/1_L_MLO.dcm")
    other = _fake_mammogram((50, 40), None, None, "/x/scan.png")
    layers = mammogram_layers([cc, mlo, other], gap_px=10)
    names = [kwargs["name"] for _, kwargs, _ in layers]
    assert names == ["L CC", "L MLO", "scan"]
    offsets = [kwargs["metadata"]["world_frame"]["offset_x"] for _, kwargs, _ in layers]
    assert offsets == [0.0, 210.0, 430.0]  # widths 200 and 210 plus a 10 px gap each
    _, kwargs, _ = layers[1]
    assert kwargs["translate"] == (0.5, 210.5)
    assert kwargs["contrast_limits"] == (0.0, 1.0)
    assert kwargs["colormap"] == "gray"
    assert layers[0][0].dtype == np.float32


def test_boxes_in_level0_px_become_world_rectangles_scaled_by_mpp():
    frame = slide_frame((0.5, 0.25))  # x 0.5 um/px, y 0.25 um/px
    boxes = np.array([[100, 200, 548, 648], [0, 0, 448, 448]])
    rectangles, kwargs, layer_type = boxes_layer(boxes, [0.2, 0.9], frame, name="top")
    assert layer_type == "shapes"
    first = np.asarray(rectangles[0])
    # corners in (y, x) world um: (y0 * 0.25, x0 * 0.5) ...
    np.testing.assert_allclose(first.min(axis=0), [200 * 0.25, 100 * 0.5])
    np.testing.assert_allclose(first.max(axis=0), [648 * 0.25, 548 * 0.5])
    assert list(kwargs["features"]["rank"]) == [2, 1]
    assert list(kwargs["features"]["score"]) == [0.2, 0.9]


def test_boxes_on_a_shifted_view_carry_the_view_offset():
    frame = WorldFrame(offset_x=500.0)
    rectangles, _, _ = boxes_layer(np.array([[10, 20, 30, 40]]), [1.0], frame, name="b")
    np.testing.assert_allclose(
        np.asarray(rectangles[0]), [[20, 510], [20, 530], [40, 530], [40, 510]]
    )


def test_boxes_and_scores_must_match():
    with pytest.raises(ValueError, match="2 boxes but 1 scores"):
        boxes_layer(np.zeros((2, 4)), [1.0], WorldFrame(), name="b")


def test_grid_layer_cells_cover_their_level0_patches():
    frame = slide_frame((0.5, 0.5))
    grid = np.arange(6, dtype=np.float32).reshape(2, 3)
    data, kwargs, _ = grid_image_layer(
        grid, frame, cell_size_px=448, origin_px=(64, 32), blending="additive"
    )
    assert kwargs["scale"] == (224.0, 224.0)
    # cell (0, 0) covers level-0 px [64, 512) in x and [32, 480) in y -> centre in um
    assert kwargs["translate"] == ((32 + 224) * 0.5, (64 + 224) * 0.5)
    assert kwargs["contrast_limits"] == (0.0, 5.0)
    assert kwargs["blending"] == "additive"
    assert data.shape == (2, 3)


def test_grid_layer_rejects_non_2d_scores():
    with pytest.raises(ValueError, match="2-D"):
        grid_image_layer(np.zeros((2, 2, 2)), WorldFrame(), cell_size_px=1)


class _MirroredBreast:
    """CC mirrored and scaled by 0.5 in x, 2 in y; MLO scaled, not mirrored."""

    image = np.zeros((1536, 1536), dtype=np.float32)

    def to_source(self, view, points_xy):
        points = np.asarray(points_xy, dtype=np.float64)
        if view == "CC":
            return np.stack([1000 - points[:, 0] * 0.5, points[:, 1] * 2.0], axis=1)
        return np.stack([points[:, 0] * 0.5, (points[:, 1] - 768) * 2.0], axis=1)


def _topk_result():
    importance = np.zeros((16, 16), dtype=np.float32)
    importance[2, 3] = 0.7  # CC half: breast px x [288, 384), y [192, 288)
    importance[9, 0] = 0.3  # MLO half: breast px x [0, 96), y [864, 960)
    return SimpleNamespace(
        importance=importance,
        boxes={"CC": np.array([[808.0, 384.0, 856.0, 576.0]]), "MLO": np.zeros((0, 4))},
        scores={"CC": np.array([0.7]), "MLO": np.zeros(0)},
        ranks={"CC": np.array([1]), "MLO": np.zeros(0, dtype=np.int64)},
    )


def _hot_cell_world(layer_data):
    from napari.layers import Layer

    layer = Layer.create(*layer_data)
    hits = np.argwhere(layer.data == np.nanmax(layer.data))  # cells under the floor are NaN
    return np.asarray(layer.data_to_world((hits.min(axis=0) + hits.max(axis=0)) / 2.0))


def test_importance_map_lands_on_the_tissue_it_scored_in_each_view():
    frames = {"CC": WorldFrame(), "MLO": WorldFrame(offset_x=600.0)}
    layers = topk_layers(_topk_result(), _MirroredBreast(), frames, laterality="L")
    by_name = {kwargs["name"]: (data, kwargs, kind) for data, kwargs, kind in layers}
    # CC cell (2, 3): breast px centre (336, 240); mirrored x: 1000 - 168; y x2: 480
    np.testing.assert_allclose(_hot_cell_world(by_name["TopK L importance CC"]), [480.0, 832.0])
    # MLO cell (9, 0) = half-grid row 1: breast centre (48, 912) -> (24, 288), shifted by 600
    np.testing.assert_allclose(_hot_cell_world(by_name["TopK L importance MLO"]), [288.0, 624.0])
    rows, cols = by_name["TopK L importance MLO"][0].shape  # whole raster px per cell
    assert rows == 8 * (rows // 8) and cols == 16 * (cols // 16) and rows * 2 == cols


class _RotatedBreast:
    """Views rotated a quarter turn into the breast image, as a portrait view laid landscape."""

    image = np.zeros((1536, 1536), dtype=np.float32)

    def to_source(self, view, points_xy):
        points = np.asarray(points_xy, dtype=np.float64)
        y = points[:, 1] - (0 if view == "CC" else 768)
        return np.stack([y * 0.5, 400 - points[:, 0] * 0.25], axis=1)


def test_importance_map_follows_a_rotated_view():
    importance = np.zeros((16, 16), dtype=np.float32)
    importance[2, 3] = 1.0  # breast px centre (336, 240)
    result = _topk_result()
    result.importance = importance
    layers = topk_layers(result, _RotatedBreast(), {"CC": WorldFrame(offset_x=50.0)})
    cc = next(item for item in layers if item[1]["name"] == "TopK importance CC")
    # source (x, y) = (240 * 0.5, 400 - 336 * 0.25) = (120, 316); world (y, x) = (316, 170)
    np.testing.assert_allclose(_hot_cell_world(cc), [316.0, 170.0])


def test_topk_boxes_sit_on_their_views_with_engine_ranks():
    frames = {"CC": WorldFrame(offset_x=100.0), "MLO": WorldFrame(offset_x=600.0)}
    layers = topk_layers(_topk_result(), _MirroredBreast(), frames)
    by_name = {kwargs["name"]: (data, kwargs, kind) for data, kwargs, kind in layers}
    rectangles, kwargs, kind = by_name["TopK boxes CC"]
    assert kind == "shapes"
    np.testing.assert_allclose(np.asarray(rectangles[0]).min(axis=0), [384.0, 908.0])
    np.testing.assert_allclose(np.asarray(rectangles[0]).max(axis=0), [576.0, 956.0])
    assert list(kwargs["features"]["rank"]) == [1]
    assert by_name["TopK boxes MLO"][0] == []


def test_prompts_split_on_semicolons():
    from napari_medvl._heatmap_job import parse_prompts

    assert parse_prompts(" tumor ; stroma;;\nfat ") == ["tumor", "stroma", "fat"]


def test_importance_cells_sit_where_the_engine_bounds_map_them(tmp_path_factory, tiny_topk_folder):
    """Real engine: a tiny model's TopKResult on a real CC/MLO BreastImage. Every importance
    cell covers, in world coordinates, the engine's cell bounds (wider outer cells, a CC/MLO
    split off the image middle) mapped through breast.to_source and the view's frame."""
    from napari.layers import Layer

    from medvl_engine.io.mammo import breast_image, open_mammogram
    from medvl_engine.models.topksiglip_folder import load_topksiglip
    from medvl_engine.models.topksiglip_inference import predict_topk
    from medvl_engine.synthetic import make_mammogram_case

    folder = tmp_path_factory.mktemp("cells")
    case = make_mammogram_case(folder, seed=4, laterality="R", size=(256, 160))
    breast = breast_image(open_mammogram(case.cc_path), open_mammogram(case.mlo_path))
    result = predict_topk(load_topksiglip(tiny_topk_folder(folder)), breast, k=3, zero_shot=False)
    bounds = result.cell_bounds
    grid = result.importance.shape[0]
    side = breast.image.shape[0]
    assert bounds[0] == 0.0 and bounds[-1] == side
    assert not np.allclose(bounds, np.linspace(0, side, grid + 1))  # not S / G per cell
    # every cell above the floor (1 % of the largest), so none is hidden
    result.importance = np.arange(1, grid * grid + 1, dtype=np.float32).reshape(grid, grid)
    frames = {"CC": WorldFrame(offset_x=10.0), "MLO": WorldFrame(offset_x=500.0)}
    layers = {
        kwargs["name"]: (data, kwargs, kind)
        for data, kwargs, kind in topk_layers(result, breast, frames)
    }
    for view, rows in (("CC", range(0, grid // 2)), ("MLO", range(grid // 2, grid))):
        layer = Layer.create(*layers[f"TopK importance {view}"])
        height, width = breast.placements[view].source_shape
        view_lo, view_hi = frames[view].to_world(np.array([[0.0, 0.0], [width, height]]))
        raster_px = np.abs(np.asarray(layer.affine.affine_matrix)[:2, :2]).sum(axis=1)
        for row in rows:
            for col in (0, 3, grid - 1):
                hits = np.argwhere(layer.data == result.importance[row, col])
                breast_xy = np.array(
                    [[bounds[c], bounds[r]] for r in (row, row + 1) for c in (col, col + 1)]
                )
                expected = frames[view].to_world(breast.to_source(view, breast_xy))
                inside = np.clip(expected, view_lo, view_hi)  # the map stops at its view
                if np.any(inside.max(axis=0) - inside.min(axis=0) < raster_px):
                    continue  # a cell (nearly) wholly in the padding has nothing to show
                lo, hi = hits.min(axis=0) - 0.5, hits.max(axis=0) + 0.5  # data px edges
                corners = [[lo[0], lo[1]], [lo[0], hi[1]], [hi[0], lo[1]], [hi[0], hi[1]]]
                world = np.array([layer.data_to_world(c) for c in corners])
                assert np.all(world >= view_lo - 1e-6) and np.all(world <= view_hi + 1e-6)
                error = np.abs(np.sort(world, axis=0) - np.sort(inside, axis=0))
                if np.allclose(inside, expected):  # wholly inside its view: exact
                    assert error.max() < 1e-6
                else:  # cut at the view's edge, to within one raster px
                    assert np.all(error <= raster_px + 1e-6)


def test_overlay_view_signed_maps_are_diverging_and_symmetric_about_zero():
    from medvl_engine.colormaps import DIVERGING_MAP, SEQUENTIAL_MAP
    from napari_medvl._overlay_style import OverlayStyle, overlay_view

    grid = np.array([[-0.227, -0.1], [-0.005, np.nan]], dtype=np.float32)
    view = overlay_view(grid, "contrast", "none", (-0.227, -0.005), OverlayStyle())
    # an all-negative contrast map: white is 0, so no cell reaches the red half
    assert view.signed and view.colormap == DIVERGING_MAP
    assert view.contrast_limits == pytest.approx((-0.227, 0.227))
    crossing = overlay_view(grid, "cosine", "none", (-0.1, 0.3), OverlayStyle())
    assert crossing.signed and crossing.contrast_limits == pytest.approx((-0.3, 0.3))
    positive = overlay_view(grid, "cosine", "none", (0.1, 0.3), OverlayStyle())
    assert not positive.signed and positive.colormap == SEQUENTIAL_MAP
    assert positive.contrast_limits == pytest.approx((0.1, 0.3))
    # normalised maps lie in [0, 1]: sequential even for contrast
    normalised = overlay_view(grid, "contrast", "minmax", (0.0, 1.0), OverlayStyle())
    assert not normalised.signed and normalised.contrast_limits == (0.0, 1.0)
    # hide below: cells under the threshold become NaN (transparent), the others stay
    hidden = overlay_view(grid, "contrast", "none", (-0.227, -0.005), OverlayStyle(threshold=-0.05))
    np.testing.assert_array_equal(np.isnan(hidden.data), [[True, True], [False, True]])
    assert (
        overlay_view(grid, "cosine", "none", (0.1, 0.3), OverlayStyle(colormap="gray")).colormap
        == "gray"
    )


def test_rank_labels_take_black_or_white_by_the_cell_under_them():
    """A contrast map (diverging, white at 0): labels over the saturated ends are white, over
    the pale middle black; napari draws each in its own colour."""
    from napari.layers import Layer

    from medvl_engine.heatmap import Heatmap
    from napari_medvl._layers import heatmap_layers, slide_frame

    grid = np.array([[-0.9, 0.0, 0.9, np.nan]], dtype=np.float32)
    heatmap = Heatmap(
        grid=grid,
        scores=grid.ravel(),
        origin_level0=(0, 0),
        cell_size_level0=224,
        scale=(112.0, 112.0),  # 224 level-0 px at 0.5 um/px
        translate=(56.0, 56.0),
        units="um",
        mode="contrast",
        prompt="tumor - stroma",
        value_range=(-0.9, 0.9),
    )
    boxes = np.array([[224.0 * c, 0.0, 224.0 * (c + 1), 224.0] for c in range(4)])
    layers = heatmap_layers(
        heatmap, (boxes, np.array([0.9, 0.5, 0.3, 0.1])), slide_frame((0.5, 0.5)), opacity=0.8
    )
    _, kwargs, _ = layers[1]
    assert list(kwargs["features"]["label_color"]) == ["white", "black", "white", "black"]
    shapes = Layer.create(*layers[1])
    colors = np.asarray(shapes.text.color(shapes.features))  # the encoding napari draws with
    np.testing.assert_allclose(colors[:, :3], [[1, 1, 1], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    # each label is the rank over the score, narrow enough for side-by-side patches
    strings = shapes.text.string(shapes.features)
    assert list(strings) == ["#1\n0.90", "#2\n0.50", "#3\n0.30", "#4\n0.10"]


@pytest.mark.parametrize("rank, score", [(1, 0.5), (99, -0.94), (10, 9.99)])
def test_top_patch_labels_are_at_most_five_characters_wide(rank, score):
    from napari_medvl._layers import TOP_PATCH_TEXT

    label = TOP_PATCH_TEXT.format(rank=rank, score=score)
    assert len(label.splitlines()) == 2 and max(map(len, label.splitlines())) <= 5
