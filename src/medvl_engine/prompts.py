"""Prompts: the heatmap modes, the prompts each takes, the map's label, and class presets per organ.

One definition for the ``medvl heatmap`` command and the viewer's heatmap dock. With v_i the
normalised patch features and t_k the normalised prompt embeddings
(:mod:`medvl_engine.heatmap` computes the scores, T the softmax temperature):
    cosine    one prompt t              s_i = v_i . t                        "tumor"
    softmax   K >= 2 classes t_0..t_K-1  s_i = softmax_k(v_i . t_k / T)[0]   "tumor vs stroma, fat"
    contrast  two prompts, A then B     s_i = v_i . t_A - v_i . t_B          "tumor - stroma"
A softmax map is the probability of the first class among the candidates given (LIMIT Eq. 5
chooses among a candidate set), so its label names every class it was weighed against.
The ways a map's scores may be normalised for display (``NORMALIZATIONS``) are named here too.
Nothing here imports torch: the CLI builds its parser from ``MODES`` and the viewer's dock its
choices without loading a model.

The class presets for zero-shot slide classification (LIMIT Eq. 5) follow the paper's zero-shot
tasks: the SPIDER-C unified classes per organ (Tumor, Stroma, Inflammation, Necrosis, Epithelium,
Vascular, Fat; plus Nerve and Skin adnexa for skin, Mucin for colorectal) and the CAMELYON16
lymph-node categories of its Fig. 2, each with the tissue type prepended (the CPath convention).
Each preset class also has synonyms (:func:`preset_classes`).

Prompt ensembles (the CONCH recipe, Lu et al. 2024): a class is a set of names (synonyms)
s_1..s_S crossed with templates u_1..u_U ("an H&E image of {}."); with E the text tower and
n(x) = x / ||x||, the class embedding is

    c = n( (1 / (S U)) sum_{s, u} n(E(u.format(s))) )                  c [D]

:data:`CONCH_TEMPLATES` is CONCH's published H&E list; ``"none"`` uses the names as they are
(c = n(mean_s n(E(s)))), which for one name per class is the plain prompt embedding.
:func:`ensemble_embeddings` is the one implementation every caller uses (heatmap, classify,
segment, the LIMIT robustness report); :func:`expand_classes` gives the texts it encodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = [
    "CLASS_PRESETS",
    "CONCH_TEMPLATES",
    "DEFAULT_TEMPLATES",
    "MODES",
    "NORMALIZATIONS",
    "TEMPLATE_SETS",
    "check_classes",
    "check_prompts",
    "check_templates",
    "ensemble_embeddings",
    "expand_classes",
    "parse_class",
    "preset_classes",
    "preset_prompts",
    "prompt_label",
    "read_templates",
    "resolve_templates",
]

MODES = ("cosine", "softmax", "contrast")
NORMALIZATIONS = ("none", "percentile", "minmax", "fixed")  # see heatmap.normalize_scores


def check_prompts(prompts: Sequence[str], mode: str) -> None:
    """Refuse prompts that ``mode`` cannot score, with one sentence (:class:`ConfigError`).

    See the module docstring for the count each mode takes; no prompt may be blank.
    """
    if mode not in MODES:
        raise ConfigError(f"Heatmap mode {mode!r} is not one of {', '.join(MODES)}.")
    count = len(prompts)
    blank = [number for number, prompt in enumerate(prompts, 1) if not prompt.strip()]
    if len(blank) == count:
        raise ConfigError("The prompt is empty: type what to look for, e.g. 'tumor'.")
    if blank:
        raise ConfigError(f"Prompt {blank[0]} of {count} is empty: give every prompt some text.")
    if mode == "cosine" and count != 1:
        raise ConfigError(
            f"Cosine mode scores one prompt, got {count}: use softmax to compare classes "
            "or contrast for A minus B."
        )
    if mode == "softmax" and count < 2:
        raise ConfigError(
            "Softmax mode needs two or more prompts (the classes; the first one is mapped), got 1."
        )
    if mode == "contrast" and count != 2:
        raise ConfigError(f"Contrast mode needs exactly two prompts (A minus B), got {count}.")


def prompt_label(prompts: Sequence[str], mode: str) -> str:
    """The name of the map ``prompts`` give in ``mode``, for layer names, colour-bar titles
    and exports: "tumor", "tumor vs stroma, fat" or "tumor - stroma".

    Raises :class:`ConfigError` for prompts :func:`check_prompts` refuses.
    """
    check_prompts(prompts, mode)
    if mode == "softmax":
        return f"{prompts[0]} vs " + ", ".join(prompts[1:])
    if mode == "contrast":
        return f"{prompts[0]} - {prompts[1]}"
    return prompts[0]


_SPIDER_C = ("tumor", "stroma", "inflammation", "necrosis", "epithelium", "vascular", "fat")

CLASS_PRESETS: dict[str, tuple[str, ...]] = {
    "breast (SPIDER-C)": tuple(f"breast {name}" for name in _SPIDER_C),
    "colorectal (SPIDER-C)": tuple(f"colorectal {name}" for name in (*_SPIDER_C, "mucin")),
    "skin (SPIDER-C)": tuple(f"skin {name}" for name in (*_SPIDER_C, "nerve", "adnexa")),
    "thorax (SPIDER-C)": tuple(f"thorax {name}" for name in _SPIDER_C),
    "lymph node (CAMELYON16)": (
        "lymph node metastasis",
        "lymph node adipose tissue",
        "lymph node lymphocytes",
    ),
    "synthetic demo slide": ("tumor", "stroma", "adipose"),
}
"""Preset name -> class prompts (one prompt per class)."""


def preset_prompts(name: str) -> tuple[str, ...]:
    """The class prompts of preset ``name``; a ConfigError naming the presets otherwise."""
    if name not in CLASS_PRESETS:
        raise ConfigError(
            f"{name!r} is not a class preset; use one of: {', '.join(CLASS_PRESETS)}."
        )
    return CLASS_PRESETS[name]


_SYNONYMS: dict[str, tuple[str, ...]] = {
    "tumor": ("tumor", "carcinoma", "malignant epithelium", "tumour"),
    "stroma": ("stroma", "fibrous stroma", "connective tissue"),
    "inflammation": ("inflammation", "inflammatory cells", "lymphocytes"),
    "necrosis": ("necrosis", "necrotic debris"),
    "epithelium": ("epithelium", "benign epithelium", "normal epithelium"),
    "vascular": ("vascular", "blood vessels", "vasculature"),
    "fat": ("fat", "adipose tissue", "adipocytes"),
    "mucin": ("mucin", "mucus", "mucin pool"),
    "nerve": ("nerve", "peripheral nerve", "nerve fibers"),
    "adnexa": ("adnexa", "adnexal structures", "hair follicles and sweat glands"),
    "metastasis": ("metastasis", "metastatic carcinoma", "tumor"),
    "adipose tissue": ("adipose tissue", "fat", "adipocytes"),
    "lymphocytes": ("lymphocytes", "lymphoid tissue", "lymphoid cells"),
    "adipose": ("adipose", "adipose tissue", "fat", "adipocytes"),
}
_PRESET_TISSUE = {
    "breast (SPIDER-C)": "breast",
    "colorectal (SPIDER-C)": "colorectal",
    "skin (SPIDER-C)": "skin",
    "thorax (SPIDER-C)": "thorax",
    "lymph node (CAMELYON16)": "lymph node",
    "synthetic demo slide": "",
}


def preset_classes(name: str) -> dict[str, tuple[str, ...]]:
    """Class name -> its names (synonyms, the class name first) for preset ``name``.

    The class names are :data:`CLASS_PRESETS`'s; each synonym carries the preset's tissue
    ("breast carcinoma" for "breast tumor"). A ConfigError names the presets otherwise.
    """
    tissue = _PRESET_TISSUE.get(name, "")
    classes: dict[str, tuple[str, ...]] = {}
    for class_name in preset_prompts(name):
        base = class_name[len(tissue) :].strip() if tissue else class_name
        names = [f"{tissue} {word}".strip() for word in _SYNONYMS.get(base, (base,))]
        classes[class_name] = tuple(dict.fromkeys([class_name, *names]))
    return classes


CONCH_TEMPLATES: tuple[str, ...] = (
    "{}.",
    "a photomicrograph showing {}.",
    "a photomicrograph of {}.",
    "an image of {}.",
    "an image showing {}.",
    "an example of {}.",
    "{} is shown.",
    "this is {}.",
    "there is {}.",
    "a histopathological image showing {}.",
    "a histopathological image of {}.",
    "a histopathological photograph of {}.",
    "a histopathological photograph showing {}.",
    "shows {}.",
    "presence of {}.",
    "{} is present.",
    "an H&E stained image of {}.",
    "an H&E stained image showing {}.",
    "an H&E image showing {}.",
    "an H&E image of {}.",
    "{}, H&E stain.",
    "{}, H&E.",
)
"""CONCH's zero-shot templates for H&E (its published prompt files), {} = the class name."""

