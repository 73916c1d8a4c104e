"""Shared steps of the pathology commands: encoder + feature store for one slide."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["encoder_and_store"]


def encoder_and_store(
    slide_path: Path, model: str, features: Path | None, device: str = "cpu"
) -> tuple[Any, Any, Any]:
    """(slide, encoder, store): the store from ``features`` if given, else extracted or cached.

    The returned slide is open; the caller closes it.
    """
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import DataError
    from medvl_engine.features import FeatureStore, slide_features
    from medvl_engine.io.slide import open_slide

    slide = open_slide(slide_path)
    try:
        encoder = load_encoder(model, device=device)
        if features is not None:
            store = FeatureStore.open(features)
            if store.embed_dim != encoder.embed_dim:
                raise DataError(
                    f"Feature store {features} holds {store.embed_dim}-dimensional features "
                    f"({store.encoder or 'unknown encoder'}) but {encoder.name} embeds prompts "
                    f"in {encoder.embed_dim}; pass the model the features were extracted with.",
                    features,
                )
            if store.encoder and store.encoder != encoder.name:
                print(
                    f"medvl: note: {features.name} was extracted with {store.encoder}; prompts "
                    f"are encoded with {encoder.name}, which must share its embedding space.",
                    file=sys.stderr,
                )
            if store.mpp is None and slide.mpp is not None:
                store.mpp = tuple(slide.mpp)
        else:

            def progress(done: int, total: int) -> None:
                print(f"\rfeatures: {done}/{total} patches", end="", file=sys.stderr, flush=True)

            store = slide_features(slide, encoder, progress=progress)
            print(file=sys.stderr)
        if store.n_patches == 0:
            raise DataError(
                f"{Path(slide_path).name}: no patch holds enough tissue to score; check the "
                "slide is not blank, or run `medvl features --min-tissue` with a lower value "
                "and pass the store with --features.",
                slide_path,
            )
    except BaseException:
        slide.close()
        raise
    return slide, encoder, store
