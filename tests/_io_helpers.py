"""Writers of small slides and mammograms with known pixels, for the io tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile


def coordinate_image(height: int, width: int) -> np.ndarray:
    """[H, W, 3] uint8 whose pixels encode their own position: (row % 251, col % 241, 7)."""
    rows = (np.arange(height) % 251).astype(np.uint8)
    cols = (np.arange(width) % 241).astype(np.uint8)
    image = np.empty((height, width, 3), np.uint8)
    image[..., 0] = rows[:, None]
    image[..., 1] = cols[None, :]
    image[..., 2] = 7
    return image


def pyramid(image: np.ndarray, levels: int) -> list[np.ndarray]:
    """Nearest-neighbour pyramid: level k is image[::2**k, ::2**k]."""
    return [image[:: 2**k, :: 2**k] for k in range(levels)]


def write_pyramid_tiff(
    path: Path,
    levels: list[np.ndarray],
    *,
    tile: int = 128,
    compression: str = "zlib",
    mpp: float | None = 0.5,
    ome: bool = False,
) -> Path:
    """A tiled pyramidal TIFF (level 0 page, coarser levels as SubIFDs)."""
    options = {"tile": (tile, tile), "photometric": "rgb", "compression": compression}
    first = dict(options, subifds=len(levels) - 1)
    if ome:
        metadata = {"axes": "YXS"}
        if mpp:
            metadata.update(PhysicalSizeX=mpp, PhysicalSizeY=mpp)
        first["metadata"] = metadata
    elif mpp:
        first.update(resolution=(1e4 / mpp, 1e4 / mpp), resolutionunit="CENTIMETER")
    with tifffile.TiffWriter(path, ome=ome) as writer:
        writer.write(levels[0], **first)
        for level in levels[1:]:
            writer.write(level, subfiletype=1, **options)
    return path


def write_svs(
    path: Path, image: np.ndarray, *, compression: str = "jpeg", tile: int = 240, mpp: float = 0.25
) -> Path:
    """A one-level Aperio SVS (ImageDescription in Aperio's format) with the given tiles."""
    height, width = image.shape[:2]
    description = (
        f"Aperio Image Library v12.0.0 \r\n{width}x{height} [0,0 {width}x{height}] "
        f"({tile}x{tile}) {compression.upper()}/RGB Q=90|AppMag = 40|MPP = {mpp:.4f}|"
        "Filename = patient-smith|User = someone"
    )
    with tifffile.TiffWriter(path) as writer:
        writer.write(
            image,
            tile=(tile, tile),
            photometric="rgb",
            compression=compression,
            description=description,
        )
    return path