TEMPLATE_SETS: dict[str, tuple[str, ...] | None] = {"conch": CONCH_TEMPLATES, "none": None}
"""Named template sets; "none" uses every name as it is (no template)."""
DEFAULT_TEMPLATES = "conch"
"""The ensemble classify and segment use unless told otherwise (heatmaps default to "none")."""
MAX_TEMPLATES = 256
MAX_TEMPLATES_FILE_BYTES = 1 << 20


def check_templates(templates: Sequence[str], source: str = "") -> tuple[str, ...]:
    """``templates`` as a tuple once each holds exactly one ``{}`` and no other brace; one
    ConfigError sentence otherwise (``source`` names the file they came from)."""
    where = f" in {source}" if source else ""
    if isinstance(templates, str):
        templates = [templates]
    templates = tuple(str(t) for t in templates)
    if not templates:
        raise ConfigError(f"No templates{where}: give at least one, e.g. 'an H&E image of {{}}.'.")
    if len(templates) > MAX_TEMPLATES:
        raise ConfigError(f"{len(templates)} templates{where}, more than {MAX_TEMPLATES}.")
    for number, template in enumerate(templates, 1):
        if template.count("{}") != 1 or template.replace("{}", "").count("{") + template.replace(
            "{}", ""
        ).count("}"):
            raise ConfigError(
                f"Template {number}{where} ({template!r}) must hold exactly one {{}} where the "
                "class name goes, and no other brace."
            )
    return templates


