"""Fixtures shared by the engine and the plugin tests. Tests never touch the network.

Helpers that make things are fixtures returning a function; what is slow to build and never
changed by a test (a tiny TopKSigLIP folder) is a session-scoped fixture returning its path.
Fresh processes whose results tests only wait for run two at a time (``run_in_background``,
``run_limited_in_background``): a module fixture starts those of its tests at once.
Fixtures of one area live in that area's conftest.py (tests/engine, tests/engine/io,
tests/engine/training, tests/plugin); code another process imports by name is in tests/support.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from medvl_engine.models.topksiglip import TopKSigLIP

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DATA = Path(os.environ.get("MEDVL_SAMPLE_DATA", REPO_ROOT.parent / "shared" / "sample-data"))


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """Folder of real sample files (../shared/sample-data); skips when absent."""
    if not SAMPLE_DATA.is_dir():
        pytest.skip(f"sample data folder {SAMPLE_DATA} is absent")
    return SAMPLE_DATA


@pytest.fixture(scope="session")
def sample_file(sample_data: Path):
    """Return a function giving the path of one sample file, skipping when it is absent."""

    def get(relative: str) -> Path:
        path = sample_data / relative
        if not path.exists():
            pytest.skip(f"sample file {relative} is absent")
        return path

    return get


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", help="also run tests marked slow (minutes each)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` tests opt in (--run-slow or -m slow); `gpu` tests need CUDA."""
    selected_by_marker = "slow" in (config.getoption("-m") or "")
    run_slow = config.getoption("--run-slow") or selected_by_marker
    cuda = None
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: run with --run-slow"))
        if "gpu" in item.keywords:
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


# Runs the command as a grandchild: Linux carries a process's peak RSS across fork and exec, so
# a child forked straight from this (large) test process would report this process's peak. The
# launcher is a fresh small interpreter; what it forks starts from its small footprint.
_LAUNCHER = """
import json, os, resource, sys
size, report, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (size, size))
    os.execvp(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
with open(report, "w") as stream:
    json.dump({"returncode": code, "maxrss_kb": usage.ru_maxrss}, stream)
sys.exit(code if code >= 0 else 128 - code)
"""


def _limited_run(
    command: Sequence[str] | str, timeout_s: float, max_mb: float, address_space_mb: float
) -> tuple[int, str, str, float]:
    import json

    target = [sys.executable, "-c", command] if isinstance(command, str) else list(command)
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryDirectory() as folder,
    ):
        report = Path(folder) / "report.json"
        size = str(int(address_space_mb * 2**20))
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, size, str(report), *target],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        returncode, peak_mb = process.returncode, 0.0
        if report.exists():
            result = json.loads(report.read_text())
            returncode, peak_mb = result["returncode"], result["maxrss_kb"] / 1024.0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    if timed_out:
        stderr += f"\n[run_limited: killed after {timeout_s} s]"
    if peak_mb > max_mb:
        stderr += f"\n[run_limited: peak RSS {peak_mb:.0f} MB is over {max_mb} MB]"
    return returncode, stdout, stderr, peak_mb


@pytest.fixture
def run_limited():
    """Run a command in a child process with bounded address space and time.

    ``run_limited(command, timeout_s, max_mb, address_space_mb=3072)`` runs ``command`` (an
    argv list, or a string of Python code run with this interpreter) with RLIMIT_AS set to
    ``address_space_mb`` and kills its process group after ``timeout_s`` seconds. It returns
    ``(returncode, stdout, stderr, peak_rss_mb)``: returncode is negative for a signal (-9
    after a timeout), peak_rss_mb the child's own maximum resident set. When the child ran
    out of time or went over ``max_mb`` a note saying so is appended to stderr; the caller
    asserts on the numbers.
    """

    def run(
        command: Sequence[str] | str,
        timeout_s: float = 60.0,
        max_mb: float = 1024.0,
        address_space_mb: float = 3072.0,
    ) -> tuple[int, str, str, float]:
        return _limited_run(command, timeout_s, max_mb, address_space_mb)

    return run


