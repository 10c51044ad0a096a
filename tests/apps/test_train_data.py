"""``ort-cffi-train --data`` on the data people have, end to end through the commands: folders of images written
with Pillow (PNG and JPEG, channels first and last, train/ and val/ folders), CSV files with quoted fields and
string labels, text with a vocabulary built from the data or a tokenizers tokenizer.json; the validation split,
the metadata the exported model carries, and ``ort-cffi-predict`` reading it."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from PIL import Image

from classifier_models import cnn, initializers, mlp, text_classifier
from ort_cffi.cli import predict as predict_cli
from ort_cffi.cli import train as cli
from ort_cffi.trainer.predict import predict
from ort_cffi.trainer.sources import read_metadata
from ort_cffi.trainer.sources.text import build_vocabulary

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220)}


def run(capsys: pytest.CaptureFixture, *args: object) -> Tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_predict(capsys: pytest.CaptureFixture, *args: object) -> Tuple[int, List[List[str]], str]:
    code = predict_cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, [line.split("\t") for line in captured.out.splitlines()], captured.err


def write_images(folder: Path, per_class: int, seed: int = 0, size: Tuple[int, int] = (12, 10),
                 colours: Dict[str, Tuple[int, int, int]] = COLOURS) -> Path:
    """Noisy images of one colour per class folder, of another size than the model's, PNG and JPEG."""
    rng = np.random.default_rng(seed)
    for name, colour in colours.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = np.clip(np.array(colour) + rng.integers(-30, 30, (size[0], size[1], 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    return folder


def write_table(path: Path, rows_per_class: int = 20, seed: int = 0) -> Path:
    """Four numeric features and a species name in the middle column, every field quoted, one column name with a
    comma in it."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as file:
        writer = csv.writer(file, quoting=csv.QUOTE_ALL)
        writer.writerow(["sepal length", "sepal width", "species", "petal, length", "petal width"])
        for k, species in enumerate(["virginica", "setosa", "versicolor"]):
            for _ in range(rows_per_class):
                a, b, c, d = (rng.normal(k * 3 + 10, 0.5, 4)).round(2)
                writer.writerow([a, b, species, c, d])
    return path


REVIEWS = {"pos": ["great", "lovely", "excellent", "good fun"], "neg": ["awful", "boring", "terrible, really", "bad"]}


def write_reviews(path: Path, count: int = 40) -> Path:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["id", "review", "sentiment"])
        for i in range(count):
            label = "pos" if i % 2 else "neg"
            words = REVIEWS[label]
            writer.writerow([i, f"The film was {words[i % 4]} and {words[(i + 1) % 4]}.", label])
    return path


def changed(before: Path, after: Path) -> List[str]:
    """The initializers training changed (the exported model holds the trained ones)."""
    old, new = initializers(before), initializers(after)
    return [name for name in old if name in new and not np.array_equal(old[name], new[name])]


def test_image_folder_trains_and_predicts_class_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    photos = write_images(tmp_path / "photos", per_class=10)
    model = cnn(tmp_path / "cnn.onnx", classes=3)
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", model, "--data", photos, "--out", out, "--epochs", 6,
                               "--batch-size", 8, "--lr", 0.05, "--no-plot")
    assert code == 0, stderr
    assert "image folder: 3 classes (blue, green, red); RGB 8x8, 0-1, NCHW" in stdout
    # 10 per class, 0.2 held out of each: 2 per class, stratified
    assert f"dataset:   {photos} (24 train, 6 validation; image float32 [N, 3, 8, 8], labels int64 [N])" in stdout
    assert "validation: 6 samples held out of the training data, --val-split 0.2 (the default" in stdout
    assert "classes:   blue, green, red (3, in id order)" in stdout
    assert {"conv.weight", "fc.weight", "fc.bias"} <= set(changed(model, out / "inference_model.onnx"))

    metadata = read_metadata(out / "inference_model.onnx")
    assert json.loads(metadata["classes"]) == ["blue", "green", "red"]
    record = json.loads(metadata["preprocessing"])
    assert record["kind"] == "image" and record["size"] == [8, 8] and record["layout"] == "NCHW"
    assert record["scale"] == pytest.approx(1 / 255) and record["mode"] == "RGB"
    # onnx reads what was written, and the model stays valid
    loaded = onnx.load(str(out / "inference_model.onnx"))
    onnx.checker.check_model(loaded)
    assert {p.key: p.value for p in loaded.metadata_props} == metadata
    assert json.loads((out / "preprocessing.json").read_text())["classes"] == ["blue", "green", "red"]

    code, lines, stderr = run_predict(capsys, out / "inference_model.onnx", photos / "red" / "0.jpg",
                                      photos / "blue" / "1.png", photos / "green")
    assert code == 0, stderr
    assert len(lines) == 12 and all(len(line) == 3 for line in lines)
    assert lines[0][:2] == [str(photos / "red" / "0.jpg"), "red"] and lines[1][1] == "blue"
    assert sum(line[1] == "green" for line in lines[2:]) >= 9
    assert all(0 < float(line[2]) <= 1 for line in lines)


def test_train_and_val_folders_channels_last_grey_and_normalised(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    colours = {"dark": (40, 40, 40), "light": (210, 210, 210)}
    data = tmp_path / "data"
    write_images(data / "train", per_class=8, colours=colours)
    write_images(data / "val", per_class=3, seed=1, colours=colours)
    model = cnn(tmp_path / "grey.onnx", classes=2, channels=1, channels_last=True)
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", model, "--data", data, "--out", out, "--epochs", 4, "--batch-size", 4,
                               "--normalize", 0.5, 0.25, "--schedule", "cosine", "--no-plot")
    assert code == 0, stderr
    assert "(16 train, 6 validation; image float32 [N, 8, 8, 1], labels int64 [N])" in stdout
    assert "image folder with train/ and val/: 2 classes (dark, light); L 8x8, 0-1, normalised" in stdout
    assert "held out" not in stdout and "cosine schedule" in stdout
    record = json.loads(read_metadata(out / "inference_model.onnx")["preprocessing"])
    assert record["layout"] == "NHWC" and record["mean"] == [0.5] and record["std"] == [0.25]
    predictions = predict(out / "inference_model.onnx", [str(data / "val" / "light" / "0.jpg"),
                                                         str(data / "val" / "dark" / "0.jpg")])
    assert [p.label for p in predictions] == ["light", "dark"]
    # a folder with its own validation part refuses --val-split
    code, _, stderr = run(capsys, "--model", model, "--data", data, "--out", tmp_path / "again", "--val-split", 0.3)
    assert code == 2 and "has its own validation folder (val/): --val-split applies only" in stderr
    assert not (tmp_path / "again").exists()


def test_csv_with_quoted_fields_and_string_labels(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    table = write_table(tmp_path / "flowers.csv")
    model = mlp(tmp_path / "mlp.onnx", features=4, classes=3)
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", model, "--data", table, "--label-column", "species", "--out", out,
                               "--epochs", 8, "--batch-size", 8, "--lr", 0.05, "--val-split", 0.25, "--no-plot")
    assert code == 0, stderr
    assert "(45 train, 15 validation; features float32 [N, 4], labels int64 [N])" in stdout
    assert "table: 4 features standardised on the training split; labels in 'species', 3 classes" in stdout
    assert "classes:   setosa, versicolor, virginica (3, in id order)" in stdout
    assert set(changed(model, out / "inference_model.onnx")) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    record = json.loads(read_metadata(out / "inference_model.onnx")["preprocessing"])
    assert record["columns"] == ["sepal length", "sepal width", "petal, length", "petal width"]
    assert record["label_column"] == "species" and len(record["mean"]) == 4
    assert 10 < record["mean"][0] < 16 and all(s > 0 for s in record["std"])  # of the raw feature values

    # New rows, in another column order and without the label column
    rows = tmp_path / "new.csv"
    rows.write_text('"petal width","petal, length","sepal width","sepal length"\n10.1,10,9.9,10.2\n16,16.1,15.8,16\n')
    code, lines, stderr = run_predict(capsys, out / "inference_model.onnx", rows)
    assert code == 0, stderr
    assert lines == [[f"{rows}:2", "virginica", lines[0][2]], [f"{rows}:3", "versicolor", lines[1][2]]]


def test_text_with_a_vocabulary_built_from_the_training_split(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    reviews = write_reviews(tmp_path / "reviews.csv")
    model = text_classifier(tmp_path / "text.onnx", vocabulary=30, length=6, classes=2)
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", model, "--data", reviews, "--text-column", "review",
                               "--label-column", "sentiment", "--out", out, "--epochs", 8, "--batch-size", 8,
                               "--lr", 0.1, "--no-plot")
    assert code == 0, stderr
    assert "text in 'review': vocabulary of 18 tokens built on the training split, 6 tokens per text" in stdout
    assert "embedding.weight" in changed(model, out / "inference_model.onnx")
    metadata = read_metadata(out / "inference_model.onnx")
    vocabulary = json.loads(metadata["vocabulary"])
    assert vocabulary[:2] == ["<pad>", "<unk>"] and len(vocabulary) == 18  # 16 tokens: the embedding's 30 rows hold them
    assert vocabulary[2:7] == [".", "and", "film", "the", "was"]  # the most frequent first (in every text), ties by name
    # more tokens than the embedding has rows: the most frequent are kept
    assert build_vocabulary(["b c c, c", "d"], 4) == ["<pad>", "<unk>", "c", ","]
    assert json.loads(metadata["classes"]) == ["neg", "pos"]
    texts = tmp_path / "texts.txt"
    texts.write_text("lovely and excellent\n\nawful and boring, really\n")
    code, lines, stderr = run_predict(capsys, out / "inference_model.onnx", "a great film, good fun", texts)
    assert code == 0, stderr
    assert [line[:2] for line in lines] == [["a great film, good fun", "pos"], [f"{texts}:1", "pos"],
                                           [f"{texts}:3", "neg"]]


def test_text_with_a_tokenizer_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    reviews = write_reviews(tmp_path / "reviews.csv")
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([row.split(",")[1] for row in reviews.read_text().splitlines()[1:]],
                                  trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    model = text_classifier(tmp_path / "text.onnx", vocabulary=tokenizer.get_vocab_size(), length=8, classes=2)
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", model, "--data", reviews, "--text-column", "review",
                               "--tokenizer", tmp_path / "tokenizer.json", "--out", out, "--epochs", 8,
                               "--batch-size", 8, "--lr", 0.1, "--no-plot")
    assert code == 0, stderr
    assert f"tokenizer tokenizer.json ({tokenizer.get_vocab_size()} tokens), 8 tokens per text" in stdout
    metadata = read_metadata(out / "inference_model.onnx")
    assert json.loads(metadata["preprocessing"])["pad_id"] == 0 and "vocabulary" not in metadata
    assert Tokenizer.from_str(metadata["tokenizer"]).get_vocab() == tokenizer.get_vocab()
    predictions = predict(out / "inference_model.onnx", ["lovely and great", "boring and bad"])
    assert [p.label for p in predictions] == ["pos", "neg"]


def test_npz_with_only_training_arrays_gets_a_validation_split(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from conftest import DIGITS

    with np.load(DIGITS / "digits.npz") as digits:
        np.savez(tmp_path / "train_only.npz", train_input=digits["train_input"][:200],
                 train_labels=digits["train_labels"][:200])
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--data", tmp_path / "train_only.npz", "--val-split", 0.25, "--epochs", 1,
                               "--out", out, "--no-plot")
    assert code == 0, stderr
    assert "(150 train, 50 validation; input float32 [N, 64], labels int64 [N])" in stdout
    assert "--val-split 0.25, stratified by class, seed 0" in stdout
    assert not (out / "preprocessing.json").exists()  # arrays as given: nothing to record


def test_a_resumed_run_keeps_its_data_options_and_its_models_name(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    table = write_table(tmp_path / "flowers.csv")
    model = mlp(tmp_path / "mlp.onnx", features=4, classes=3)
    out = tmp_path / "run"
    code, first, stderr = run(capsys, "--model", model, "--data", table, "--label-column", "species",
                              "--val-split", 0.25, "--epochs", 2, "--batch-size", 8, "--out", out)
    assert code == 0, stderr
    code, stdout, stderr = run(capsys, "--out", out, "--resume", "--epochs", 3, "--override")
    assert code == 0, stderr
    # the header names the model the run was made from, not the artifacts folder
    assert f"artifacts: {(out / 'artifacts').resolve()} (the run's, made from {model.resolve()})" in stdout
    # the same split and standardisation as the run started with: --label-column and --val-split were stored
    assert "(45 train, 15 validation; features float32 [N, 4], labels int64 [N])" in stdout
    assert json.loads(read_metadata(out / "inference_model.onnx")["classes"]) == ["setosa", "versicolor", "virginica"]
    assert (out / "training.png").read_bytes()[:4] == b"\x89PNG"
    code, _, stderr = run(capsys, "--out", out, "--resume", "--val-split", 0.5)
    assert code == 2 and "error: --val-split differs from the run being resumed (--label-column species, " \
                         "--val-split 0.25): the trained parameters depend on its data" in stderr, stderr


def test_a_tsv_file_with_numeric_labels_for_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A floating-point labels input (--loss mse) takes the label column as numbers: no classes."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (60, 3))
    y = x @ np.array([1.0, -2.0, 0.5])
    path = tmp_path / "values.tsv"
    path.write_text("a\tb\tc\ttarget\n" + "".join("\t".join(f"{v:.4f}" for v in (*row, t)) + "\n" for row, t in zip(x, y)))
    model = mlp(tmp_path / "regression.onnx", features=3, classes=1)
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", model, "--data", path, "--loss", "mse", "--out", out, "--epochs", 3,
                               "--batch-size", 8, "--no-plot")
    assert code == 0, stderr
    assert "table: 3 features standardised on the training split; labels in 'target', numeric labels" in stdout
    metadata = read_metadata(out / "inference_model.onnx")
    assert "classes" not in metadata and json.loads(metadata["preprocessing"])["delimiter"] == "\t"
    predictions = predict(out / "inference_model.onnx", [path])
    assert len(predictions) == 60 and predictions[0].probability is None and float(predictions[0].label) == pytest.approx(
        float(predictions[0].scores[0]))


def test_train_and_test_folders_and_float_token_ids(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Layouts and exports seen in the wild: train/ and test/ folders (test/ validates), and a text model whose
    token ids come in as float32 and are cast to the embedding's indices."""
    data = tmp_path / "data"
    write_images(data / "train", per_class=4, colours={"red": (200, 0, 0), "blue": (0, 0, 200)})
    write_images(data / "test", per_class=2, seed=1, colours={"red": (200, 0, 0), "blue": (0, 0, 200)})
    code, stdout, stderr = run(capsys, "--model", cnn(tmp_path / "cnn.onnx", classes=2), "--data", data,
                               "--out", tmp_path / "images", "--epochs", 1, "--batch-size", 4, "--no-plot")
    assert code == 0, stderr
    assert "(8 train, 4 validation;" in stdout and "image folder with train/ and test/: 2 classes (blue, red)" in stdout

    model = text_classifier(tmp_path / "text.onnx", vocabulary=30, length=6, classes=2, float_ids=True)
    out = tmp_path / "text"
    code, stdout, stderr = run(capsys, "--model", model, "--data", write_reviews(tmp_path / "reviews.csv"),
                               "--text-column", "review", "--out", out, "--epochs", 2, "--batch-size", 8, "--no-plot")
    assert code == 0, stderr
    assert "tokens float32 [N, 6]" in stdout and "embedding.weight" in changed(model, out / "inference_model.onnx")
    assert len(predict(out / "inference_model.onnx", ["a lovely film"])) == 1


def test_two_label_names_for_a_binary_classifier_with_one_logit(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--loss bce-with-logits: a float labels input with one value per sample; two label names become 0 and 1, and
    ort-cffi-predict turns the one logit into the probability of the class it names."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (60, 3))
    path = tmp_path / "binary.csv"
    path.write_text("a,b,c,answer\n" + "".join(f"{r[0]:.3f},{r[1]:.3f},{r[2]:.3f},{'yes' if r[0] > 0 else 'no'}\n"
                                               for r in x))
    out = tmp_path / "run"
    code, stdout, stderr = run(capsys, "--model", mlp(tmp_path / "binary.onnx", features=3, classes=1), "--data", path,
                               "--loss", "bce-with-logits", "--out", out, "--epochs", 10, "--batch-size", 8, "--lr", 0.05,
                               "--no-plot")
    assert code == 0, stderr
    assert "classes:   no, yes (2, in id order)" in stdout
    predictions = predict(out / "inference_model.onnx", [path])
    assert sum(p.label == ("yes" if r[0] > 0 else "no") for p, r in zip(predictions, x)) >= 50
    assert all(0.5 <= p.probability <= 1 for p in predictions)
