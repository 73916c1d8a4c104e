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


def write_dicom(path: Path, pixels: np.ndarray | None, **attributes) -> Path:
    """An uncompressed (explicit VR little endian) grayscale DICOM image with extra attributes.

    ``pixels`` uint8, uint16 or int16 [H, W]; None writes a dataset without Pixel Data.
    Sequence attributes may be given as lists of dicts.
    """
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.2"  # digital mammography
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = attributes.pop("transfer_syntax", ExplicitVRLittleEndian)
    dataset = Dataset()
    dataset.file_meta = meta
    dataset.SOPClassUID = meta.MediaStorageSOPClassUID
    dataset.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    dataset.Modality = "MG"
    dataset.PatientName = "Doe^Jane"
    dataset.PatientID = "PID-0042"
    dataset.PatientBirthDate = "19600101"
    if pixels is not None:
        bits = 8 if pixels.dtype == np.uint8 else 16
        dataset.Rows, dataset.Columns = pixels.shape
        dataset.SamplesPerPixel = 1
        dataset.PhotometricInterpretation = "MONOCHROME2"
        dataset.BitsAllocated = bits
        dataset.BitsStored = bits if bits == 8 else 12
        dataset.HighBit = dataset.BitsStored - 1
        dataset.PixelRepresentation = 1 if np.issubdtype(pixels.dtype, np.signedinteger) else 0
        data = np.ascontiguousarray(pixels).tobytes()
        if meta.TransferSyntaxUID.is_compressed:
            from pydicom.encaps import encapsulate

            data = encapsulate([data])
        dataset.PixelData = data
    for keyword, value in attributes.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = []
            for fields in value:
                item = Dataset()
                for key, inner in fields.items():
                    setattr(item, key, inner)
                items.append(item)
            value = Sequence(items)
        setattr(dataset, keyword, value)
    dataset.save_as(path, enforce_file_format=True)
    return path


def write_sm_dicom(
    path: Path,
    image: np.ndarray,
    *,
    tile: int,
    series_uid: str,
    flavour: str = "VOLUME",
    sparse: bool = False,
    mpp: float = 0.25,
) -> Path:
    """A DICOM VL Whole Slide Microscopy instance, uncompressed RGB tiles (TILED_FULL or SPARSE).

    ``image`` [H, W, 3] uint8; edge tiles are padded with black. Sparse instances list
    their tiles in reverse order with per-frame positions, so frame order != tile order.
    """
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    height, width = image.shape[:2]
    rows, cols = -(-height // tile), -(-width // tile)
    padded = np.zeros((rows * tile, cols * tile, 3), np.uint8)
    padded[:height, :width] = image
    order = [(r, c) for r in range(rows) for c in range(cols)]
    if sparse:
        order = order[::-1]
    frames = [padded[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile] for r, c in order]

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.77.1.6"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.SeriesInstanceUID = series_uid
    ds.Modality = "SM"
    ds.PatientName = "Roe^Richard"
    ds.ContainerIdentifier = "SLIDE-77"
    ds.ImageType = ["DERIVED", "PRIMARY", flavour, "NONE"]
    ds.Rows = ds.Columns = tile
    ds.TotalPixelMatrixRows, ds.TotalPixelMatrixColumns = height, width
    ds.NumberOfFrames = len(frames)
    ds.DimensionOrganizationType = "TILED_SPARSE" if sparse else "TILED_FULL"
    ds.SamplesPerPixel = 3
    ds.PhotometricInterpretation = "RGB"
    ds.PlanarConfiguration = 0
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit = 7
    ds.PixelRepresentation = 0
    measures = Dataset()
    measures.PixelSpacing = [mpp / 1000, mpp / 1000]
    shared = Dataset()
    shared.PixelMeasuresSequence = Sequence([measures])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    optical = Dataset()
    optical.ObjectiveLensPower = 40
    ds.OpticalPathSequence = Sequence([optical])
    if sparse:
        groups = []
        for r, c in order:
            position = Dataset()
            position.RowPositionInTotalImagePixelMatrix = r * tile + 1
            position.ColumnPositionInTotalImagePixelMatrix = c * tile + 1
            group = Dataset()
            group.PlanePositionSlideSequence = Sequence([position])
            groups.append(group)
        ds.PerFrameFunctionalGroupsSequence = Sequence(groups)
    ds.PixelData = np.ascontiguousarray(np.stack(frames)).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path
