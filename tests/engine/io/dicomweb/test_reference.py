"""dicomweb:// references: server root, study, series and instance; wrong ones in one sentence."""

from __future__ import annotations

import pytest

from medvl_engine.errors import ConfigError
from medvl_engine.io.dicomweb import InvalidReferenceError, is_dicomweb_reference, parse_reference


def test_levels_and_roots():
    server = parse_reference("dicomweb://pacs.example:8042/dicom-web")
    assert (server.root, server.level) == ("http://pacs.example:8042/dicom-web", "server")
    study = parse_reference("dicomweb://pacs.example:8042/dicom-web/studies/1.2.3/")
    assert (study.study, study.level) == ("1.2.3", "study")
    instance = parse_reference("https://h/a/b/studies/1.2/series/1.2.4/instances/1.2.4.5")
    assert instance.root == "https://h/a/b"
    assert (instance.series, instance.instance, instance.level) == ("1.2.4", "1.2.4.5", "instance")
    assert parse_reference("dicomwebs://h:443/rs").root == "https://h:443/rs"
    # written back, a reference parses to itself
    assert parse_reference(instance.text()) == instance
    assert (
        study.at("9.8", "7.6").text()
        == "dicomweb://pacs.example:8042/dicom-web/studies/9.8/series/7.6"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("/data/x.dcm", "not a DICOMweb reference"),
        ("ftp://h/x", "not a DICOMweb reference"),
        ("dicomweb:///dicom-web", "names no server"),
        ("dicomweb://me:secret@h/dicom-web", "credentials"),
        ("dicomweb://h/dicom-web?limit=3", "query"),
        ("dicomweb://h/dicom-web/studies/1.2/instances/3.4", "series/UID"),
        ("dicomweb://h/dicom-web/studies", "studies/UID"),
        ("dicomweb://h/dicom-web/studies/..%2F..%2Fetc", "not a DICOM UID"),
        ("dicomweb://h/dicom-web/studies/1.02.3", "not a DICOM UID"),
        ("dicomweb://h:99999/x", "not a valid URL"),
    ],
)
def test_wrong_references_say_what_is_wrong(text, words):
    with pytest.raises(InvalidReferenceError) as raised:
        parse_reference(text)
    assert words in str(raised.value)
    assert "secret" not in str(raised.value)
    assert isinstance(raised.value, ConfigError)


def test_file_paths_are_not_references():
    assert not is_dicomweb_reference("slide.dcm")
    assert not is_dicomweb_reference("C:\\data\\x.dcm")
    assert is_dicomweb_reference("DICOMweb://h/x")


def test_the_timeout_help_states_the_engine_default():
    from medvl_engine.cli._dicomweb import TIMEOUT_HELP_SECONDS
    from medvl_engine.io.dicomweb import DEFAULT_TIMEOUT_SECONDS

    assert TIMEOUT_HELP_SECONDS == DEFAULT_TIMEOUT_SECONDS


def test_send_refuses_a_bad_timeout_or_target_before_reading_files(tmp_path, capsys):
    from medvl_engine.cli.main import main

    missing = str(tmp_path / "absent.dcm")
    assert main(["send", missing, "--to", "dicomweb://h/dw", "--timeout", "0"]) == 2
    assert "--timeout must be a positive number of seconds, got 0.0" in capsys.readouterr().err
    series = "dicomweb://h/dw/studies/1.2/series/3.4"
    assert main(["send", missing, "--to", series]) == 2
    assert "names a series or instance; send to the server root or to a study" in (
        capsys.readouterr().err
    )
    assert main(["send", missing, "--to", "dicomweb://h/dw"]) == 2
    assert "absent.dcm is not a file; nothing was sent" in capsys.readouterr().err
