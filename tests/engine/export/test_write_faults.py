"""Exports and atomic writes when the machine refuses: full disk, read-only folder, denied.

Each refusal is one sentence naming the file and the problem in words; the file that was
there before is unchanged and no temporary file is left.
"""

from __future__ import annotations

import errno
import sys
import textwrap

import numpy as np
import pytest

from medvl_engine.common.atomic import atomic_directory, atomic_write
from medvl_engine.errors import StorageError
from medvl_engine.export.geojson import write_geojson
from medvl_engine.export.image import write_image
from tests.support.write_faults import failing_writes, leftovers

CASES = [
    (errno.ENOSPC, "the disk holding {folder} is full (No space left on device); free space"),
    (errno.EROFS, "{folder} is on a read-only file system (Read-only file system); choose a"),
    (errno.EACCES, "{folder} is read-only for this user (Permission denied); choose a folder"),
    (errno.EDQUOT, "your disk quota on the disk holding {folder} is used up"),
    (errno.EIO, "the disk holding {folder} reported an input/output error"),
]


@pytest.mark.parametrize(("code", "words"), CASES)
def test_image_export_refused_by_the_machine_is_one_sentence(tmp_path, code, words):
    target = tmp_path / "heat.png"
    target.write_bytes(b"previous export")
    with failing_writes(tmp_path, code, after_bytes=10):
        with pytest.raises(StorageError) as caught:
            write_image(target, np.zeros((64, 64, 3), np.uint8))
    message = str(caught.value)
    assert message.startswith(f"could not write file {target}: ")
    assert words.format(folder=tmp_path) in message and "\n" not in message
    assert target.read_bytes() == b"previous export"
    assert leftovers(tmp_path) == []


def test_geojson_export_on_a_full_disk_keeps_the_previous_file(tmp_path):
    target = tmp_path / "boxes.geojson"
    target.write_text("{}")
    collection = {"type": "FeatureCollection", "features": [{"x": "y" * 10_000}]}
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=4096):
        with pytest.raises(StorageError, match="boxes.geojson: the disk holding .* is full"):
            write_geojson(target, collection)
    assert target.read_text() == "{}" and leftovers(tmp_path) == []


def test_a_library_error_wrapping_a_full_disk_is_one_sentence(tmp_path):
    """torch's zip writer and safetensors wrap the OSError (a RuntimeError, or a Rust
    "(os error 28)" message); the sentence is the same as for a plain OSError."""

    def torch_like(temporary):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos") from None

    with pytest.raises(StorageError, match=r"model.pt: the disk holding .* is full"):
        atomic_write(tmp_path / "model.pt", torch_like)

    def safetensors_like(staging):
        raise type("SafetensorError", (Exception,), {})(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    with pytest.raises(StorageError, match=r"could not write model folder .*best: the disk"):
        atomic_directory(tmp_path / "best", safetensors_like, what="model folder")
    assert list(tmp_path.iterdir()) == []

    def other(staging):
        raise ValueError("not a write problem")

    with pytest.raises(ValueError, match="not a write problem"):
        atomic_directory(tmp_path / "best", other)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_model_folder_over_the_file_size_limit_is_one_sentence(tmp_path, run_limited):
    """safetensors under `ulimit -f` (the kernel's EFBIG, wrapped by Rust): one sentence."""
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        import torch
        from safetensors.torch import save_file
        from medvl_engine.common.atomic import atomic_directory
        from medvl_engine.errors import MedVLError
        try:
            atomic_directory({str(tmp_path / "final")!r},
                lambda staging: save_file({{"w": torch.zeros(10_000)}}, str(staging / "m.st")),
                what="model folder")
        except MedVLError as error:
            print(error)
            sys.exit(2)
        """
    )
    returncode, stdout, stderr, _ = run_limited(code, timeout_s=60, address_space_mb=8192)
    assert returncode == 2, stderr
    assert "could not write model folder" in stdout and "(File too large)" in stdout
    assert list(tmp_path.iterdir()) == []