@pytest.fixture(scope="session")
def _two_at_a_time():
    """A pool that runs child processes two at a time (one per core of the smallest machine
    the tests run on), shared by the background-run fixtures."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="child-process")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def run_limited_in_background(_two_at_a_time):
    """``run_limited_in_background(command, timeout_s=60, max_mb=1024, address_space_mb=3072)``
    -> a future of what :func:`run_limited` returns for that command.

    The commands run two at a time, each in its own child process under its own limits, so a
    module whose tests each assert on one child can start all of them at once and wait for
    each result in its test.
    """

    def submit(
        command: Sequence[str] | str,
        timeout_s: float = 60.0,
        max_mb: float = 1024.0,
        address_space_mb: float = 3072.0,
    ):
        return _two_at_a_time.submit(_limited_run, command, timeout_s, max_mb, address_space_mb)

    return submit


@pytest.fixture(scope="session")
def run_in_background(_two_at_a_time):
    """``run_in_background(argv, **options)`` -> a future of ``subprocess.run(argv,
    **options)``, run two at a time like :func:`run_limited_in_background`: a module fixture
    starts the fresh processes its tests assert on, each test waits for its own."""

    def submit(argv: Sequence[str], **options):
        return _two_at_a_time.submit(subprocess.run, list(argv), **options)

    return submit


def _selected_params(request: pytest.FixtureRequest, function: str, name: str) -> list:
    values = []
    for item in request.session.items:
        if item.module is not request.module or getattr(item, "originalname", None) != function:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and name in callspec.params:
            values.append(callspec.params[name])
    return values


@pytest.fixture(scope="session")
def selected_params():
    """``selected_params(request, function, name)`` -> the values of parameter ``name`` of the
    selected items of test ``function`` in the requesting module, in collection order (what a
    module fixture may start ahead for them)."""
    return _selected_params


def _library_output_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **extra}
    for name in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="session")
def library_output_env():
    """``library_output_env(**extra)`` -> the environment of a child process (offline, with
    ``extra`` set) whose transformers / Hugging Face Hub verbosity and progress-bar settings
    are their defaults, so a test sees what those libraries print unless our code silences
    them."""
    return _library_output_env


# ---- tiny TopKSigLIP models: a 256 px breast image, 8x8 grid, K = 3, ConvNeXt of width 8..64

TINY_TOPK_TEXT = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 77,
}


def _tiny_topk_values(**overrides) -> dict:
    """Settings of a 256 px breast image, 8x8 grid, K = 3, ConvNeXt of width 8..64, tiny CLIP."""
    values = dict(
        vision_pretrained=None,
        vision_depths=[1, 1, 1, 1],
        vision_hidden_sizes=[8, 16, 32, 64],
        image_size=256,
        grid=8,
        low_res_factor=2,
        k=3,
        tau_anneal_steps=10,
        text_pretrained=None,
        text_config=dict(TINY_TOPK_TEXT),
        context_length=96,
        embed_dim=16,
    )
    values.update(overrides)
    return values


def _tiny_topk_model(tmp_path: Path, **overrides) -> TopKSigLIP:
    """A randomly initialised TopKSigLIP of :func:`_tiny_topk_values` (tokenizer in tmp_path)."""
    # imported here: transformers must not load before the offline settings above are made
    from medvl_engine.models.topksiglip import TopKSigLIPConfig, build_topksiglip

    config = TopKSigLIPConfig(**_tiny_topk_values(**overrides))
    return build_topksiglip(config, work_dir=tmp_path / "tokenizer")


def _tiny_minilm_topk_model(tmp_path: Path) -> TopKSigLIP:
    """The tiny TopKSigLIP with the shipped all-MiniLM-L6-v2 as its text tower, frozen, 64
    tokens of context."""
    return _tiny_topk_model(
        tmp_path,
        text_family="bert",
        text_pretrained="all-MiniLM-L6-v2",
        text_config={},
        freeze_text=True,
        context_length=64,
    )


def _make_brightness_scorer(model: TopKSigLIP) -> TopKSigLIP:
    """Hand-set the scorer f_g so that log w grows with the local mean brightness.

    Stem: channel 0 = mean of the 4x4 normalised pixels, channel 1 = constant 1, others 0; the
    stem LayerNorm then turns channel 0 into an increasing function of brightness. Every residual
    block is switched off (layer scale 0) and each downsampling keeps channel 0 as the 2x2 mean
    with channel 1 = 1 again; the 1x1 head reads channel 0.
    """
    import torch

    backbone = model.backbone
    with torch.no_grad():
        stem = backbone.embeddings.patch_embeddings
        stem.weight.zero_()
        stem.bias.zero_()
        stem.weight[0].fill_(1.0 / stem.weight[0].numel())
        stem.bias[1] = 1.0
        for stage in backbone.encoder.stages:
            for layer in stage.layers:
                layer.layer_scale_parameter.zero_()
            down = getattr(stage, "downsampling_layer", None)
            convs = [m for m in (down or []) if isinstance(m, torch.nn.Conv2d)]
            for conv in convs:
                conv.weight.zero_()
                conv.bias.zero_()
                conv.weight[0, 0].fill_(1.0 / conv.weight[0, 0].numel())
                conv.bias[1] = 1.0
        model.scorer_head.weight.zero_()
        model.scorer_head.weight[0, 0] = 1.0
        model.scorer_head.bias.zero_()
    return model


def _tiny_topk_folder(tmp_path: Path) -> Path:
    """A randomly initialised TopKSigLIP (one text layer) saved as a model folder (the real
    loading path)."""
    from medvl_engine.models.topksiglip_folder import save_topksiglip

    model = _tiny_topk_model(tmp_path, text_config={**TINY_TOPK_TEXT, "num_hidden_layers": 1})
    return save_topksiglip(model, tmp_path / "tiny-topk")


@pytest.fixture(scope="session")
def tiny_topk_values():
    """``tiny_topk_values(**overrides)`` -> TopKSigLIPConfig settings of the tiny model."""
    return _tiny_topk_values


@pytest.fixture(scope="session")
def tiny_topk_model():
    """``tiny_topk_model(tmp_path, **overrides)`` -> a randomly initialised tiny TopKSigLIP."""
    return _tiny_topk_model


@pytest.fixture(scope="session")
def tiny_minilm_topk_model():
    """``tiny_minilm_topk_model(tmp_path)`` -> the tiny TopKSigLIP with a frozen MiniLM text
    tower."""
    return _tiny_minilm_topk_model


@pytest.fixture(scope="session")
def make_brightness_scorer():
    """``make_brightness_scorer(model)`` hand-sets the scorer to follow local brightness."""
    return _make_brightness_scorer


@pytest.fixture(scope="session")
def tiny_topk_folder():
    """``tiny_topk_folder(tmp_path)`` saves a tiny TopKSigLIP folder there and returns it."""
    return _tiny_topk_folder


@pytest.fixture(scope="session")
def tiny_topk(tmp_path_factory) -> Path:
    """Folder of a tiny randomly initialised TopKSigLIP, shared by the session (read only)."""
    return _tiny_topk_folder(tmp_path_factory.mktemp("topk"))
