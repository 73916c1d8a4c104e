"""Manifests, feature bags, organ-stratified sampling and report filtering for LIMIT."""

from __future__ import annotations

import json
from collections import Counter

import h5py
import numpy as np
import pytest
import torch

from medvl_engine.data import (
    OrganStratifiedSampler,
    filter_report,
    llm_report_filter,
    read_manifest,
)
from medvl_engine.errors import ConfigError, DataError
from medvl_engine.features.bags import collate_bags, read_bag_features


@pytest.fixture(scope="session")
def write_stores(write_feature_store):
    """``write_stores(tmp_path, count=3)`` -> paths of ``count`` small zarr feature stores."""

    def _stores(tmp_path, count=3):
        paths = []
        for i in range(count):
            features = np.full((i + 2, 4), float(i), dtype=np.float32)
            paths.append(write_feature_store(tmp_path / f"s{i}.zarr", features, slide=f"s{i}"))
        return paths

    return _stores


def test_csv_and_jsonl_manifests_resolve_relative_paths_and_report_files(tmp_path, write_stores):
    write_stores(tmp_path)
    (tmp_path / "r2.txt").write_text("Sections show fat.")
    (tmp_path / "m.csv").write_text(
        "slide_id,organ,report,report_path,features,split,label\n"
        's0,Breast,"Invasive carcinoma.\nNo necrosis.",,s0.zarr,train,IDC\n'
        "s1,lung,Stroma.,,s1.zarr,VAL,\n"
        "s2,lung,,r2.txt,s2.zarr,test,LUAD\n"
    )
    records = read_manifest(tmp_path / "m.csv")
    assert [r.slide_id for r in records] == ["s0", "s1", "s2"]
    assert records[0].organ == "breast" and records[0].label == "IDC"
    assert records[0].report == "Invasive carcinoma.\nNo necrosis."  # multi-line quoted field
    assert records[1].split == "val" and records[1].label is None
    assert records[2].report == "Sections show fat." and records[2].features == tmp_path / "s2.zarr"
    lines = [
        {
            "slide_id": "a",
            "organ": "lung",
            "report": "x y z",
            "features": "s0.zarr",
            "split": "train",
        }
    ]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert read_manifest(tmp_path / "m.jsonl")[0].features == tmp_path / "s0.zarr"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("slide_id,organ,report,split\ns0,lung,x,train\n", r"lacks column\(s\) \['features'\]"),
        ("slide_id,organ,features,split\ns0,lung,s0.zarr,train\n", "report or report_path"),
        ("slide_id,organ,report,features,split\ns0,lung,x,nope.zarr,train\n", "does not exist"),
        ("slide_id,organ,report,features,split\ns0,lung,x,s0.zarr,holdout\n", "split 'holdout'"),
        (
            "slide_id,organ,report,features,split\ns0,lung,x,s0.zarr,train\ns0,lung,x,s0.zarr,val\n",
            "repeats slide_id 's0'",
        ),
        ("slide_id,organ,report,features,split\ns0,lung,,s0.zarr,train\n", "has no report text"),
    ],
)
def test_bad_manifests_name_file_and_problem(tmp_path, content, message, write_stores):
    write_stores(tmp_path, 1)
    (tmp_path / "m.csv").write_text(content)
    with pytest.raises(DataError, match=message) as error:
        read_manifest(tmp_path / "m.csv")
    assert "m.csv" in str(error.value) or "nope.zarr" in str(error.value)


def test_read_bag_features_from_zarr_and_trident_h5(tmp_path, write_feature_store):
    zarr_path = write_feature_store(tmp_path / "a.zarr", np.arange(12).reshape(3, 4))
    bag = read_bag_features(zarr_path)
    assert bag.dtype == torch.float32 and bag.shape == (3, 4) and bag[2, 3] == 11
    with h5py.File(tmp_path / "t.h5", "w") as handle:  # TRIDENT layout [1, N, D] + coords
        handle["features"] = np.ones((1, 5, 4), dtype=np.float16)
        handle["coords"] = np.zeros((1, 5, 2), dtype=np.int64)
    assert read_bag_features(tmp_path / "t.h5").shape == (5, 4)
    with h5py.File(tmp_path / "bad.h5", "w") as handle:
        handle["feats"] = np.ones((5, 4))
    with pytest.raises(DataError, match="no 'features' dataset"):
        read_bag_features(tmp_path / "bad.h5")


