"""Federated learning with Flower over ort_cffi (``ort_cffi.flower``, ``ort-cffi-federated``): the
partitioning, a client in this process (its parameter buffer, fit, evaluate, and the errors of a closed or
mismatched model), a small simulation on Ray (FedAvg's aggregate is the example-weighted mean of what the
clients returned, the global model improves, the files are written), the real default in a child
process, and the clear errors when the ``federated`` extra is missing."""
from __future__ import annotations

import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest

from conftest import DIGITS, fixed_batch_artifacts, run_child
from ort_cffi import OrtCheckpointState, OrtEnvironment

if sys.version_info < (3, 11):  # Flower 1.42 needs Python 3.11; the extra is not installable before
    pytest.skip("the federated extra (flwr) needs Python 3.11+", allow_module_level=True)

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # read when flwr is first imported: no phoning home
with warnings.catch_warnings():  # Flower imports typer, which warns about click's deprecations
    warnings.simplefilter("ignore", DeprecationWarning)
    from ort_cffi import federated, flower  # noqa: E402  (after the version check)

ROUND_LINE = re.compile(r"^round +(\d+)/(\d+)  train loss [\d.]+  val loss [\d.]+  val acc (\d\.\d{4})  lr ", re.M)


@pytest.fixture
def shared_sessions() -> Iterator[None]:
    """Clients in this process share a cached session: released before the leak check."""
    yield
    flower.close_shared_sessions()


# --- partitioning -------------------------------------------------------------------------------

def _check_cover(parts: List[np.ndarray], n: int) -> None:
    joined = np.concatenate(parts)
    assert len(joined) == n and np.array_equal(np.sort(joined), np.arange(n))  # disjoint, covering


def test_iid_partitions_are_disjoint_equal_and_seeded() -> None:
    labels = np.repeat(np.arange(10), 30)
    parts = flower.partition(labels, 7, seed=3)
    _check_cover(parts, 300)
    assert {len(p) for p in parts} <= {42, 43}
    assert all(np.array_equal(a, b) for a, b in zip(parts, flower.partition(labels, 7, seed=3)))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, flower.partition(labels, 7, seed=4)))


