"""Shared fixtures of the feature tests: a small synthetic slide (open) and a tiny CLIP encoder."""

from __future__ import annotations

import pytest

from medvl_engine.encoders import load_encoder


@pytest.fixture(scope="module")
def slide(tmp_path_factory):
    """A 512 x 384 px synthetic slide at 0.25 um/px, open for the module's tests."""
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    folder = tmp_path_factory.mktemp("slide")
    truth = make_synthetic_slide(folder / "s.tiff", seed=5, size=(512, 384), mpp=0.25)
    with open_slide(truth.path) as opened:
        yield opened


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, make_tiny_clip):
    """A tiny random CLIP loaded through the real folder path."""
    return load_encoder(make_tiny_clip(tmp_path_factory.mktemp("m") / "clip"))
