"""Model-card sections made from ``medvl-train topksiglip eval``'s JSON: the fresh-cohort headline
(pooled figure with interval, seed spread, every baseline, the paired margin over the best one)
and how often the test split was read.

:func:`headline_section` renders the section; :func:`with_headline` puts it after a card's
first paragraph (the demo notice), so a card generator only adds one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from medvl_engine.tasks.topksiglip.margins import HEADLINE_METRICS, difference_text, interval_text

__all__ = ["headline_section", "split_baselines_section", "with_headline"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table: the header, its rule, one line per row."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _verdict(margin: Mapping[str, Any]) -> str:
    """Whether the interval of ``model - baseline`` lies above, below or around 0."""
    low, high = margin.get("low"), margin.get("high")
    if low is None or high is None:
        return "no interval"
    if low > 0:
        return "the model is better"
    if high < 0:
        return "the baseline is better"
    return "no difference the bootstrap can tell apart"


def headline_section(evaluation: Mapping[str, Any], command: str) -> str:
    """Markdown of the fresh-cohort headline of an evaluation JSON (``fresh_cohorts`` present),
    naming ``command`` as the one that printed it."""
    fresh = evaluation["fresh_cohorts"]
    pooled = fresh["pooled"]
    seeds = fresh["seeds"]
    (entry,) = pooled["models"][:1]
    label = entry["model"]
    readers = list(pooled["readers"])
    spread = fresh["seed_spread"].get(label, {})
    per_cohort = fresh["per_cohort"].get(label, {})
    unit, count = pooled["unit"], pooled["units"]
    header = ["metric", "model (pooled)", "seed spread: min / max / std", *readers]
    rows = []
    for key in HEADLINE_METRICS:
        if key not in entry["metrics"]:
            continue
        s = spread.get(key)
        shown = f"{s['min']:.3f} / {s['max']:.3f} / {s['std']:.3f}" if s else "-"
        cells = [interval_text(pooled["readers"][r]["metrics"].get(key)) for r in readers]
        rows.append([key, interval_text(entry["metrics"][key]), shown, *cells])
    margins = []
    for key, margin in entry["margins"].items():
        by_cohort = fresh.get("margin_by_cohort", {}).get(label, {}).get(key, [])
        low_high = (
            f"; per cohort {min(by_cohort):+.3f} to {max(by_cohort):+.3f}" if by_cohort else ""
        )
        margins.append(
            f"- {key}: model - {margin['best_baseline']} = {difference_text(margin)} (paired "
            f"bootstrap over {count} {unit}s{low_high}): {_verdict(margin)}"
        )
    reads = evaluation.get("test_split_reads")
    lines = [
        "## Headline: fresh synthetic cohorts",
        "",
        f"Printed by `{command}`: {len(seeds)} new cohorts of {fresh['cohort_size']} breasts "
        f"(cohort seeds {seeds[0]}-{seeds[-1]}, from the fresh range that no training, "
        "validation, test split or choice has used; `medvl_engine.evaluation.fresh_seeds` "
        f"refuses the used ones), pooled: value [{pooled['level']:.0%} bootstrap interval over "
        f"{count} {unit}s, {pooled['bootstrap_resamples']} resamples]; the seed spread is over "
        "the per-cohort values. AUROC chance = 0.5.",
        "",
        *_table(header, rows),
        "",
        "Baselines (no model; the untrained readers choose their statistic and sign per "
        "readout on the breasts they are scored on, which flatters them):",
        "",
        *(f"- {name}: {reader['reads']}" for name, reader in pooled["readers"].items()),
        "",
        "The model's margin over the best baseline of each metric:",
        "",
        *margins,
        "",
        "Per-cohort values of the model: "
        + "; ".join(
            f"{key} " + " ".join(f"{v:.3f}" for v in values)
            for key, values in per_cohort.items()
            if values and all(v is not None for v in values)
        )
        + ".",
        "",
    ]
    if reads is not None:
        lines += [
            f"The test split below had been read {reads} time(s) from the evaluation's run "
            "folder when this card was written (`test_reads.json`; reads before that count "
            "existed, while the recipe was tuned, are not in it), so its figures are partly "
            "chosen on it; the fresh cohorts above are the figure to quote.",
            "",
        ]
    return "\n".join(lines)


def split_baselines_section(evaluation: Mapping[str, Any]) -> str:
    """Markdown of the baseline block of the test split (``baselines`` of the JSON): the model
    and every baseline on the headline metrics, and the paired margins."""
    block = evaluation["baselines"]
    entry = block["models"][0]
    readers = list(block["readers"])
    unit, count = block["unit"], block["units"]
    header = ["metric", "model", *readers]
    rows = [
        [key, interval_text(entry["metrics"].get(key))]
        + [interval_text(block["readers"][r]["metrics"].get(key)) for r in readers]
        for key in HEADLINE_METRICS
        if key in entry["metrics"]
    ]
    margins = [
        f"- {key}: model - {m['best_baseline']} = {difference_text(m)} (paired bootstrap over "
        f"{count} {unit}s): {_verdict(m)}"
        for key, m in entry["margins"].items()
    ]
    lines = [
        "### Test split: every baseline and the margin",
        "",
        f"Same command, same {count} test {unit}s; value [{block['level']:.0%} bootstrap "
        "interval].",
        "",
        *_table(header, rows),
        "",
        *margins,
        "",
    ]
    return "\n".join(lines)


def with_headline(card: str, evaluation: Mapping[str, Any], command: str) -> str:
    """``card`` with :func:`headline_section` after its second paragraph (title and demo
    notice), or unchanged when the evaluation has no fresh cohorts."""
    if not evaluation.get("fresh_cohorts"):
        return card
    parts = card.split("\n\n")
    head, rest = parts[:2], parts[2:]
    return "\n\n".join([*head, headline_section(evaluation, command).rstrip("\n"), *rest])
