"""Multi-label and regression targets beyond image lists (issue 49): the metrics against
scikit-learn's, the best-F1 threshold against a brute-force search, tags in text rows, multi-hot
and real-valued tensors, and the task rule that picks them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, f1_score

from zoo.errors import DataError
from zoo.training.data.kinds import open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions
from zoo.training.data.targets import read_targets
from zoo.training.loop.meter import best_f1_threshold, multi_label_metrics, multi_label_thresholds


def test_map_is_scikit_learns_and_f1_is_at_the_chosen_thresholds() -> None:
    rng = np.random.default_rng(0)
    targets = (rng.random((200, 4)) < [0.5, 0.3, 0.1, 0.02]).astype(np.float32)
    targets[0, 3] = 1
    scores = np.clip(targets * 0.3 + rng.random((200, 4)) * 0.7, 0, 1).astype(np.float32)
    metrics = multi_label_metrics(scores, targets)
    assert metrics["map"] == pytest.approx(average_precision_score(targets, scores, average="macro"))
    decided = scores >= np.asarray(multi_label_thresholds(scores, targets))
    assert metrics["f1_micro"] == pytest.approx(f1_score(targets, decided, average="micro"))
    assert metrics["f1_macro"] == pytest.approx(f1_score(targets, decided, average="macro"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), min_size=1, max_size=30))
def test_the_best_f1_threshold_is_the_best_of_every_cut(samples: list[tuple[int, bool]]) -> None:
    scores = np.array([s / 20 for s, _ in samples], dtype=np.float64)
    truth = np.array([float(t) for _, t in samples])
    threshold, f1 = best_f1_threshold(scores, truth)
    if truth.sum() == 0:
        assert (threshold, f1) == (0.5, 0.0)
        return
    best = max(f1_score(truth, scores >= cut, zero_division=0) for cut in np.unique(scores))
    assert f1 == pytest.approx(best)
    assert f1_score(truth, scores >= threshold, zero_division=0) == pytest.approx(best)


def test_rare_labels_take_the_pooled_threshold() -> None:
    targets = np.zeros((40, 2), dtype=np.float32)
    targets[:20, 0], targets[10:12, 1] = 1, 1  # label 1: two positives, its own best cut just below them
    scores = np.linspace(0.9, 0.1, 40)[:, None].repeat(2, 1)
    pooled, _ = best_f1_threshold(scores.reshape(-1), targets.reshape(-1))
    own = [best_f1_threshold(scores[:, k], targets[:, k])[0] for k in range(2)]
    assert multi_label_thresholds(scores, targets) == [own[0], pooled] and own[1] != pooled


def test_text_rows_with_lists_of_tags_are_multi_label(tmp_path: Path) -> None:
    rows = [{"text": f"row {i}", "label": ["sport", "news"][: i % 2 + 1]} for i in range(6)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = open_data(path)
    assert source.multi_label and source.class_names == ["news", "sport"] and "lists" in source.task_note
    batch = source.collate_fn([source.full()[i] for i in range(2)])
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [[0, 1], [1, 1]]
    csv = tmp_path / "t.csv"
    csv.write_text("text,tags\n" + "".join(f"row {i},sport|news\n" for i in range(3)) + "x,news\n")
    tags = open_data(csv, molecules=MoleculeOptions(label_field="tags", task="multi-label", label_delimiter="|"))
    assert tags.class_counts == {"news": 4, "sport": 3}


def test_numbers_not_all_whole_are_a_regression_and_whole_ones_classes(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("text,label\n" + "".join(f"row {i},{i / 2}\n" for i in range(6)))
    source = open_data(path)
    assert source.target == pytest.approx({"name": "label", "mean": 1.25, "std": np.std(np.arange(6) / 2, ddof=1)})
    path.write_text("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(6)))
    assert open_data(path).class_names == ["0", "1"]
    assert open_data(path, molecules=MoleculeOptions(task="regression")).target["mean"] == 0.5


def test_tensors_take_a_multi_hot_or_a_real_target(tmp_path: Path) -> None:
    x = torch.rand(8, 5)
    torch.save({"x": x, "y": (torch.arange(16).reshape(8, 2) % 3 == 0).float()}, tmp_path / "m.pt")
    hot = open_data(tmp_path / "m.pt", molecules=MoleculeOptions(task="multi-label"))
    assert hot.multi_label and hot.num_classes == 2 and hot.full()[0][1].tolist() == [1.0, 0.0]
    torch.save({"x": x, "y": torch.linspace(0, 1, 8)}, tmp_path / "r.pt")
    values = open_data(tmp_path / "r.pt", molecules=MoleculeOptions(task="regression"))
    assert values.target["mean"] == pytest.approx(0.5) and values.num_classes == 1
    torch.save({"x": x, "y": torch.full((8, 2), 0.5)}, tmp_path / "bad.pt")
    with pytest.raises(DataError, match=r"sample 0: the label column '0' holds '0.5'"):
        open_data(tmp_path / "bad.pt", molecules=MoleculeOptions(task="multi-label"))


@pytest.mark.parametrize(
    "rows,task,message",
    [
        ([(2, "1.5"), (3, "nan")], "auto", r"t.csv, line 3: the label 'y': the label 'nan' is not a number"),
        ([(2, "3"), (3, "3")], "regression", r"every 'y' value is 3"),
        ([(2, ["a"]), (3, "b")], "classification", r"line 2: 'y' is a list, and the task is classification"),
        ([(2, [1.5])], "multi-label", r"line 2: 'y' must be a list of label names"),
    ],
)
def test_bad_targets_are_named_by_line(rows: list, task: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_targets("t.csv", rows, "y", task)


@pytest.mark.usefixtures("one_thread")
def test_tensors_and_text_rows_train_end_to_end(tmp_path: Path) -> None:
    import zoo

    quick = dict(epochs=1, progress=False, tensorboard=False, plot=False, post_training=False, val_fraction=0.3)
    torch.manual_seed(0)
    torch.save({"x": torch.rand(40, 8), "y": torch.rand(40)}, tmp_path / "r.pt")
    dbn = dict(model_kwargs={"sizes": [8, 16, 8]})
    values = zoo.finetune("dbn", tmp_path / "r.pt", tmp_path / "r", task="regression", **dbn, **quick)
    assert {"val_mae", "val_r2"} <= set(values.metrics)
    hot = {"x": torch.rand(40, 8), "y": (torch.rand(40, 3) > 0.5).float(), "classes": ["red", "round", "soft"]}
    torch.save(hot, tmp_path / "m.pt")
    zoo.finetune("dbn", tmp_path / "m.pt", tmp_path / "m", task="multi-label", **dbn, **quick)
    assert json.loads((tmp_path / "m" / "config.json").read_text())["multi_label"]["names"] == ["red", "round", "soft"]
    rows = [{"text": f"row {i} " + "x" * (i % 3), "label": ["a", "b", "c"][: i % 3 + 1]} for i in range(20)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    text = zoo.finetune("moe_encoder", tmp_path / "t.jsonl", tmp_path / "t", model_kwargs=tiny, **quick)
    assert {"val_map", "val_f1_micro", "val_f1_macro"} <= set(text.metrics)


def test_a_label_whose_every_positive_is_held_out_is_refused() -> None:
    from zoo.training.data.tensors.tensor_files import tensor_source

    y = torch.zeros(30, 2)
    y[:, 0], y[0, 1] = 1, 1  # 'rare' has one positive, sample 0
    source = tensor_source(torch.rand(30, 4), y, ["common", "rare"], "t.pt", task="multi-label")
    seed = next(s for s in range(100) if 0 in torch.randperm(30, generator=torch.Generator().manual_seed(s))[:3])
    with pytest.raises(DataError, match=r"takes every sample of label 'rare' \(1 sample\), leaving none to train on"):
        source.split(0.1, seed=seed)
