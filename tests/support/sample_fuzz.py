"""Damaging the sample files and reading the damaged copies, run in a child process whose
address space is limited (tests/engine/io/test_fuzz.py): the child imports this module by name."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medvl_engine.errors import MedVLError
from medvl_engine.io import open_mammogram, open_slide

SLIDE_SAMPLES = ("slides/small.svs", "slides/boxes.tiff", "dicom/sm_image.dcm", "dicom/boxes_0.dcm")
MAMMOGRAM_SAMPLES = ("dicom/dx_image.dcm",)
HEADER_BYTES = 4096


def damaged(data: bytes, cut: float | None, flips: list[tuple[float, int]]) -> bytes:
    """Truncate at fraction ``cut`` of the length, then flip bits, most of them in the header."""
    buffer = bytearray(data[: max(1, int(len(data) * cut))] if cut is not None else data)
    for position, bit in flips:
        span = min(len(buffer), HEADER_BYTES) if bit % 4 else len(buffer)
        buffer[int(position * (span - 1))] ^= 1 << (bit % 8)
    return bytes(buffer)


def exercise_slide(path: Path) -> None:
    with open_slide(path) as slide:
        for level in range(slide.level_count):
            slide.read_region((0, 0), level, (48, 48))
        last = slide.levels[-1]
        last[:32, :32].compute()
        for name in list(slide.associated_images)[:3]:
            slide.associated_images[name]


def exercise_mammogram(path: Path) -> None:
    mammogram = open_mammogram(path)
    assert mammogram.pixels.ndim == 2


damage = st.tuples(
    st.one_of(st.none(), st.floats(0.0, 0.999)),
    st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 31)), min_size=0, max_size=6),
)


def load_originals(sample_folder: Path) -> dict[str, bytes]:
    """The bytes of every sample file present, by relative name."""
    names = SLIDE_SAMPLES + MAMMOGRAM_SAMPLES
    return {
        name: (sample_folder / name).read_bytes()
        for name in names
        if (sample_folder / name).exists()
    }


@settings(
    max_examples=45,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(which=st.integers(0, 99), change=damage)
def fuzz_damaged_samples(originals: dict[str, bytes], which: int, change) -> None:
    """Each damaged copy opens and reads, or raises a MedVLError carrying its sentence."""
    name = sorted(originals)[which % len(originals)]
    cut, flips = change
    data = damaged(originals[name], cut, flips)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(name).name
        path.write_bytes(data)
        for exercise in (exercise_slide, exercise_mammogram):
            try:
                exercise(path)
            except MedVLError as error:
                assert str(error).strip(), "a MedVLError must carry its sentence"