def read_templates(path: str | Path) -> tuple[str, ...]:
    """Templates from a file: one per line (blank lines and ``#`` comments skipped), or a YAML
    list (``.yaml``/``.yml``, optionally under a ``templates`` key). The file must be a regular
    file of at most 1 MiB in UTF-8; every template is checked (:func:`check_templates`)."""
    from medvl_engine.guarded_files import require_data_file

    path = Path(path)
    resolved = require_data_file(path, "templates file")
    try:
        size = resolved.stat().st_size
        if size > MAX_TEMPLATES_FILE_BYTES:
            raise ConfigError(
                f"{path.name} is {size:,} bytes; a templates file holds at most 1 MiB."
            )
        text = resolved.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path.name} is not UTF-8 text; save the templates as UTF-8.") from None
    except OSError as error:
        raise ConfigError(f"{path.name} could not be read ({error.strerror}).") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"{path.name} is not valid YAML; give a list of templates.") from None
        if isinstance(values, dict):
            values = values.get("templates")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ConfigError(
                f"{path.name} must hold a YAML list of template strings (or one under "
                "'templates:')."
            )
        lines = values
    else:
        lines = [line.strip() for line in text.splitlines()]
        lines = [line for line in lines if line and not line.startswith("#")]
    return check_templates(lines, path.name)


