"""Files and folders written atomically get the permissions a plain open()/mkdir() gives."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

from medvl_engine import atomic_directory, atomic_write, atomic_write_stream
from medvl_engine.export import export_heatmap
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import similarity_map


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request):
    """Run the test under this umask, then restore the previous one."""
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _store() -> FeatureStore:
    coords = np.array([(x * 100, y * 100) for y in range(2) for x in range(3)], np.int64)
    angle = np.linspace(0, np.pi / 2, len(coords))
    return FeatureStore(
        np.stack([np.cos(angle), np.sin(angle)], axis=1),
        coords,
        patch_size_level0=100,
        patch_size=224,
        mpp=(0.5, 0.5),
        slide_dimensions=(300, 200),
    )


@pytest.mark.parametrize("name", ["heat.tiff", "heat.png", "heat.geojson", "heat.npz", "p.csv"])
def test_every_export_is_readable_like_a_plain_file(tmp_path, umask, name):
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    store = _store()
    heatmap = similarity_map(store, torch.tensor([[1.0, 0.0]]), prompt="tumor")
    truth = make_synthetic_slide(tmp_path / "s.tiff", seed=1, size=(300, 200))
    assert _mode(truth.path) == 0o666 & ~umask
    with open_slide(truth.path) as slide:
        path = export_heatmap(tmp_path / name, heatmap, store, slide=slide)
    assert _mode(path) == 0o666 & ~umask
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert _mode(path) == _mode(plain)


def test_writer_that_replaces_the_temporary_file_still_gets_plain_permissions(tmp_path, umask):
    def replace_with_private_file(temporary):
        temporary.unlink()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"data")
        os.close(fd)

    path = atomic_write(tmp_path / "model.bin", replace_with_private_file)
    assert path.read_bytes() == b"data"
    assert _mode(path) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_stream_writes_and_replaced_files_take_the_current_umask(tmp_path, umask):
    path = atomic_write_stream(tmp_path / "a.json", lambda handle: handle.write("{}"))
    assert _mode(path) == 0o666 & ~umask
    os.chmod(path, 0o600)  # an old private file is replaced by a plain-permission one
    atomic_write_stream(tmp_path / "a.json", lambda handle: handle.write("[]"))
    assert path.read_text() == "[]" and _mode(path) == 0o666 & ~umask


def test_atomic_directory_gets_plain_folder_permissions(tmp_path, umask):
    def fill(staging):
        (staging / "config.json").write_text("{}")
        atomic_write(staging / "model.safetensors", lambda t: t.write_bytes(b"w"))

    folder = atomic_directory(tmp_path / "models" / "tiny", fill)
    assert _mode(folder) == 0o777 & ~umask
    assert _mode(folder.parent) == 0o777 & ~umask
    assert _mode(folder / "model.safetensors") == 0o666 & ~umask
    assert _mode(folder / "config.json") == 0o666 & ~umask
