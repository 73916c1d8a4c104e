"""Rebuild the shipped demo models: ``python -m medvl_engine.tasks.demo_models NAME``.

NAME is ``medvl-demo`` (pathology), ``topksiglip-demo`` (mammography) or ``all``. Each model is
rebuilt by its own recipe and written atomically (with its MODEL_CARD.md) into
:data:`medvl_engine.demo_models.SHIPPED_ROOT`. ``make demo-models`` runs ``all``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from medvl_engine.common.console import command_session
from medvl_engine.demo_models import DEMO_MODEL_NAMES
from medvl_engine.errors import MedVLError, MissingDependencyError

Rebuild = Callable[[Callable[[str], None] | None], Path]

# Model name -> module holding its ``rebuild_shipped(progress) -> Path``; imported only when used.
_REBUILDERS: dict[str, str] = {
    "medvl-demo": "medvl_engine.tasks.limit.demo_recipe",
    "topksiglip-demo": "medvl_engine.tasks.topksiglip.demo_recipe",
}


def rebuild_function(name: str) -> Rebuild:
    """The ``rebuild_shipped`` function that builds demo model ``name``.

    Raises MissingDependencyError (one sentence) when its module or function is missing.
    """
    module_name = _REBUILDERS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise MissingDependencyError(
            f"cannot rebuild {name}: its recipe module {module_name} does not import ({error})"
        ) from error
    rebuild = getattr(module, "rebuild_shipped", None)
    if not callable(rebuild):
        raise MissingDependencyError(
            f"cannot rebuild {name}: {module_name} has no rebuild_shipped function"
        )
    recipe: Callable[[Callable[[str], None] | None], Path] = rebuild
    return recipe


def _progress(name: str) -> Callable[[str], None]:
    def report(message: str) -> None:
        print(f"[{name}] {message}", flush=True)

    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m medvl_engine.tasks.demo_models",
        description="Rebuild the demo models shipped with medvl (synthetic data, not for "
        "diagnosis) from their recipes.",
    )
    parser.add_argument("name", choices=(*DEMO_MODEL_NAMES, "all"), help="model to rebuild")
    parser.add_argument(
        "--verbose", action="store_true", help="let third-party load reports and warnings through"
    )
    args = parser.parse_args(argv)
    names = list(DEMO_MODEL_NAMES) if args.name == "all" else [args.name]
    try:
        with command_session(verbose=args.verbose):
            rebuilds = [(name, rebuild_function(name)) for name in names]
            for name, rebuild in rebuilds:
                started = time.perf_counter()
                folder = rebuild(_progress(name))
                seconds = time.perf_counter() - started
                print(f"{name}: wrote {folder} in {seconds:.0f} s", flush=True)
    except MedVLError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("error: interrupted; the shipped folders were left as they were", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