def test_collate_pads_without_truncating():
    bags = [torch.ones(3, 2), torch.full((5, 2), 2.0), torch.full((1, 2), 3.0)]
    features, mask = collate_bags(bags)
    assert features.shape == (3, 5, 2)
    assert mask.sum(1).tolist() == [3, 5, 1]
    assert features[0, 3:].abs().sum() == 0 and features[1].sum() == 20
    with pytest.raises(DataError, match="different feature widths"):
        collate_bags([torch.ones(2, 3), torch.ones(2, 4)])


def test_sampler_draws_negatives_within_the_organ():
    organs = ["breast"] * 6 + ["lung"] * 5 + ["colon"] * 5
    sampler = OrganStratifiedSampler(organs, num_negatives=4, negatives="same_organ", seed=1)
    bags = sampler.bags(epoch=0)
    assert sorted(bag[0] for bag in bags) == list(range(16))  # every slide is an anchor once
    for bag in bags:
        assert len(bag) == 5 and len(set(bag)) == 5
        assert {organs[i] for i in bag} == {organs[bag[0]]}
    assert sampler.bags(0) == bags and sampler.bags(1) != bags  # deterministic per epoch


def test_random_negatives_cross_organs_and_small_organs_are_topped_up():
    organs = ["breast"] * 10 + ["lung"] * 10
    mixed = OrganStratifiedSampler(organs, num_negatives=4, negatives="random", seed=0).bags(0)
    assert any(len({organs[i] for i in bag}) > 1 for bag in mixed)
    small = OrganStratifiedSampler(["kidney"] * 2 + ["lung"] * 10, num_negatives=3, seed=0)
    bags = small.bags(0)
    kidney_bags = [bag for bag in bags if bag[0] < 2]
    assert all(len(bag) == 4 for bag in bags) and small.last_topped_up == 2
    assert all(Counter(i < 2 for i in bag)[True] == 2 for bag in kidney_bags)


def test_sampler_rejects_bad_settings():
    with pytest.raises(ConfigError, match="1..8"):
        OrganStratifiedSampler(["a"] * 20, num_negatives=9)
    with pytest.raises(ConfigError, match="same_organ"):
        OrganStratifiedSampler(["a"] * 20, negatives="other")
    with pytest.raises(DataError, match="cannot make bags of 5"):
        OrganStratifiedSampler(["a"] * 3, num_negatives=4)


def test_rule_based_filter_removes_identifiers_and_keeps_histology():
    report = (
        "Accession: S23-64596\n"
        "Electronically signed by Dr. Smith, MD\n"
        "Patient name: Jane Roe  MRN 1234567\n"
        "SPECIMEN: Left breast, lumpectomy\n"
        "FINAL DIAGNOSIS:\n"
        "Invasive ductal carcinoma, reviewed with Dr. Patel on 03/04/2026. No necrosis.\n"
        "Phone: 555-668-5892\n"
        "Specimen received in formalin, labelled with the name of the patient.\n"
    )
    cleaned = filter_report(report)
    assert cleaned == (
        "SPECIMEN: Left breast, lumpectomy "
        "Invasive ductal carcinoma, reviewed with on. No necrosis."
    )
    for leaked in ("S23", "Smith", "Patel", "555", "2026", "MRN", "Jane", "formalin"):
        assert leaked not in cleaned


def test_llm_hook_gets_the_prompt_and_falls_back_when_empty():
    prompts = []

    def fake_llm(prompt: str) -> str:
        prompts.append(prompt)
        return "" if "EMPTY" in prompt else "Invasive carcinoma."

    clean = llm_report_filter(fake_llm)
    assert clean("Dr. Who\nInvasive carcinoma, left.") == "Invasive carcinoma."
    assert "Invasive carcinoma, left." in prompts[0] and "identifying" in prompts[0]
    assert clean("EMPTY\nAccession: S1-99999\nFat.") == "EMPTY Fat."
