"""PNG/JPEG composites: the slide at low resolution, the heatmap blended on top, boxes, a
colour-bar legend, and a footer naming the model (with the demo notice for a demo model),
drawn with PIL."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from medvl_engine.colormaps import apply_colormap, display_limits, is_signed, resolve_colormap
from medvl_engine.common.atomic import atomic_write
from medvl_engine.common.model_label import model_footer

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from medvl_engine.heatmap import Heatmap
    from medvl_engine.io.slide import Slide

__all__ = ["composite_image", "sample_grid", "with_footer", "write_image"]

_LEGEND_WIDTH = 110


def sample_grid(
    grid: np.ndarray,
    origin_level0: tuple[float, float],
    cell_size_level0: float,
    shape: tuple[int, int],
    level0_per_px: tuple[float, float],
) -> np.ndarray:
    """Nearest-cell values of ``grid`` for an image [h, w] covering the slide from (0, 0).

    Output pixel (r, c) has its centre at level-0 (x, y) = ((c + 0.5) * sx, (r + 0.5) * sy)
    with (sx, sy) = ``level0_per_px``; outside the grid the value is NaN.
    """
    height, width = shape
    x = (np.arange(width) + 0.5) * level0_per_px[0]
    y = (np.arange(height) + 0.5) * level0_per_px[1]
    cols = np.floor((x - origin_level0[0]) / cell_size_level0).astype(np.int64)
    rows = np.floor((y - origin_level0[1]) / cell_size_level0).astype(np.int64)
    valid_c = (cols >= 0) & (cols < grid.shape[1])
    valid_r = (rows >= 0) & (rows < grid.shape[0])
    out = np.full(shape, np.nan, dtype=np.float32)
    sub = grid[np.ix_(rows[valid_r], cols[valid_c])]
    out[np.ix_(np.flatnonzero(valid_r), np.flatnonzero(valid_c))] = sub
    return out


def composite_image(
    slide: Slide,
    heatmap: Heatmap,
    *,
    max_size: int = 2048,
    level: int | None = None,
    alpha: float = 0.5,
    colormap: str | None = None,
    boxes: np.ndarray | None = None,
    legend: bool = True,
    title: str | None = None,
    model: str | Path | None = None,
) -> np.ndarray:
    """The slide with the heatmap blended, uint8 RGB: the whole pyramid ``level`` when given,
    else a thumbnail whose longest side is at most ``max_size``.

    Heatmap values are coloured over ``heatmap.value_range`` with ``colormap`` (None / "auto":
    viridis, or blue-white-red over limits symmetric around 0 when the map is signed); NaN
    cells leave the slide visible. ``boxes`` [N, 4] (x0, y0, x1, y1) level-0 px are outlined
    and numbered by rank (yellow on a black outline, readable on any map). With ``legend`` a
    colour bar with the range and the prompt is added on the right. A footer under the image
    names ``model`` (default: the encoder in ``heatmap.metadata``) and, for a demo model,
    says "demo model trained on synthetic data, not for diagnosis".
    """
    from PIL import Image, ImageDraw

    if level is None:
        base = np.asarray(slide.thumbnail(max_size))
    else:
        if not 0 <= level < len(slide.level_dimensions):
            from medvl_engine.errors import ExportError

            raise ExportError(
                f"Level {level} does not exist in {Path(str(slide.path)).name}; choose one of "
                f"0..{len(slide.level_dimensions) - 1}."
            )
        base = slide.read_region((0, 0), level, slide.level_dimensions[level])
    base = np.ascontiguousarray(base[..., :3])
    height, width = base.shape[:2]
    width0, height0 = slide.dimensions
    per_px = (width0 / width, height0 / height)
    values = sample_grid(
        np.asarray(heatmap.grid, np.float32),
        heatmap.origin_level0,
        heatmap.cell_size_level0,
        (height, width),
        per_px,
    )
    signed = is_signed(getattr(heatmap, "mode", None), heatmap.value_range)
    low, high = display_limits(heatmap.value_range, signed)
    colormap = resolve_colormap(colormap, signed)
    span = high - low if high > low else 1.0
    colours = apply_colormap((values - low) / span, colormap).astype(np.float32)
    shown = np.isfinite(values)[..., None]
    blended = np.where(shown, (1 - alpha) * base + alpha * colours, base)
    image = Image.fromarray(np.clip(blended + 0.5, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    if boxes is not None:
        from PIL import ImageFont

        line = max(2, round(max(width, height) / 600))
        font = ImageFont.load_default(size=max(11, round(max(width, height) / 80)))
        for rank, (x0, y0, x1, y1) in enumerate(np.asarray(boxes, np.float64).reshape(-1, 4), 1):
            rect = [x0 / per_px[0], y0 / per_px[1], x1 / per_px[0], y1 / per_px[1]]
            draw.rectangle(rect, outline=(0, 0, 0), width=line + 2)
            draw.rectangle(rect, outline=(255, 220, 0), width=line)
            draw.text(
                (rect[0] + 2 * line, rect[1] + line),
                str(rank),
                fill=(255, 220, 0),
                font=font,
                stroke_width=max(1, line // 2 + 1),
                stroke_fill=(0, 0, 0),
            )
    if legend:
        image = _with_legend(image, (low, high), colormap, title or heatmap.prompt)
    if model is None:
        model = (getattr(heatmap, "metadata", None) or {}).get("encoder")
    return np.asarray(with_footer(image, model_footer(model)))


def with_footer(image: PILImage, text: str) -> PILImage:
    """``image`` with a white strip below holding ``text`` in black (wrapped to the width)."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = image.size
    unit = max(1.0, height / 770)
    font = ImageFont.load_default(size=round(11 * unit))
    probe = ImageDraw.Draw(image)
    words, lines = text.split(" "), [""]
    for word in words:
        candidate = f"{lines[-1]} {word}".strip()
        if lines[-1] and probe.textlength(candidate, font=font) > width - 12 * unit:
            lines.append(word)
        else:
            lines[-1] = candidate
    line_height = round(15 * unit)
    strip = line_height * len(lines) + round(8 * unit)
    canvas = Image.new("RGB", (width, height + strip), (255, 255, 255))
    canvas.paste(image, (0, 0))
    draw = ImageDraw.Draw(canvas)
    for number, line in enumerate(lines):
        y = height + round(4 * unit) + number * line_height
        draw.text((round(6 * unit), y), line, fill=(0, 0, 0), font=font)
    return canvas


