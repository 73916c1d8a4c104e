"""A real Orthanc: `medvl send` stores files, QIDO finds them, WADO brings back the same bytes,
`medvl info dicomweb://...` lists and describes them, a study's CC/MLO pairs resolve to files,
and a whole-slide series opens with the pixels of the local files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pydicom
import pytest

from medvl_engine.cli.main import main
from medvl_engine.io.dicomweb import (
    fetch,
    open_remote_slide,
    parse_reference,
    resolve_mammo_study,
    retrieve_instances,
    search_instances,
    search_studies,
)
from medvl_engine.io.mammo import open_mammogram
from tests.engine.io.dicomweb.conftest import digest
from tests.support.dicom_wsi import write_dicom_wsi


def _study_uid(path: Path) -> str:
    return str(pydicom.dcmread(path, stop_before_pixels=True).StudyInstanceUID)


def test_send_search_retrieve_gives_back_the_same_bytes(server, mammo_exam, capsys):
    before = {digest(path) for path in mammo_exam}
    assert main(["send", *map(str, mammo_exam), "--to", server.dicomweb]) == 0
    study = _study_uid(mammo_exam[0])
    out = capsys.readouterr().out
    assert "sent 4 file(s) to 127.0.0.1:" in out
    assert f"{server.dicomweb}/studies/{study}" in out
    assert server.instance_count() == 4
    assert {digest(path) for path in mammo_exam} == before  # sending changes nothing

    root = parse_reference(server.dicomweb)
    (found,) = search_studies(root, timeout=10)
    assert (found.uid, found.modalities, found.instance_count) == (study, ("MG",), 4)
    entries = search_instances(root.at(study), timeout=10)
    assert sorted((e.laterality, e.view) for e in entries) == [
        ("L", "CC"),
        ("L", "MLO"),
        ("R", "CC"),
        ("R", "MLO"),
    ]
    retrieved = fetch(root.at(study), timeout=10)
    assert {digest(path) for path in retrieved} == before  # byte for byte what was sent
    # cached: the same files come back without asking the emptied server
    server.clear()
    assert retrieve_instances(root, entries, timeout=10) == [
        retrieved[[e.uid for e in entries].index(e.uid)] for e in entries
    ]


def test_info_lists_the_server_a_study_and_describes_a_series(server, mammo_exam, capsys):
    assert main(["send", *map(str, mammo_exam), "--to", server.dicomweb]) == 0
    study = f"{server.dicomweb}/studies/{_study_uid(mammo_exam[0])}"
    capsys.readouterr()
    assert main(["info", server.dicomweb]) == 0
    listing = capsys.readouterr().out
    assert study in listing and "MG, 4 series, 4 instance(s)" in listing
    assert "SYNTHETIC" not in listing  # patient names only with --identifying

    assert main(["info", "--json", study]) == 0
    (described,) = json.loads(capsys.readouterr().out)
    assert described["cc_mlo_pairs"] == ["R", "L"]
    assert len(described["series"]) == 4

    series = described["series"][0]["series"]
    assert main(["info", series]) == 0
    text = capsys.readouterr().out
    assert "kind: mammogram" in text and "shape: [192, 128]" in text
    assert "view: " in text and "laterality: " in text


def test_a_study_resolves_to_each_breasts_cc_and_mlo(server, mammo_exam):
    assert main(["send", *map(str, mammo_exam), "--to", server.dicomweb]) == 0
    pairs = resolve_mammo_study(f"{server.dicomweb}/studies/{_study_uid(mammo_exam[0])}")
    views = [tuple((m.laterality, m.view) for m in map(open_mammogram, pair)) for pair in pairs]
    assert views == [(("R", "CC"), ("R", "MLO")), (("L", "CC"), ("L", "MLO"))]
    originals = {p.stem.split("_", 1)[1]: digest(p) for p in mammo_exam}
    assert digest(pairs[1][0]) == originals["L_CC"]
    assert digest(pairs[0][1]) == originals["R_MLO"]


def test_a_slide_series_opens_with_the_local_files_pixels(server, tmp_path, coordinate_image):
    from medvl_engine.io.slide import open_slide

    image = coordinate_image(150, 200)
    files = write_dicom_wsi(tmp_path / "wsi", image, tile=64, levels=2)
    assert main(["send", *map(str, files), "--to", server.dicomweb]) == 0
    study = _study_uid(files[0])
    with open_remote_slide(f"{server.dicomweb}/studies/{study}", timeout=10) as remote:
        with open_slide(files[0]) as local:
            assert remote.level_dimensions == local.level_dimensions == [(200, 150), (100, 75)]
            assert remote.mpp == local.mpp
            for level in (0, 1):
                width, height = local.level_dimensions[level]
                np.testing.assert_array_equal(
                    np.asarray(remote.read_region((0, 0), level, (width, height))),
                    np.asarray(local.read_region((0, 0), level, (width, height))),
                )


def test_topk_views_of_a_study_choose_one_breast(server, mammo_exam):
    from medvl_engine.cli._dicomweb import topk_views
    from medvl_engine.errors import ConfigError
    from medvl_engine.io.dicomweb import NoMammoPairError, send

    assert topk_views("a.dcm", "b.dcm", None, 5) == ("a.dcm", "b.dcm", None)
    with pytest.raises(ConfigError, match="give the MLO view after the CC view"):
        topk_views("a.dcm", None, None, 5)
    send(mammo_exam, server.dicomweb)
    study = f"{server.dicomweb}/studies/{_study_uid(mammo_exam[0])}"
    with pytest.raises(ConfigError, match="has both breasts; choose one with --breast R"):
        topk_views(study, None, None, 5)
    with pytest.raises(ConfigError, match="either the two view files or one dicomweb"):
        topk_views(study, "b.dcm", "L", 5)
    cc, mlo, side = topk_views(study, None, "l", 5)
    assert side == "L"
    assert [(m.laterality, m.view) for m in map(open_mammogram, (cc, mlo))] == [
        ("L", "CC"),
        ("L", "MLO"),
    ]
    # a study with one breast needs no --breast; asking for the other one says what there is
    server.clear()
    send([p for p in mammo_exam if "_R_" in p.name], server.dicomweb)
    assert topk_views(study, None, None, 5)[2] == "R"
    with pytest.raises(NoMammoPairError, match="no CC and MLO view of the left breast"):
        topk_views(study, None, "L", 5)