def resolve_templates(
    templates: str | Path | Sequence[str] | None,
) -> tuple[str, ...] | None:
    """A template set by name ("conch", "none"), a file (:func:`read_templates`) or a list
    (checked); None and "none" mean no templates (returns None)."""
    if templates is None:
        return None
    if isinstance(templates, str) and templates.strip().lower() in TEMPLATE_SETS:
        return TEMPLATE_SETS[templates.strip().lower()]
    if isinstance(templates, str | Path):
        path = Path(templates)
        if not path.exists():
            raise ConfigError(
                f"Templates {str(templates)!r} are neither a set ({', '.join(TEMPLATE_SETS)}) "
                "nor an existing file."
            )
        return read_templates(path)
    return check_templates(templates)


def parse_class(spec: str) -> tuple[str, tuple[str, ...]]:
    """``"tumor=tumour,carcinoma"`` -> ("tumor", ("tumor", "tumour", "carcinoma")): a class
    name and its synonyms (the name first); ``"tumor"`` alone is its own only name."""
    name, _, rest = spec.partition("=")
    name = name.strip()
    if not name:
        raise ConfigError(f"Class {spec!r} has an empty name: write NAME or NAME=SYNONYM,...")
    synonyms = [word.strip() for word in rest.split(",")] if rest else []
    if any(not word for word in synonyms):
        raise ConfigError(f"Class {name!r} has an empty synonym: separate synonyms by commas.")
    return name, tuple(dict.fromkeys([name, *synonyms]))


def check_classes(
    classes: Sequence[str] | Mapping[str, str | Sequence[str]], minimum: int = 2
) -> dict[str, tuple[str, ...]]:
    """Class name -> names, from a list of names (each its own only name) or a mapping; at
    least ``minimum`` distinct, non-empty classes, each with a non-empty name (ConfigError)."""
    if isinstance(classes, Mapping):
        pairs = [(str(k), (v,) if isinstance(v, str) else tuple(v)) for k, v in classes.items()]
    else:
        pairs = [(str(name), (str(name),)) for name in classes]
    for number, (name, names) in enumerate(pairs, 1):
        if not name.strip():
            raise ConfigError(
                f"Class {number} of {len(pairs)} has an empty name; name every class."
            )
        if not names or any(not str(n).strip() for n in names):
            raise ConfigError(f"Class {name!r} has an empty synonym; give every name some text.")
    if len({name for name, _ in pairs}) != len(pairs):
        raise ConfigError("Two classes have the same name; give each class once.")
    if len(pairs) < minimum:
        raise ConfigError(
            f"Choosing among classes needs at least {minimum}, got {len(pairs)}: add the "
            "tissue it should be told apart from."
        )
    return {name: tuple(str(n) for n in names) for name, names in pairs}


def expand_classes(
    classes: Mapping[str, Sequence[str]], templates: Sequence[str] | None
) -> dict[str, list[str]]:
    """Class name -> the texts its embedding averages: every name in every template (names x
    templates, names outer), or the names themselves when ``templates`` is None."""
    if templates is None:
        return {name: list(names) for name, names in classes.items()}
    return {
        name: [t.format(n) for n in names for t in templates] for name, names in classes.items()
    }


def ensemble_embeddings(
    encode_text: Callable[[list[str]], torch.Tensor],
    classes: Mapping[str, Sequence[str]],
    templates: Sequence[str] | None,
    batch_size: int = 256,
) -> torch.Tensor:
    """Class embeddings c_k float32 [K, D] by the CONCH recipe (module docstring): the
    renormalised mean of the L2-normalised embeddings of :func:`expand_classes`'s texts.

    ``encode_text``: T texts -> [T, D] (normalised here again, so either form works); every
    distinct text is encoded once, in batches of ``batch_size``.
    """
    import torch

    texts = expand_classes(classes, templates)
    unique = list(dict.fromkeys(text for group in texts.values() for text in group))
    rows: dict[str, torch.Tensor] = {}
    for start in range(0, len(unique), batch_size):
        chunk = unique[start : start + batch_size]
        embedded = torch.nn.functional.normalize(encode_text(chunk).float().cpu(), dim=-1)
        rows.update(zip(chunk, embedded, strict=True))
    return torch.stack(
        [
            torch.nn.functional.normalize(torch.stack([rows[t] for t in group]).mean(0), dim=0)
            for group in texts.values()
        ]
    )
