"""The shipped "medvl-demo" model: loads with no fitting, its card's numbers come back, and its
data and fit do not depend on the number of torch threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medvl_engine.errors import ModelNotFoundError

SHIPPED = Path(__file__).resolve().parents[3] / "src/medvl_engine/demo_models/medvl-demo"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_shipped_folder_is_small_and_says_it_is_synthetic():
    config = json.loads((SHIPPED / "config.json").read_text())
    assert config["synthetic_demo"] is True
    assert config["text_model"] == "all-MiniLM-L6-v2"
    size = sum(f.stat().st_size for f in SHIPPED.iterdir())
    assert size < 2_000_000  # MiniLM is referenced, not copied
    card = (SHIPPED / "MODEL_CARD.md").read_text()
    assert "synthetic data, not for diagnosis" in card
    assert "make demo-models" in card and "Seed: 0" in card


def test_load_encoder_uses_the_shipped_folder_without_fitting(tmp_path, monkeypatch):
    from medvl_engine.demo_models import demo_notice_for
    from medvl_engine.encoders import load_encoder

    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    encoder = load_encoder("medvl-demo")
    assert not (tmp_path / "cache").exists()  # nothing fitted or written into the cache
    assert encoder.embed_dim == 256 and encoder.patch_size == 224
    assert (
        demo_notice_for("medvl-demo") == "demo model trained on synthetic data, not for diagnosis"
    )
    assert demo_notice_for(SHIPPED) is not None


def test_shipped_test_metrics_equal_the_model_card():
    from medvl_engine.encoders.demo import load_shipped_demo
    from medvl_engine.tasks.limit.demo_recipe import evaluate_demo_encoder

    config = json.loads((SHIPPED / "config.json").read_text())
    card = (SHIPPED / "MODEL_CARD.md").read_text()
    metrics = evaluate_demo_encoder(load_shipped_demo())
    stated = config["test_metrics"]
    assert metrics["patches"] == stated["patches"] == 180
    for key in ("balanced_accuracy", "auroc"):
        for part in ("value", "low", "high", "std"):
            assert metrics[key][part] == pytest.approx(stated[key][part], abs=1e-6), (key, part)
        assert f"{stated[key]['value']:.3f} (95% bootstrap interval" in card
    assert metrics["balanced_accuracy"]["value"] >= 0.9


def test_missing_shipped_folder_names_make_demo_models(tmp_path, monkeypatch):
    from medvl_engine.encoders import demo as _demo
    from medvl_engine.encoders import load_encoder

    monkeypatch.setattr(_demo, "demo_model_dir", lambda: tmp_path / "medvl-demo")
    with pytest.raises(ModelNotFoundError, match="make demo-models"):
        load_encoder("medvl-demo")
    (tmp_path / "medvl-demo").mkdir()
    (tmp_path / "medvl-demo" / "config.json").write_text((SHIPPED / "config.json").read_text())
    (tmp_path / "medvl-demo" / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ModelNotFoundError, match="damaged.*make demo-models"):
        load_encoder("medvl-demo")


_HASH_DATA = r"""
import hashlib, sys, tempfile
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(int(sys.argv[1]))
from medvl_engine import synthetic
from medvl_engine.tasks.limit.synthetic_bags import make_synthetic_bags
import zarr
digest = {}
out = Path(tempfile.mkdtemp())
slide = synthetic.make_synthetic_slide(out / "s.tiff", seed=3, size=(512, 384))
digest["slide"] = hashlib.sha256(slide.path.read_bytes()).hexdigest()
digest["report"] = hashlib.sha256(slide.report.encode()).hexdigest()
rng = np.random.default_rng(5)
reports = [synthetic.make_report(["tumor", "stroma"], rng, organ) for organ in synthetic.ORGANS]
digest["reports"] = hashlib.sha256("\n".join(reports).encode()).hexdigest()
manifest = make_synthetic_bags(out / "bags", n_slides=8, pool_per_class=6, seed=2)
h = hashlib.sha256(manifest.read_bytes())
for store in sorted((out / "bags").glob("*.zarr")):
    h.update(np.asarray(zarr.open_group(str(store), mode="r")["features"][...]).tobytes())
digest["bags"] = h.hexdigest()
print(sorted(digest.items()))
"""

_HASH_FIT = r"""
import hashlib, sys
import torch
torch.set_num_threads(int(sys.argv[1]))
from medvl_engine.tasks.limit.demo_recipe import fit_demo_model
state, _ = fit_demo_model(0)
print(sorted((k, hashlib.sha256(v.numpy().tobytes()).hexdigest()) for k, v in state.items()))
"""


def _run(script: str, threads: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, str(threads)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # two child processes build the cohort twice (about 20 s)
def test_synthetic_slides_reports_and_bags_are_bitwise_equal_with_1_and_2_threads():
    assert _run(_HASH_DATA, 1) == _run(_HASH_DATA, 2)


@pytest.mark.slow
def test_demo_fit_is_bitwise_equal_with_1_and_2_threads_and_equals_the_shipped_weights():
    from safetensors.torch import load_file

    one = _run(_HASH_FIT, 1)
    assert one == _run(_HASH_FIT, 2)
    import hashlib

    shipped = load_file(str(SHIPPED / "model.safetensors"))
    expected = sorted(
        (k, hashlib.sha256(v.numpy().tobytes()).hexdigest()) for k, v in shipped.items()
    )
    # The shipped weights were built on a machine like this one; another CPU's BLAS may move
    # the ridge map's last bits, so a mismatch is reported, and the card's metrics must still
    # come back within tolerance (next test).
    if one != str(expected):
        pytest.xfail("this CPU's BLAS gives other last bits than the shipped build's")


@pytest.mark.slow
def test_rebuilt_demo_model_reproduces_the_card_within_tolerance(tmp_path):
    from medvl_engine.tasks.limit.demo_recipe import build_demo_model

    folder = build_demo_model(tmp_path / "medvl-demo", seed=0)
    rebuilt = json.loads((folder / "config.json").read_text())["test_metrics"]
    stated = json.loads((SHIPPED / "config.json").read_text())["test_metrics"]
    for key in ("balanced_accuracy", "auroc"):
        assert rebuilt[key]["value"] == pytest.approx(stated[key]["value"], abs=0.01), key
