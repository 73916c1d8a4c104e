"""The synthetic LIMIT cohort: identifiable diagnoses, reports that state them, three disjoint
stratified splits, and test patches never seen in training."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import zarr

from medvl_engine.data import read_manifest
from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic.reports import DIAGNOSES, make_diagnosis_report
from medvl_engine.tasks.limit.synthetic_bags import (
    BACKGROUND_CLASSES,
    DIAGNOSTIC_CLASSES,
    make_synthetic_bags,
)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cohort")
    manifest = make_synthetic_bags(folder, n_slides=60, pool_per_class=8, seed=4)
    return folder, read_manifest(manifest)


def test_splits_are_disjoint_and_stratified_by_organ_and_diagnosis(cohort):
    _, records = cohort
    by_split = {name: [r for r in records if r.split == name] for name in ("train", "val", "test")}
    ids = [set(r.slide_id for r in rows) for rows in by_split.values()]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert sum(len(i) for i in ids) == 60
    groups = Counter((r.organ, r.label) for r in records)
    assert len(groups) == 12 and set(groups.values()) == {5}
    for split in ("train", "test"):  # every (organ, diagnosis) in train and in test
        assert Counter((r.organ, r.label) for r in by_split[split]).keys() == groups.keys()
    assert len(by_split["test"]) == 24 and len(by_split["val"]) == 12  # round(0.3*5), round(0.2*5)


def test_each_slide_shows_its_diagnosis_and_only_background_besides(cohort):
    _, records = cohort
    for record in records:
        shown_by = DIAGNOSES[record.organ][record.label]
        labels = np.asarray(zarr.open_group(str(record.features), mode="r")["patch_labels"])
        names = {DIAGNOSTIC_CLASSES[i] for i in labels}
        assert shown_by in names and names - {shown_by} <= set(BACKGROUND_CLASSES)
        assert names - {shown_by}  # some background
        share = float(np.mean(labels == DIAGNOSTIC_CLASSES.index(shown_by)))
        assert 0.25 <= share <= 0.65
        assert record.label in record.report.lower()  # the diagnosis line names the label


def test_test_patches_come_from_their_own_pool(cohort):
    _, records = cohort

    def rows(split):
        stores = [r.features for r in records if r.split == split]
        return {
            row.tobytes()
            for store in stores
            for row in np.asarray(zarr.open_group(str(store), mode="r")["features"])
        }

    assert not rows("test") & (rows("train") | rows("val"))


def test_diagnosis_reports_name_the_diagnosis_and_refuse_another_organs():
    rng = np.random.default_rng(0)
    described = make_diagnosis_report("mastitis", ["lymphocytes", "adipose"], rng, "breast")
    assert "mastitis" in described.lower() and "MICROSCOPIC DESCRIPTION:" in described
    short = make_diagnosis_report("infarct", ["necrosis"], rng, "lung", describe=False)
    assert "infarct" in short.lower() and "MICROSCOPIC" not in short
    with pytest.raises(SyntheticDataError, match="not a diagnosis of organ 'lung'"):
        make_diagnosis_report("mastitis", ["lymphocytes"], rng, "lung")