def test_dirichlet_partitions_are_skewed_by_label() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 2000)
    parts = flower.partition(labels, 5, partitioning="dirichlet", alpha=0.1, seed=1)
    _check_cover(parts, 2000)
    assert min(len(p) for p in parts) >= 10
    # With a small alpha a client's largest class is far more than IID's one tenth.
    dominant = [np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]
    assert np.mean(dominant) > 0.4
    iid = [np.bincount(labels[p], minlength=10).max() / len(p) for p in flower.partition(labels, 5)]
    assert np.mean(iid) < 0.2
    again = flower.partition(labels, 5, partitioning="dirichlet", alpha=0.1, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_dataset_partitions_share_label_proportions_across_splits() -> None:
    with np.load(DIGITS / "digits.npz") as d:
        dataset = {"train": {"input": d["train_input"], "labels": d["train_labels"]},
                   "val": {"input": d["val_input"], "labels": d["val_labels"]}}
    local = flower.partition_dataset(dataset, 4, partitioning="dirichlet", alpha=0.3, seed=0)
    assert sum(len(c["train"]["labels"]) for c in local) == 1437
    assert sum(len(c["val"]["labels"]) for c in local) == 360
    for client in local:  # the inputs stay with their labels, and val looks like train
        assert len(client["train"]["input"]) == len(client["train"]["labels"])
        train = np.bincount(client["train"]["labels"], minlength=10) / len(client["train"]["labels"])
        val = np.bincount(client["val"]["labels"], minlength=10) / max(len(client["val"]["labels"]), 1)
        assert np.abs(train - val).sum() < 0.5


def test_partitioning_refuses_bad_arguments() -> None:
    labels = np.zeros(10, np.int64)
    with pytest.raises(ValueError, match="partitioning must be one of iid, dirichlet"):
        flower.partition(labels, 2, partitioning="shards")
    with pytest.raises(ValueError, match="alpha must be a positive number"):
        flower.partition(labels, 2, partitioning="dirichlet", alpha=0.0)
    with pytest.raises(ValueError, match="use fewer clients or a larger alpha"):
        flower.label_proportions(np.arange(3), 3, alpha=0.01, min_size=5)


def test_partitioning_gives_every_client_training_data() -> None:
    """More clients than training samples would leave a client nothing to fit on (it divided by zero);
    an empty validation share is fine (it weighs nothing in the federated evaluation)."""
    rng = np.random.default_rng(0)
    dataset = {"train": {"input": rng.standard_normal((5, 64)).astype(np.float32), "labels": np.arange(5) % 2},
               "val": {"input": rng.standard_normal((3, 64)).astype(np.float32), "labels": np.arange(3) % 2}}
    for partitioning in flower.PARTITIONINGS:
        with pytest.raises(ValueError, match="6 clients cannot each get training data from 5 training samples: "
                                             "use at most 5 clients"):
            flower.partition_dataset(dataset, 6, partitioning=partitioning)
    local = flower.partition_dataset(dataset, 5)
    assert [len(c["train"]["labels"]) for c in local] == [1] * 5
    assert sorted(len(c["val"]["labels"]) for c in local) == [0, 0, 1, 1, 1]


# --- one client, in this process ----------------------------------------------------------------

def _client(data: Path, partition_id: int = 0, num_partitions: int = 3) -> flower.OrtNumPyClient:
    settings = flower.ClientSettings(data=str(data))
    return flower.load_client(settings, partition_id, num_partitions)


def test_client_fit_and_evaluate(small_data: Path, shared_sessions: None) -> None:
    client = _client(small_data, 1)
    (start,) = client.get_parameters({})
    assert start.dtype == np.float32 and start.shape == (client.session.getParametersSize(True),)
    before_loss, n_val, before = client.evaluate([start], {})
    assert n_val == 40 and set(before) == {"accuracy", "examples"}

    params, n, metrics = client.fit([start], {"local-epochs": 3, "batch-size": 16, "lr": 0.01, "server-round": 1})
    assert n == 133 and metrics["examples"] == 133  # partition 1 of 400 samples in 3
    assert set(metrics) == {"loss", "accuracy", "examples"}
    assert len(params) == 1 and params[0].shape == start.shape and not np.array_equal(params[0], start)
    after_loss, _, after = client.evaluate(params, {})
    assert after_loss < before_loss and after["accuracy"] > before["accuracy"]
    assert client.session.getLearningRate() == pytest.approx(0.01)

    # fit starts from the parameters it is given, whatever the session held before
    client.fit([start], {"local-epochs": 1, "lr": 0.0})
    np.testing.assert_array_equal(client.get_parameters({})[0], start)


def test_clients_in_one_process_share_a_session(small_data: Path, shared_sessions: None) -> None:
    first, second = _client(small_data, 0), _client(small_data, 2)
    assert first.session is second.session
    assert len(first.train_data["labels"]) + len(second.train_data["labels"]) == 134 + 133


def test_a_device_uses_its_own_data_and_the_run_config(small_data: Path, shared_sessions: None) -> None:
    """Under the deployment engine a node names its data (``data-path``) and the run config overrides."""
    client = flower.load_client(flower.ClientSettings(), data_path=str(small_data))
    assert len(client.train_data["labels"]) == 400 and len(client.val_data["labels"]) == 120
    settings = flower.ClientSettings().with_run_config({"partitioning": "dirichlet", "dirichlet-alpha": 2, "seed": 5})
    assert (settings.partitioning, settings.alpha, settings.seed) == ("dirichlet", 2.0, 5)
    server = flower.ServerSettings().with_run_config({"num-server-rounds": 3, "lr": 0.02, "out": "x"})
    assert (server.rounds, server.lr, server.out) == (3, 0.02, "x")
    assert server.lr_for(1) == pytest.approx(0.02) and server.lr_for(3) == pytest.approx(0.002)
    assert type(flower.clientapp).__name__ == "ClientApp" and type(flower.serverapp).__name__ == "ServerApp"


def test_fit_on_a_closed_model_is_a_clear_error(small_data: Path, shared_sessions: None) -> None:
    client = _client(small_data)
    (params,) = client.get_parameters({})
    client.close()
    with pytest.raises(flower.FederatedError, match=r"client 0: its training session is closed"):
        client.fit([params], {})
    with pytest.raises(flower.FederatedError, match="closed"):
        client.evaluate([params], {})
    # the next client this process serves gets a fresh session
    fresh = _client(small_data)
    assert not fresh.session.isClosed() and fresh.session is not client.session


def test_fit_on_a_mismatched_model_is_a_clear_error(small_data: Path, shared_sessions: None) -> None:
    client = _client(small_data)
    size = client.session.getParametersSize(True)
    expected = rf"the server sent 1 array\(s\) of \[{size + 10}\] values, but this client's model takes one flat array of its {size} trainable parameters"
    with pytest.raises(flower.FederatedError, match=expected):
        client.fit([np.zeros(size + 10, np.float32)], {})
    with pytest.raises(flower.FederatedError, match=r"sent 2 array\(s\).*same training artifacts"):
        client.fit([np.zeros(size - 10, np.float32), np.zeros(10, np.float32)], {})
    with pytest.raises(flower.FederatedError, match="same training artifacts"):
        client.evaluate([np.zeros(3, np.float32)], {})
    client.fit([np.zeros(size, np.float64)], {"local-epochs": 1})  # the right size in float64 is converted


def test_fit_without_training_data_is_a_clear_error(shared_sessions: None) -> None:
    session = flower.shared_session(DIGITS)
    empty = {"input": np.zeros((0, 64), np.float32), "labels": np.zeros(0, np.int64)}
    client = flower.OrtNumPyClient(session, {"train": empty, "val": empty}, client_id=4)
    (params,) = client.get_parameters({})
    with pytest.raises(flower.FederatedError, match="client 4: it has no training data, so it cannot fit"):
        client.fit([params], {})
    assert client.evaluate([params], {}) == (0.0, 0, {"examples": 0})


def test_a_fixed_batch_model_takes_whole_batches(tmp_path: Path, small_data: Path, shared_sessions: None) -> None:
    """A model whose inputs fix the batch size takes whole batches only: the clients and the server leave
    out the last partial batch (it failed inside the runtime), and report the examples they used; another
    batch size, or a client with less than one batch, is a clear error."""
    artifacts = fixed_batch_artifacts(tmp_path, 16)
    client = flower.load_client(flower.ClientSettings(artifacts=str(artifacts), data=str(small_data)), 1, 3)
    assert client.fixed_batch == 16
    (start,) = client.get_parameters({})
    params, n, metrics = client.fit([start], {"local-epochs": 2, "batch-size": 16, "lr": 0.01, "server-round": 1})
    assert n == metrics["examples"] == 128  # 133 training examples: 8 batches of 16
    assert not np.array_equal(params[0], start)
    _, n_val, _ = client.evaluate(params, {})
    assert n_val == 32  # 40 validation examples: 2 batches of 16
    with pytest.raises(flower.FederatedError, match="client 1: the model's inputs fix the batch size at 16, but the "
                                                    "server asks for batch-size 32"):
        client.fit([start], {"batch-size": 32})

    few = {"train": {k: v[:10] for k, v in client.train_data.items()},
           "val": {k: v[:10] for k, v in client.val_data.items()}}
    small = flower.OrtNumPyClient(client.session, few, client_id=7, fixed_batch=16)
    with pytest.raises(flower.FederatedError, match="client 7: it has 10 training examples, fewer than one batch: "
                                                    "the model's inputs fix the batch size at 16"):
        small.fit([start], {"batch-size": 16})
    assert small.evaluate([start], {}) == (0.0, 0, {"examples": 0})

    with flower.GlobalModel(artifacts, small_data) as model:
        assert (model.fixed_batch, model.batch_size) == (16, 16)
        loss, accuracy = model.evaluate(params)  # 120 validation examples: 7 batches of 16
        assert np.isfinite(loss) and accuracy is not None and 0 <= accuracy <= 1
        names, inference_accuracy = model.export(tmp_path / "inference.onnx")
        assert inference_accuracy == pytest.approx(accuracy)
        with pytest.raises(flower.FederatedError, match=r"the model's inputs fix the batch size at 16: set batch-size 16 "
                                                        r"\(--batch-size 16\), not 32"):
            flower.OrtFedAvg(model, flower.ServerSettings(batch_size=32), num_clients=1)
        flower.OrtFedAvg(model, flower.ServerSettings(batch_size=16), num_clients=1)


# --- a small simulation on Ray ------------------------------------------------------------------

def test_small_simulation(tmp_path: Path, small_data: Path) -> None:
    out = tmp_path / "run"
    lines: List[str] = []
    strategy = federated.simulate(data=small_data, out=out, clients=3, rounds=2, local_epochs=2, batch_size=16,
                                  lr=0.01, cpus=2, record_clients=True,
                                  report=lambda r: lines.append(flower.format_round(r, 2)))

    # FedAvg: each round's aggregate is the example-weighted mean of the models the clients returned.
    assert [r["round"] for r in strategy.fit_records] == [1, 2]
    for record in strategy.fit_records:
        clients = record["clients"]
        assert sorted(n for _, n in clients) == [133, 133, 134]
        weights = np.array([n for _, n in clients], dtype=np.float64)
        stacked = np.stack([arrays[0].astype(np.float64) for arrays, _ in clients])
        expected = (stacked * weights[:, None]).sum(axis=0) / weights.sum()
        (aggregate,) = record["aggregate"]
        assert aggregate.dtype == np.float32
        np.testing.assert_allclose(aggregate, expected, rtol=1e-6, atol=1e-6)
        assert not any(np.allclose(arrays[0], aggregate) for arrays, _ in clients)
    np.testing.assert_array_equal(strategy.final_parameters, strategy.fit_records[-1]["aggregate"][0])

    # The global model improves on the initial one; a line per round, the initial model's included.
    history = strategy.history
    assert [r["round"] for r in history] == [0, 1, 2]
    assert history[0]["val_accuracy"] < 0.3 and history[-1]["val_accuracy"] > history[0]["val_accuracy"] + 0.3
    assert history[-1]["val_loss"] < history[1]["val_loss"] < history[0]["val_loss"]
    assert history[1]["examples"] == 400 and history[1]["clients"] == 3
    assert all(r["clients_val_accuracy"] is not None for r in history[1:])  # federated evaluation ran
    assert len(lines) == 3 and all(ROUND_LINE.match(line) for line in lines[1:])

    # The files: history, plot, checkpoint of the last aggregate, inference model.
    for name in ("global_checkpoint", "inference_model.onnx", "history.json", "federated.png"):
        assert (out / name).is_file(), name
    assert (out / "federated.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))
    saved = json.loads((out / "history.json").read_text())
    assert [r["round"] for r in saved["rounds"]] == [0, 1, 2]
    assert saved["config"]["clients"] == 3 and saved["config"]["rounds"] == 2
    assert saved["inference"]["outputs"] == ["logits"]

    env = OrtEnvironment.getEnvironment()
    with OrtCheckpointState.loadCheckpoint(out / "global_checkpoint") as state:
        assert state.getIntProperty("round") == 2
    with env.createTrainingSession(out / "global_checkpoint", DIGITS / "training_model.onnx") as session:
        np.testing.assert_array_equal(session.copyParametersToBuffer(True), strategy.final_parameters)
    with np.load(small_data) as d:
        val_input, val_labels = d["val_input"], d["val_labels"]
    with env.createSession(out / "inference_model.onnx") as session, session.run({"input": val_input}) as result:
        accuracy = float((result.get(0).getValue().argmax(axis=1) == val_labels).mean())
    assert accuracy == pytest.approx(history[-1]["val_accuracy"]) == pytest.approx(saved["inference"]["val_accuracy"])


def test_default_run_reaches_the_target(tmp_path: Path) -> None:
    """``ort-cffi-federated`` with its defaults (10 clients, 20 rounds, the whole digits set)."""
    out = tmp_path / "default"
    proc = run_child(f"""
        import sys
        from ort_cffi.federated import main
        sys.exit(main(["--out", {str(out)!r}]))
    """, timeout=600)
    lines = ROUND_LINE.findall(proc.stdout)
    assert [int(r) for r, _, _ in lines] == list(range(1, 21)), proc.stdout
    accuracy = float(re.findall(r"^inference model accuracy on validation: (\d\.\d{4})$", proc.stdout, re.M)[-1])
    assert accuracy >= 0.93 and float(lines[-1][2]) == accuracy
    assert "DEPRECATED" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    for name in ("global_checkpoint", "inference_model.onnx", "history.json", "federated.png"):
        assert (out / name).is_file(), name


# --- the command's errors, and the missing extra ------------------------------------------------

def test_cli_usage_errors(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    assert federated.main(["--artifacts", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert "error: artifacts folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        federated.main(["--fraction-fit", "1.5"])
    assert exit_info.value.code == 2
    assert "must be between 0 and 1" in capsys.readouterr().err
    # more clients than training samples: refused before Ray starts
    assert federated.main(["--data", str(small_data), "--clients", "401", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --clients 401 is more than the 400 training samples of dataset '{small_data}'"), err
    assert "use at most 400 clients" in err and not (tmp_path / "out").exists()


def test_import_ort_cffi_does_not_import_flower() -> None:
    proc = run_child("""
        import sys
        import ort_cffi, ort_cffi.train, ort_cffi.federated
        print(sorted(m for m in ("flwr", "ray") if m in sys.modules))
    """)
    assert proc.stdout.strip() == "[]"


def test_missing_extra_is_a_clear_error() -> None:
    proc = run_child("""
        import sys
        sys.modules["flwr"] = None  # as if Flower were not installed
        try:
            import ort_cffi.flower
        except ImportError as exc:
            print("import:", exc)
        from ort_cffi import federated
        print("exit:", federated.main(["--rounds", "1"]))
    """)
    assert "import: ort_cffi.flower needs Flower (the flwr package)" in proc.stdout
    assert "pip install 'ort_cffi[federated]'" in proc.stdout
    assert "exit: 2" in proc.stdout
    assert "error: flwr not installed" in proc.stderr and "pip install 'ort_cffi[federated]'" in proc.stderr