def _with_legend(
    image: PILImage, value_range: Sequence[float], colormap: str, title: str
) -> PILImage:
    """Add a white strip on the right holding a vertical colour bar, tick labels and a title.

    The strip is 110 px wide with 11 px text for images up to about 770 px high, and grows in
    proportion beyond that so the legend stays readable on large composites.
    """
    from PIL import Image, ImageDraw, ImageFont

    width, height = image.size
    unit = max(1.0, height / 770)
    font = ImageFont.load_default(size=round(11 * unit))
    legend_width, canvas_height = round(_LEGEND_WIDTH * unit), max(height, 160)
    canvas = Image.new("RGB", (width + legend_width, canvas_height), (255, 255, 255))
    canvas.paste(image, (0, 0))
    draw = ImageDraw.Draw(canvas)
    top, bottom = round(28 * unit), canvas_height - round(16 * unit)
    bar_x0, bar_x1 = width + round(14 * unit), width + round(38 * unit)
    ramp = np.linspace(1.0, 0.0, bottom - top, dtype=np.float32)
    bar = np.repeat(apply_colormap(ramp, colormap)[:, None, :], bar_x1 - bar_x0, axis=1)
    canvas.paste(Image.fromarray(bar), (bar_x0, top))
    draw.rectangle([bar_x0, top, bar_x1 - 1, bottom - 1], outline=(0, 0, 0))
    low, high = float(value_range[0]), float(value_range[1])
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = bottom - 1 - fraction * (bottom - top - 1)
        draw.line([bar_x1, y, bar_x1 + round(5 * unit), y], fill=(0, 0, 0))
        label = f"{low + fraction * (high - low):.3g}"
        draw.text((bar_x1 + round(8 * unit), y - 6 * unit), label, fill=(0, 0, 0), font=font)
    label = title if len(title) <= 16 else title[:15] + "…"
    draw.text((width + round(8 * unit), round(8 * unit)), label, fill=(0, 0, 0), font=font)
    return canvas


def write_image(
    path: str | Path,
    rgb: np.ndarray,
    quality: int = 90,
    text: dict[str, str] | None = None,
) -> Path:
    """Write uint8 RGB [H, W, 3] as PNG or JPEG (by suffix), atomically.

    ``text`` {key: value} is stored as PNG text chunks, or as the JPEG comment
    (``key: value`` lines).
    """
    from PIL import Image, PngImagePlugin

    path = Path(path)
    image = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    is_jpeg = path.suffix.lower() in (".jpg", ".jpeg")
    text = {key: value for key, value in (text or {}).items() if value}

    def write(temporary: Path) -> None:
        if is_jpeg:
            comment = "\n".join(f"{key}: {value}" for key, value in text.items())
            extra = {"comment": comment.encode("utf-8")} if comment else {}
            image.save(temporary, format="JPEG", quality=quality, **extra)
        else:
            info = PngImagePlugin.PngInfo()
            for key, value in text.items():
                info.add_itxt(key, value)
            image.save(temporary, format="PNG", pnginfo=info)

    return atomic_write(path, write)
