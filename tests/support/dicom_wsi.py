"""A small, complete DICOM VL Whole Slide Microscopy series (TILED_FULL pyramid) for tests.

Written with pydicom from scratch: patient, study, series, frame of reference, specimen,
optical path, a non-zero origin and the usual rotated slide orientation [0, -1, 0, -1, 0, 0],
so results derived from it exercise the real geometry (see medvl_engine.io.dicom_results).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

WSI_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.77.1.6"
ORIGIN_MM = (20.0, 40.0)
ORIENTATION = (0.0, -1.0, 0.0, -1.0, 0.0, 0.0)


def _code(value: str, scheme: str, meaning: str) -> Dataset:
    item = Dataset()
    item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = value, scheme, meaning
    return item


def _tiles(image: np.ndarray, tile: int) -> tuple[bytes, int]:
    height, width = image.shape[:2]
    rows, cols = -(-height // tile), -(-width // tile)
    padded = np.full((rows * tile, cols * tile, 3), 255, np.uint8)
    padded[:height, :width] = image
    frames = [
        padded[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile]
        for r in range(rows)
        for c in range(cols)
    ]
    return np.ascontiguousarray(np.stack(frames)).tobytes(), len(frames)


def write_dicom_wsi(
    folder: Path,
    image: np.ndarray,
    *,
    mpp: float = 0.5,
    tile: int = 64,
    levels: int = 2,
) -> list[Path]:
    """Write ``image`` uint8 [H, W, 3] as ``levels`` VOLUME instances (level 0 at ``mpp`` um,
    each next level halved) into ``folder``; returns the files, level 0 first."""
    folder.mkdir(parents=True, exist_ok=True)
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    specimen_uid, dimension_uid = generate_uid(), generate_uid()
    paths = []
    for level in range(levels):
        pixels = image[:: 2**level, :: 2**level]
        spacing = mpp * 2**level / 1000.0
        data, n_frames = _tiles(pixels, tile)
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = WSI_SOP_CLASS
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = Dataset()
        ds.file_meta = meta
        ds.SOPClassUID, ds.SOPInstanceUID = WSI_SOP_CLASS, meta.MediaStorageSOPInstanceUID
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study, series, frame
        ds.Modality = "SM"
        ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.PatientSex = (
            "Doe^Jane",
            "P-1",
            "",
            "O",
        )
        ds.StudyDate, ds.StudyTime, ds.StudyID, ds.AccessionNumber = (
            "20260101",
            "120000",
            "S1",
            "A1",
        )
        ds.ReferringPhysicianName = ""
        ds.SeriesNumber, ds.InstanceNumber = 1, level + 1
        ds.ContentDate, ds.ContentTime = "20260101", "120000"
        ds.AcquisitionDateTime = "20260101120000"
        ds.Manufacturer, ds.ManufacturerModelName = "Synthetic", "scanner"
        ds.DeviceSerialNumber, ds.SoftwareVersions = "0", "1"
        ds.PositionReferenceIndicator = "SLIDE_CORNER"
        ds.ImageType = ["ORIGINAL" if level == 0 else "DERIVED", "PRIMARY", "VOLUME", "NONE"]
        ds.VolumetricProperties = "VOLUME"
        ds.BurnedInAnnotation, ds.SpecimenLabelInImage = "NO", "NO"
        ds.FocusMethod, ds.ExtendedDepthOfField = "AUTO", "NO"
        ds.LossyImageCompression = "00"
        ds.ContainerIdentifier = "SLIDE-1"
        ds.IssuerOfTheContainerIdentifierSequence = Sequence([])
        ds.ContainerTypeCodeSequence = Sequence([_code("433466003", "SCT", "Microscope slide")])
        specimen = Dataset()
        specimen.SpecimenIdentifier, specimen.SpecimenUID = "SPECIMEN-1", specimen_uid
        specimen.IssuerOfTheSpecimenIdentifierSequence = Sequence([])
        specimen.SpecimenPreparationSequence = Sequence([])
        ds.SpecimenDescriptionSequence = Sequence([specimen])
        ds.AcquisitionContextSequence = Sequence([])
        ds.Rows = ds.Columns = tile
        ds.TotalPixelMatrixRows, ds.TotalPixelMatrixColumns = pixels.shape[:2]
        ds.NumberOfFrames = n_frames
        ds.ImagedVolumeWidth = pixels.shape[1] * spacing
        ds.ImagedVolumeHeight = pixels.shape[0] * spacing
        ds.ImagedVolumeDepth = 0.001
        origin = Dataset()
        origin.XOffsetInSlideCoordinateSystem, origin.YOffsetInSlideCoordinateSystem = ORIGIN_MM
        ds.TotalPixelMatrixOriginSequence = Sequence([origin])
        ds.ImageOrientationSlide = list(ORIENTATION)
        ds.DimensionOrganizationType = "TILED_FULL"
        organization = Dataset()
        organization.DimensionOrganizationUID = dimension_uid
        ds.DimensionOrganizationSequence = Sequence([organization])
        ds.TotalPixelMatrixFocalPlanes, ds.NumberOfOpticalPaths = 1, 1
        optical = Dataset()
        optical.OpticalPathIdentifier = "1"
        optical.IlluminationTypeCodeSequence = Sequence(
            [_code("111744", "DCM", "Brightfield illumination")]
        )
        optical.IlluminationColorCodeSequence = Sequence(
            [_code("414298005", "SCT", "Full Spectrum")]
        )
        optical.ObjectiveLensPower = 20
        ds.OpticalPathSequence = Sequence([optical])
        ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, "RGB", 0
        ds.BitsAllocated = ds.BitsStored = 8
        ds.HighBit, ds.PixelRepresentation = 7, 0
        measures = Dataset()
        measures.PixelSpacing = [spacing, spacing]
        measures.SliceThickness = 0.001
        frame_type = Dataset()
        frame_type.FrameType = list(ds.ImageType)
        shared = Dataset()
        shared.PixelMeasuresSequence = Sequence([measures])
        shared.WholeSlideMicroscopyImageFrameTypeSequence = Sequence([frame_type])
        ds.SharedFunctionalGroupsSequence = Sequence([shared])
        ds.PixelData = data
        path = folder / f"level{level}.dcm"
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths
