"""An Aperio-style SVS pyramid of JPEG 2000 tiles, as TCGA slides are stored, for the stall
test and its bench (which open it in napari and pan it at level 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DOWNSAMPLES = (1, 4, 16)


def write_j2k_pyramid(path: Path, base: np.ndarray, tile: int = 240) -> Path:
    """Write ``base`` (uint8 [S, S, 3], S a multiple of 16) as an SVS with levels 1, 1/4 and
    1/16 (each the mean of ``down x down`` blocks of level 0), JPEG 2000 tiles of
    ``tile x tile`` px, 0.5 um/px at 20x; return ``path``."""
    import tifffile

    size = base.shape[0]
    description = (
        f"Aperio Image Library v12.0.0 \r\n{size}x{size} [0,0 {size}x{size}] ({tile}x{tile}) "
        "JPEG2000/RGB Q=80|AppMag = 20|MPP = 0.5000"
    )
    with tifffile.TiffWriter(path) as writer:
        for index, down in enumerate(DOWNSAMPLES):
            side = size // down
            level = base.reshape(side, down, side, down, 3).mean(axis=(1, 3)).astype(np.uint8)
            writer.write(
                level,
                tile=(tile, tile),
                compression="jpeg2000",
                photometric="rgb",
                description=description if index == 0 else None,
                subfiletype=0 if index == 0 else 1,
            )
    return path
