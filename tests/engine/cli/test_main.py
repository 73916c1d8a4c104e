"""The `medvl` entry point: subcommand discovery, errors as one sentence, closed pipes."""

from __future__ import annotations

import subprocess
import sys

from medvl_engine.cli.main import build_parser, main


def test_every_subcommand_is_discovered():
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    assert {"info", "features", "heatmap", "classify", "export", "topk", "demo"} <= commands


def test_a_missing_file_is_one_sentence_and_status_2(tmp_path, capsys):
    assert main(["info", str(tmp_path / "absent.svs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent.svs" in err[0] and "Traceback" not in err[0]


def test_output_into_a_closed_pipe_stops_quietly(sample_file):
    svs = str(sample_file("slides/small.svs"))
    code = (  # more output than a pipe buffer holds, so writing outlives `head`
        "import sys; from medvl_engine.cli.main import main; "
        f"sys.exit(main(['info', *[{svs!r}] * 300]))"
    )
    pipeline = subprocess.run(
        f'{sys.executable} -c "{code}" | head -n 1',
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pipeline.stdout.strip().endswith("small.svs")
    assert "Traceback" not in pipeline.stderr and "BrokenPipe" not in pipeline.stderr
