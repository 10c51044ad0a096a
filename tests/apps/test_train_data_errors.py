"""Data ``ort-cffi-train`` cannot use gets one clear error (exit status 2, no traceback) and leaves nothing behind:
an empty class folder, a corrupt image, a ragged CSV row, a non-numeric feature, a missing label column, a folder
that is no dataset (never "does not exist" for one that does), a model input a source cannot feed; and
``ort-cffi-predict`` on a model without metadata."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import numpy as np
import pytest

from classifier_models import cnn, mlp, text_classifier
from conftest import DIGITS
from ort_cffi.cli import predict as predict_cli
from ort_cffi.cli import train as cli
from ort_cffi.trainer.schedule import learning_rate
from ort_cffi.trainer.loop import epochs_without_improvement
from test_train_data import write_images, write_reviews, write_table


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    cnn(folder / "cnn.onnx", classes=3)
    cnn(folder / "cnn2.onnx", classes=2)
    mlp(folder / "mlp.onnx", features=4, classes=3)
    mlp(folder / "mlp5.onnx", features=5, classes=3)
    text_classifier(folder / "text.onnx", vocabulary=20, length=6, classes=2)
    return folder


def refused(capsys: pytest.CaptureFixture, tmp_path: Path, model: Path, data: Path, *extra: object) -> str:
    """Run a training that must be refused: exit status 2, one error line, no --out left behind."""
    out = tmp_path / "runs" / "refused"
    code = cli.main(["--model", str(model), "--data", str(data), "--out", str(out), "--no-plot", *map(str, extra)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists(), list((tmp_path / "runs").rglob("*"))  # nothing left behind
    return err


def test_an_empty_class_folder(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    photos = write_images(tmp_path / "photos", per_class=4)
    (photos / "yellow").mkdir()
    (photos / "yellow" / "notes.txt").write_text("to do")
    err = refused(capsys, tmp_path, models / "cnn.onnx", photos)
    assert f"class folder '{photos / 'yellow'}' holds no images: every subfolder of '{photos}' is a class" in err


def test_a_corrupt_image(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    photos = write_images(tmp_path / "photos", per_class=4)
    (photos / "red" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    err = refused(capsys, tmp_path, models / "cnn.onnx", photos)
    assert f"error: cannot read image '{photos / 'red' / 'broken.png'}': not an image Pillow reads, or a damaged one" in err
    (photos / "red" / "broken.png").unlink()
    jpeg = (photos / "green" / "0.jpg").read_bytes()
    (photos / "green" / "0.jpg").write_bytes(jpeg[:len(jpeg) // 2])  # cut off half way
    err = refused(capsys, tmp_path, models / "cnn.onnx", photos)
    assert f"error: cannot read image '{photos / 'green' / '0.jpg'}': not an image Pillow reads, or a damaged one" in err


def test_a_folder_that_is_no_dataset_is_described_not_missing(tmp_path: Path, models: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "flat"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    err = refused(capsys, tmp_path, models / "cnn.onnx", folder)
    assert "does not exist" not in err
    assert f"dataset '{folder}' is a folder that holds 1 file and no subfolders, not an image dataset: --data accepts" in err
    photos = write_images(tmp_path / "one", per_class=3, colours={"red": (200, 0, 0)})
    assert "holds one class folder (red): a classifier needs two classes or more" in refused(
        capsys, tmp_path, models / "cnn.onnx", photos)
    # more classes than the model scores
    photos = write_images(tmp_path / "three", per_class=3)
    assert "has 3 classes (blue, green, red), but the model scores 2" in refused(capsys, tmp_path, models / "cnn2.onnx", photos)
    # a file of another kind
    (tmp_path / "data.json").write_text("{}")
    err = refused(capsys, tmp_path, models / "cnn.onnx", tmp_path / "data.json")
    assert "is a .json file, not a dataset ort-cffi-train reads: --data accepts an .npz file" in err
    # missing for real
    assert f"error: dataset '{tmp_path / 'none'}' does not exist" in refused(capsys, tmp_path, models / "cnn.onnx",
                                                                               tmp_path / "none")


def test_a_ragged_csv_row(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    table = write_table(tmp_path / "flowers.csv")
    lines = table.read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0]  # one field short
    table.write_text("\n".join(lines) + "\n")
    err = refused(capsys, tmp_path, models / "mlp.onnx", table, "--label-column", "species")
    assert f"error: '{table}', line 6: 4 fields, but the header has 5 (sepal length, sepal width, species, petal, length, " in err


def test_a_non_numeric_feature(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    table = write_table(tmp_path / "flowers.csv")
    lines = table.read_text().splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[1], '"n/a"', 1)
    table.write_text("\n".join(lines) + "\n")
    err = refused(capsys, tmp_path, models / "mlp.onnx", table, "--label-column", "species")
    assert f"error: '{table}', line 4, column 'sepal width': 'n/a', not a number; every column but the label column " \
           "('species') is a numeric feature" in err
    # the default label column (the last) leaves the species as a feature: the first row says so
    err = refused(capsys, tmp_path, models / "mlp.onnx", write_table(tmp_path / "plain.csv"))
    assert "column 'species': 'virginica', not a number" in err


def test_a_missing_label_column(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    table = write_table(tmp_path / "flowers.csv")
    err = refused(capsys, tmp_path, models / "mlp.onnx", table, "--label-column", "kind")
    assert f"error: --label-column 'kind' is not a column of '{table}'; its columns are 'sepal length', 'sepal width', " \
           "'species', 'petal, length', 'petal width'" in err
    reviews = write_reviews(tmp_path / "reviews.csv")
    err = refused(capsys, tmp_path, models / "text.onnx", reviews, "--text-column", "body")
    assert "error: --text-column 'body' is not a column of" in err


def test_inputs_a_source_cannot_feed(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    table = write_table(tmp_path / "flowers.csv")
    photos = write_images(tmp_path / "photos", per_class=3)
    # images into an MLP over 5 features (no square image, flattened): what the input wants is said
    err = refused(capsys, tmp_path, models / "mlp5.onnx", photos)
    assert "the model's input 'features' is float32 [N, 5]: images feed [N, C, H, W] or [N, H, W, C]" in err
    # a table of 4 features into a CNN
    err = refused(capsys, tmp_path, models / "cnn.onnx", table, "--label-column", "species")
    assert "is a table of numbers, but the model's input 'image' is float32 [N, 3, 8, 8]" in err
    # three feature columns for a model of four
    short = tmp_path / "short.csv"
    short.write_text("a,b,c,label\n" + "".join(f"{i},{i + 1},{i + 2},{'xy'[i % 2]}\n" for i in range(12)))
    err = refused(capsys, tmp_path, models / "mlp.onnx", short)
    assert "has 3 feature columns (a, b, c; labels in 'label'), but the model's input 'features' is float32 [N, 4]: " \
           "4 features per sample" in err
    reviews = write_reviews(tmp_path / "reviews.csv")
    err = refused(capsys, tmp_path, models / "mlp.onnx", reviews, "--text-column", "review")
    assert "is text (--text-column), fed as token ids, but the model's input 'features' is float32 [N, 4]" in err
    err = refused(capsys, tmp_path, models / "mlp.onnx", table, "--tokenizer", tmp_path / "tokenizer.json")
    assert "error: --tokenizer applies to text: name the text's column with --text-column" in err
    assert "--normalize do" in refused(capsys, tmp_path, models / "mlp.onnx", table, "--normalize", 0.5, 0.5)


def test_an_npz_with_its_own_validation_refuses_a_split(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs" / "refused"
    code = cli.main(["--data", str(DIGITS / "digits.npz"), "--val-split", "0.1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "has its own validation arrays (val_*): --val-split applies only" in err
    assert not (tmp_path / "runs").exists()


def test_predict_needs_a_model_with_metadata(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    code = predict_cli.main([str(models / "cnn.onnx"), "x.png"])
    err = capsys.readouterr().err
    assert code == 2 and "carries no preprocessing in its metadata: ort-cffi-predict reads the models ort-cffi-train " \
                         "exports" in err
    code = predict_cli.main([str(tmp_path / "none.onnx"), "x.png"])
    assert code == 2 and f"error: model '{tmp_path / 'none.onnx'}' does not exist" in capsys.readouterr().err


def test_the_schedules_first_step_learns() -> None:
    rates = [learning_rate("linear", 0.1, 4, 12, step) for step in range(12)]
    assert rates[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])  # warm-up: the first step already learns
    assert rates[4] == pytest.approx(0.1) and rates[-1] == pytest.approx(0.0125) and rates == sorted(rates[:4]) + rates[4:]
    cosine = [learning_rate("cosine", 0.1, 2, 10, step) for step in range(10)]
    assert cosine[:3] == pytest.approx([0.05, 0.1, 0.1]) and cosine[6] == pytest.approx(0.05)
    assert all(a >= b for a, b in zip(cosine[2:], cosine[3:])) and cosine[-1] > 0
    assert learning_rate("constant", 0.1, 5, 10, 0) == 0.1


def test_patience_counts_epochs_since_the_lowest_validation_loss() -> None:
    epochs: List[dict] = [{"val_loss": v} for v in (1.0, 0.5, 0.6, 0.7)]
    assert epochs_without_improvement(epochs, 2.0) == 2
    assert epochs_without_improvement(epochs[:2], 2.0) == 0
    assert epochs_without_improvement([{"val_loss": float("nan")}], 1.0) == 1


def test_patience_stops_and_exports_the_best_epoch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Labels that are noise: validation stops improving soon, and the run stops --patience epochs later."""
    rng = np.random.default_rng(0)
    with np.load(DIGITS / "digits.npz") as digits:
        np.savez(tmp_path / "noise.npz", train_input=digits["train_input"][:160],
                 train_labels=rng.integers(0, 10, 160).astype(np.int64))
    out = tmp_path / "run"
    code = cli.main(["--data", str(tmp_path / "noise.npz"), "--epochs", "40", "--lr", "0.05", "--patience", "2",
                     "--batch-size", "16", "--out", str(out), "--no-plot"])
    stdout = capsys.readouterr().out
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    stopped = metrics["stopped_early"]
    assert stopped is not None and stopped < 40 and len(metrics["epochs"]) == stopped
    assert "early stop: the validation loss has not improved for 2 epochs (--patience 2)" in stdout
    losses = [metrics["before"]["val_loss"]] + [e["val_loss"] for e in metrics["epochs"]]
    assert losses.index(min(losses)) == len(losses) - 3  # the lowest, then two epochs without a lower one
    # resumed, it stays stopped; a higher patience (--override) trains on
    code = cli.main(["--out", str(out), "--resume", "--no-plot"])
    assert code == 0 and f"early stop: the run stopped after epoch {stopped}, 2 epochs without" in capsys.readouterr().out
    assert len(json.loads((out / "metrics.json").read_text())["epochs"]) == stopped
    code = cli.main(["--out", str(out), "--resume", "--patience", "3", "--override", "--no-plot"])
    assert code == 0 and f"epoch {stopped + 1:2d}/40" in capsys.readouterr().out
