"""The demo models shipped inside the package, and the notice every output of theirs carries.

Each shipped model is a sub-folder of this package (``medvl-demo/`` for pathology,
``topksiglip-demo/`` for mammography) holding ``config.json`` (with ``"synthetic_demo": true``),
``model.safetensors``, ``MODEL_CARD.md`` and its tokenizer files or a tokenizer reference.
``python -m medvl_engine.tasks.demo_models {medvl-demo|topksiglip-demo|all}``
(``make demo-models``)
rebuilds them. Nothing here reads the disk at import time.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

__all__ = [
    "DEMO_MODEL_NAMES",
    "DEMO_NOTICE",
    "SHIPPED_ROOT",
    "demo_notice_for",
    "is_synthetic_demo_folder",
    "shipped_model_dir",
]

SHIPPED_ROOT: Path = Path(__file__).resolve().parent
"""The folder that holds one sub-folder per shipped demo model."""

DEMO_NOTICE = "demo model trained on synthetic data, not for diagnosis"
"""The sentence every output of a demo model carries (status line, PNG footer, file metadata)."""

DEMO_MODEL_NAMES: tuple[str, ...] = ("medvl-demo", "topksiglip-demo")
"""Registry names of the shipped demo models, each the name of its sub-folder."""

_CONFIG_NAME = "config.json"
_MAX_CONFIG_BYTES = 1 << 20
_flag_cache: dict[tuple[str, int, int], bool] = {}
_flag_cache_lock = threading.Lock()


def shipped_model_dir(name: str) -> Path | None:
    """The shipped folder of demo model ``name`` if it holds a config.json, else None."""
    if name not in DEMO_MODEL_NAMES:
        return None
    folder = SHIPPED_ROOT / name
    return folder if (folder / _CONFIG_NAME).is_file() else None


def is_synthetic_demo_folder(folder: str | Path) -> bool:
    """True when ``folder/config.json`` is a JSON object with ``"synthetic_demo": true``.

    Reads one small file; the answer is cached by (path, mtime, size), so calling this for
    every status-line update costs one ``stat``. A missing, oversized or unreadable config
    answers False.
    """
    config_path = Path(folder) / _CONFIG_NAME
    try:
        stat = config_path.stat()
    except (OSError, ValueError):
        return False
    key = (str(config_path), stat.st_mtime_ns, stat.st_size)
    with _flag_cache_lock:
        cached = _flag_cache.get(key)
    if cached is not None:
        return cached
    flag = False
    if stat.st_size <= _MAX_CONFIG_BYTES:
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = None
        flag = isinstance(config, dict) and config.get("synthetic_demo") is True
    with _flag_cache_lock:
        if len(_flag_cache) > 256:
            _flag_cache.clear()
        _flag_cache[key] = flag
    return flag


def demo_notice_for(model: str | Path | None) -> str | None:
    """:data:`DEMO_NOTICE` when ``model`` is a demo model, else None.

    ``model`` is a registry name (``"medvl-demo"``, ``"topksiglip-demo"``) or a model folder;
    a folder is a demo model when its config.json says ``"synthetic_demo": true``.
    """
    if model is None:
        return None
    text = str(model).strip()
    if not text:
        return None
    if text in DEMO_MODEL_NAMES:
        return DEMO_NOTICE
    try:
        folder = Path(text).expanduser()
    except (OSError, ValueError, RuntimeError):
        return None
    return DEMO_NOTICE if is_synthetic_demo_folder(folder) else None
