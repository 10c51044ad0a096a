"""Federated learning with Flower over ort_cffi (``ort_cffi.flower``, ``ort-cffi-federated``), on Flower's
Message API, in this process: the partitioning, the per-parameter ``ArrayRecord`` layout, a client's
training and evaluation (on buffers and on messages), the checks that refuse broken updates, the strategy
choice, the settings, the crash-safe run files and what a resume accepts, the errors that come before the
first round, and the command's errors. The simulations are in test_federated_simulation.py, the deployment
with TLS and SuperNode authentication in test_federated_deploy.py.

Flower's deprecation warnings are errors here: a ``DeprecationWarning`` raised from Flower's code fails the
test, and so does a deprecation that Flower logs (its ``DEPRECATED FEATURE`` records)."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest

from conftest import DIGITS, fixed_batch_artifacts, run_child
from ort_cffi import OrtCheckpointState, OrtEnvironment

if sys.version_info < (3, 11):  # Flower 1.42 needs Python 3.11; the extra is not installable before
    pytest.skip("the federated extra (flwr) needs Python 3.11+", allow_module_level=True)

from _flower_guard import flower_deprecations, import_flower  # noqa: E402,F401  (the fixture)

federated, flower = import_flower()
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, Metadata, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import (  # noqa: E402
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAdam,
    FedAvg,
    FedMedian,
    FedProx,
    FedTrimmedAvg,
    Krum,
)

from ort_cffi.flower.store import RunStore, new_history, run_files  # noqa: E402
from ort_cffi.flower.updates import accepted_clients, screen_replies, update_problem  # noqa: E402
from ort_cffi.trainer import SetupError  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("error::DeprecationWarning:flwr"), pytest.mark.usefixtures("flower_deprecations")]


@pytest.fixture
def shared_sessions() -> Iterator[None]:
    """Learners in this process share a cached session: released before the leak check."""
    yield
    flower.close_shared_sessions()


def loss_only_artifacts(tmp_path: Path) -> Path:
    """The digits artifacts as ONNX Runtime's defaults make them: an eval model whose only output is the loss."""
    import onnx

    folder = tmp_path / "loss_only"
    shutil.copytree(DIGITS, folder)
    model = onnx.load(str(folder / "eval_model.onnx"))
    keep = [output for output in model.graph.output if output.name != "logits"]
    del model.graph.output[:]
    model.graph.output.extend(keep)
    onnx.save(model, str(folder / "eval_model.onnx"))
    return folder


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
    dominant = [np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]
    assert np.mean(dominant) > 0.4  # a client's largest class is far more than IID's one tenth
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
        val = np.bincount(client["val"]["labels"], minlength=10) / max(1, len(client["val"]["labels"]))
        assert np.abs(train - val).sum() < 0.6


def test_partitioning_errors_and_every_client_gets_training_data() -> None:
    labels = np.repeat(np.arange(2), 5)
    with pytest.raises(ValueError, match="at least 1"):
        flower.partition(labels, 0)
    with pytest.raises(ValueError, match="partitioning must be one of iid, dirichlet, not 'skewed'"):
        flower.partition(labels, 2, partitioning="skewed")
    with pytest.raises(ValueError, match="alpha must be a positive number"):
        flower.partition(labels, 2, partitioning="dirichlet", alpha=0.0)
    rng = np.random.default_rng(0)
    dataset = {"train": {"input": rng.standard_normal((5, 64)).astype(np.float32), "labels": np.arange(5) % 2},
               "val": {"input": rng.standard_normal((3, 64)).astype(np.float32), "labels": np.arange(3) % 2}}
    for partitioning in flower.PARTITIONINGS:
        with pytest.raises(ValueError, match="6 clients cannot each get training data from 5 training samples: "
                                             "use at most 5 clients"):
            flower.partition_dataset(dataset, 6, partitioning=partitioning)
    local = flower.partition_dataset(dataset, 5)
    assert [len(c["train"]["labels"]) for c in local] == [1] * 5


# --- the model as an ArrayRecord --------------------------------------------------------------

def test_the_model_travels_as_one_named_array_per_parameter(shared_sessions: None) -> None:
    """The layout comes from the training model, in the buffer's order; splitting and joining are exact
    and each array is the checkpoint's parameter of that name."""
    session, layout = flower.shared_session(DIGITS)
    assert layout.per_parameter
    assert layout.names == ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
    assert layout.shapes == ((64, 64), (64,), (10, 64), (10,)) and layout.size == session.getParametersSize(True)
    buffer = session.copyParametersToBuffer(True)
    record = layout.to_record(buffer)
    assert list(record.keys()) == list(layout.names) and layout.problem(record) is None
    state = session.getCheckpointState()
    for name in layout.names:
        assert record[name].dtype == "float32"
        np.testing.assert_array_equal(record[name].numpy(), state.getParameter(name))
    np.testing.assert_array_equal(layout.to_buffer(record), buffer)
    with pytest.raises(flower.FederatedError, match="a buffer of 4809 values does not fit a model of 4810 parameters"):
        layout.to_record(buffer[:-1])


def _record(arrays: dict) -> ArrayRecord:
    return ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in arrays.items()})


def test_a_record_of_another_model_or_with_broken_values_is_named(shared_sessions: None) -> None:
    session, layout = flower.shared_session(DIGITS)
    good = layout.split(session.copyParametersToBuffer(True))
    cases = {
        "nan": ({**good, "fc1.bias": np.where(np.arange(64) == 3, np.nan, good["fc1.bias"]).astype(np.float32)},
                r"fc1.bias holds 1 NaN and 0 infinite value\(s\)"),
        "inf": ({**good, "fc2.bias": np.full(10, -np.inf, np.float32)}, r"fc2.bias holds 0 NaN and 10 infinite value\(s\)"),
        "size": ({**good, "fc1.weight": np.zeros((64, 32), np.float32)},
                 r"wrong size: fc1.weight has shape \[64, 32\] \(2048 values\), but the model's is \[64, 64\] \(4096 values\)"),
        "dtype": ({k: v.astype(np.float64) for k, v in good.items()},
                  "wrong dtype: fc1.weight is float64, but the model's parameters are float32"),
        "names": ({"weights": np.zeros(4810, np.float32)},
                  r"it holds arrays \['weights'\] \(1\), but the model's parameters are \['fc1.weight', 'fc1.bias', "
                  r"'fc2.weight', 'fc2.bias'\] \(4\)"),
        "order": (dict(reversed(list(good.items()))), "its arrays are in another order than the model's parameters"),
    }
    for name, (arrays, reason) in cases.items():
        problem = layout.problem(_record(arrays))
        assert problem is not None and re.fullmatch(reason, problem), (name, problem)
        with pytest.raises(flower.FederatedError, match="the update does not fit the training artifacts: "):
            layout.to_buffer(_record(arrays), "the update")
    # an Array that declares float32 but holds float64 bytes
    lying = _record(good)
    real = np.zeros((64, 64), np.float64)
    lying["fc1.weight"] = Array("float32", (64, 64), "numpy.ndarray", Array(real).data)
    assert layout.problem(lying) == "fc1.weight declares float32 [64, 64] but holds float64 [64, 64]"


def test_a_model_whose_names_cannot_be_read_travels_flat() -> None:
    layout = flower.ParameterLayout.flat(387)
    assert not layout.per_parameter and layout.names == ("parameters",)
    buffer = np.arange(387, dtype=np.float32)
    np.testing.assert_array_equal(layout.to_buffer(layout.to_record(buffer)), buffer)


# --- one client, in this process ----------------------------------------------------------------

def _learner(data: Path, partition_id: int = 0, num_partitions: int = 3) -> "flower.LocalLearner":
    return flower.load_learner(flower.ClientSettings(data=str(data)), partition_id, num_partitions)


def test_fit_and_evaluate_on_the_parameter_buffer(small_data: Path, shared_sessions: None) -> None:
    learner = _learner(small_data, 1)
    start = learner.parameters()
    before = learner.evaluate(start)
    assert before["num-examples"] == 40 and set(before) == {"num-examples", "eval-loss", "eval-accuracy"}
    trained, metrics = learner.fit(start, epochs=3, batch_size=16, lr=0.01, server_round=1)
    assert metrics["num-examples"] == 133 and set(metrics) == {"num-examples", "train-loss", "train-accuracy"}
    assert trained.shape == start.shape and not np.array_equal(trained, start)
    after = learner.evaluate(trained)
    assert after["eval-loss"] < before["eval-loss"] and after["eval-accuracy"] > before["eval-accuracy"]
    assert learner.session.getLearningRate() == pytest.approx(0.01)
    # fit starts from the parameters it is given, whatever the session held before
    same, _ = learner.fit(start, epochs=1, lr=0.0)
    np.testing.assert_array_equal(same, start)


def test_each_client_keeps_its_own_session_from_round_to_round(small_data: Path, shared_sessions: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulation's actor serves many clients: each keeps its own session (its AdamW moments and step
    count), not one shared with the other clients of the process; the oldest beyond MAX_SESSIONS are closed."""
    first, second = _learner(small_data, 0), _learner(small_data, 1)
    assert first.session is not second.session
    assert _learner(small_data, 0).session is first.session  # the next round: the same client, the same session
    trained, _ = first.fit(first.parameters(), epochs=1, batch_size=16, lr=0.01)
    assert not np.array_equal(second.parameters(), trained)  # client 1's session did not take client 0's steps
    monkeypatch.setattr(flower.client, "MAX_SESSIONS", 2)
    third = _learner(small_data, 2)  # client 1's session is the least recently used: closed
    assert second.session.isClosed() and not first.session.isClosed() and not third.session.isClosed()
    again = _learner(small_data, 1)  # client 1 starts again with a fresh session; now client 0's goes
    assert not again.session.isClosed() and again.session is not second.session and first.session.isClosed()


def test_a_clients_optimizer_state_travels_in_its_context_state(small_data: Path, shared_sessions: None) -> None:
    """A simulation's client is served by whichever Ray actor is free: its AdamW state (moments, step
    count) travels in its Context.state, so that round 2 trains the same wherever it runs. Here: round 2
    in the process that ran round 1, then again as in another process (no cached session), then in a
    process whose cached session of the client is stale (it trained an earlier round there): all three
    give the same model, to the bit; a fresh optimizer would not."""
    from flwr.app import ConfigRecord, RecordDict

    settings = flower.ClientSettings(data=str(small_data))

    def train(learner: "flower.LocalLearner", start: np.ndarray, server_round: int) -> np.ndarray:
        content = RecordDict({"arrays": learner.layout.to_record(start), "config": ConfigRecord(
            {"local-epochs": 1, "batch-size": 16, "lr": 0.01, "server-round": server_round})})
        reply = learner.train_reply(content)
        return learner.layout.to_buffer(reply["arrays"])

    state = RecordDict()
    start = flower.load_learner(settings, 0, 3, state=state).parameters()
    after_1 = train(flower.load_learner(settings, 0, 3, state=state), start, 1)
    kept = RecordDict({"ort_cffi": state["ort_cffi"]})  # the state after round 1, as Flower keeps it
    here = train(flower.load_learner(settings, 0, 3, state=state), after_1, 2)
    flower.close_shared_sessions()  # another process: nothing cached
    elsewhere = train(flower.load_learner(settings, 0, 3, state=RecordDict({"ort_cffi": kept["ort_cffi"]})), after_1, 2)
    np.testing.assert_array_equal(here, elsewhere)
    stale = flower.load_learner(settings, 0, 3, state=RecordDict({"ort_cffi": kept["ort_cffi"]}))
    train(stale, after_1, 2)  # this process's session of the client is now a round ahead of `kept`
    again = train(flower.load_learner(settings, 0, 3, state=RecordDict({"ort_cffi": kept["ort_cffi"]})), after_1, 2)
    np.testing.assert_array_equal(here, again)
    flower.close_shared_sessions()
    fresh = train(flower.load_learner(settings, 0, 3, state=RecordDict()), after_1, 2)
    assert not np.array_equal(here, fresh)  # the moments matter: a fresh optimizer takes other steps


def test_train_and_evaluate_replies_are_flower_records(small_data: Path, shared_sessions: None) -> None:
    learner = _learner(small_data, 2)
    sent = RecordDict({"arrays": learner.layout.to_record(learner.parameters()),
                       "config": ConfigRecord({"local-epochs": 1, "batch-size": 16, "lr": 0.01, "server-round": 1})})
    reply = learner.train_reply(sent)
    assert set(reply.keys()) == {"arrays", "metrics", "client"}
    assert list(reply["arrays"].keys()) == list(learner.layout.names) and learner.layout.problem(reply["arrays"]) is None
    assert reply["metrics"]["num-examples"] == 133 and reply["client"]["name"] == "client 2"
    evaluation = learner.evaluate_reply(RecordDict({"arrays": reply["arrays"], "config": ConfigRecord({})}))
    assert set(evaluation.keys()) == {"metrics", "client"} and evaluation["metrics"]["num-examples"] == 40
    # the model of other artifacts is refused naming what differs
    other = RecordDict({"arrays": _record({"fc1.weight": np.zeros((64, 64), np.float32)}), "config": ConfigRecord({})})
    with pytest.raises(flower.FederatedError, match=r"client 2: the model the server sent does not fit the training "
                                                    r"artifacts: it holds arrays \['fc1.weight'\] \(1\)"):
        learner.train_reply(other)
    bad_config = RecordDict({"arrays": reply["arrays"], "config": ConfigRecord({"lr": "fast"})})
    with pytest.raises(flower.FederatedError, match="the server's config 'lr' is 'fast', not a number"):
        learner.train_reply(bad_config)


def test_fedprox_pulls_the_local_model_toward_the_global_one(small_data: Path) -> None:
    """The proximal term, applied after each optimizer step, keeps the local model closer to the global one
    (two fresh sessions, same data, same order)."""
    env = OrtEnvironment.getEnvironment()
    paths = {k: DIGITS / v for k, v in (("c", "checkpoint"), ("t", "training_model.onnx"), ("e", "eval_model.onnx"),
                                         ("o", "optimizer_model.onnx"))}
    data = flower.local_data(flower.ClientSettings(data=str(small_data)), *flower.shared_session(DIGITS)[:1], 0, 2)[0]
    flower.close_shared_sessions()
    distances = []
    for mu in (0.0, 5.0):
        with env.createTrainingSession(paths["c"], paths["t"], paths["e"], paths["o"]) as session:
            learner = flower.LocalLearner(session, data)
            start = learner.parameters()
            trained, _ = learner.fit(start, epochs=2, batch_size=16, lr=0.01, proximal_mu=mu)
            distances.append(float(np.linalg.norm(trained - start)))
    assert distances[1] < 0.8 * distances[0]
    with pytest.raises(flower.FederatedError, match="proximal-mu must be >= 0"):
        with env.createTrainingSession(paths["c"], paths["t"], paths["e"], paths["o"]) as session:
            learner = flower.LocalLearner(session, data)
            learner.fit(learner.parameters(), proximal_mu=-1.0)


def test_learner_errors_are_clear(small_data: Path, shared_sessions: None) -> None:
    learner = _learner(small_data)
    start = learner.parameters()
    with pytest.raises(flower.FederatedError, match=r"client 0: the server sent 4820 values, but this client's model "
                                                    r"has 4810 trainable parameters"):
        learner.fit(np.zeros(4820, np.float32))
    empty = {"input": np.zeros((0, 64), np.float32), "labels": np.zeros(0, np.int64)}
    nothing = flower.LocalLearner(learner.session, {"train": empty, "val": empty}, name="client 4")
    with pytest.raises(flower.FederatedError, match="client 4: it has no training data, so it cannot fit"):
        nothing.fit(start)
    assert nothing.evaluate(start) == {"num-examples": 0.0, "eval-loss": 0.0}
    learner.close()
    with pytest.raises(flower.FederatedError, match="client 0: its training session is closed"):
        learner.fit(start)
    fresh = _learner(small_data)  # the next learner of this process gets a fresh session
    assert not fresh.session.isClosed() and fresh.session is not learner.session


def test_a_fixed_batch_model_takes_whole_batches(tmp_path: Path, small_data: Path, shared_sessions: None) -> None:
    artifacts = fixed_batch_artifacts(tmp_path, 16)
    learner = flower.load_learner(flower.ClientSettings(artifacts=str(artifacts), data=str(small_data)), 1, 3)
    assert learner.fixed_batch == 16
    start = learner.parameters()
    trained, metrics = learner.fit(start, epochs=2, batch_size=16, lr=0.01)
    assert metrics["num-examples"] == 128  # 133 training examples: 8 batches of 16
    assert learner.evaluate(trained)["num-examples"] == 32  # 40 validation examples: 2 batches of 16
    with pytest.raises(flower.FederatedError, match="client 1: the model's inputs fix the batch size at 16, but the "
                                                    "server asks for batch-size 32"):
        learner.fit(start, batch_size=32)
    with flower.GlobalModel(artifacts, small_data) as model:
        assert (model.fixed_batch, model.batch_size) == (16, 16)
        loss, accuracy = model.evaluate(model.layout.to_record(trained))
        assert np.isfinite(loss) and accuracy is not None
        names, inference_accuracy = model.export(tmp_path / "inference.onnx")
        assert names == ["logits"] and inference_accuracy == pytest.approx(accuracy)
    settings = flower.ServerSettings(artifacts=str(artifacts), data=str(small_data), clients=3, batch_size=32,
                                     out=str(tmp_path / "out"))
    with pytest.raises(SetupError, match="the model's inputs fix the batch size at 16: pass --batch-size 16"):
        flower.preflight(settings)


# --- updates the server refuses ---------------------------------------------------------------

def test_updates_that_cannot_be_averaged_are_named(shared_sessions: None) -> None:
    session, layout = flower.shared_session(DIGITS)
    arrays = layout.to_record(session.copyParametersToBuffer(True))
    metrics = {"num-examples": 100, "train-loss": 0.5}
    assert update_problem((RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)})), layout, train=True) is None
    cases = [
        (RecordDict({"arrays": arrays}), r"its reply holds MetricRecords \[\], not one named 'metrics'"),
        (RecordDict({"arrays": arrays, "metrics": MetricRecord({"train-loss": 0.5})}),
         "its 'num-examples' is None, not a finite number of examples"),
        (RecordDict({"arrays": arrays, "metrics": MetricRecord({**metrics, "num-examples": float("inf")})}),
         "its 'num-examples' is inf, not a finite number of examples"),
        (RecordDict({"arrays": arrays, "metrics": MetricRecord({**metrics, "train-loss": float("nan")})}),
         r"its metric 'train-loss' is not finite \(nan\)"),
        (RecordDict({"arrays": arrays, "metrics": MetricRecord({**metrics, "num-examples": 0})}), "it trained on 0 examples"),
        (RecordDict({"weights": arrays, "metrics": MetricRecord(metrics)}),
         r"its reply holds ArrayRecords \['weights'\], not one model named 'arrays'"),
        (RecordDict({"arrays": _record({"fc1.weight": np.zeros(3, np.float32)}), "metrics": MetricRecord(metrics)}),
         r"it holds arrays \['fc1.weight'\] \(1\), but the model's parameters are"),
    ]
    for content, reason in cases:
        problem = update_problem((content), layout, train=True)
        assert problem is not None and re.match(reason, problem), (reason, problem)
    # an evaluation reply needs no model, and may weigh nothing (a client without validation data)
    assert update_problem((RecordDict({"metrics": MetricRecord({"num-examples": 0, "eval-loss": 0.0})})),
                          layout, train=False) is None


def _message(content: RecordDict, message_id: str, src: int, dst: int, reply_to: str = "") -> Message:
    """A message as the SuperLink delivers it (with its ids set)."""
    return Message(content=content, metadata=Metadata(run_id=1, message_id=message_id, src_node_id=src, dst_node_id=dst,
                                                      reply_to_message_id=reply_to, group_id="1", created_at=0.0,
                                                      ttl=3600.0, message_type=MessageType.TRAIN))


def test_the_history_names_accepted_clients_by_node_id_beside_the_name_they_claim(shared_sessions: None) -> None:
    """A client may claim any name: the history keeps the node the server sent the message to beside it."""
    session, layout = flower.shared_session(DIGITS)
    arrays = layout.to_record(session.copyParametersToBuffer(True))
    sent = [_message(RecordDict({"arrays": arrays}), f"m{node}", 1, node) for node in (11, 22)]

    def reply(to: Message, claim: str) -> Message:
        content = RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": 10}),
                              "client": ConfigRecord({"name": claim})})
        return _message(content, f"r{to.metadata.dst_node_id}", to.metadata.dst_node_id, 1, to.metadata.message_id)

    replies = [reply(sent[0], "client 22"), reply(sent[1], "client 22")]  # node 11 poses as client 22
    accepted, rejected = screen_replies(sent, replies, layout, train=True, timeout=None, names={})
    assert len(accepted) == 2 and not rejected
    assert accepted_clients(sent, accepted) == [{"node": 11, "client": "client 22"}, {"node": 22, "client": "client 22"}]


# --- strategies ---------------------------------------------------------------------------------

def test_each_strategy_is_flowers_own() -> None:
    expected = {"fedavg": FedAvg, "fedprox": FedProx, "fedmedian": FedMedian, "trimmedavg": FedTrimmedAvg,
                "krum": Krum, "fedadam": FedAdam}
    assert set(expected) == set(flower.STRATEGIES) == set(flower.STRATEGY_HELP)
    assert federated.STRATEGY_NAMES == flower.STRATEGIES  # the command lists them without importing Flower
    for name, kind in expected.items():
        strategy = flower.build_strategy(flower.StrategySettings(name), min_fit_clients=5, expected_clients=10,
                                         fraction_fit=1.0, fraction_evaluate=0.5)
        assert type(strategy) is kind, name
        assert (strategy.min_train_nodes, strategy.min_available_nodes, strategy.fraction_evaluate) == (5, 5, 0.5)
    assert flower.build_strategy(flower.StrategySettings("fedprox", proximal_mu=0.3), min_fit_clients=1, expected_clients=2,
                                 fraction_fit=1.0, fraction_evaluate=1.0).proximal_mu == 0.3
    assert flower.build_strategy(flower.StrategySettings("krum", krum_f=2), min_fit_clients=7, expected_clients=7,
                                 fraction_fit=1.0, fraction_evaluate=1.0).num_malicious_nodes == 2
    server_dp = flower.build_strategy(flower.StrategySettings("fedmedian", dp_clipping=2.0, dp_noise=0.5),
                                      min_fit_clients=3, expected_clients=8, fraction_fit=0.5, fraction_evaluate=1.0)
    assert isinstance(server_dp, DifferentialPrivacyServerSideFixedClipping) and isinstance(server_dp.strategy, FedMedian)
    assert (server_dp.clipping_norm, server_dp.noise_multiplier, server_dp.num_sampled_clients) == (2.0, 0.5, 4)
    client_dp = flower.build_strategy(flower.StrategySettings(dp_clipping=1.0, dp_side="client"), min_fit_clients=2,
                                      expected_clients=2, fraction_fit=1.0, fraction_evaluate=1.0)
    assert isinstance(client_dp, DifferentialPrivacyClientSideFixedClipping)


def test_a_strategy_that_cannot_work_is_refused_before_the_first_round() -> None:
    refusals = [
        (flower.StrategySettings("krum", krum_f=1), 4, r"Krum tolerating 1 hostile client\(s\) needs at least 5 clients "
                                                       r"a round, but a round may aggregate as few as 4"),
        (flower.StrategySettings("trimmedavg", trim_beta=0.5), 10, r"--trim-beta must be in \[0, 0.5\), got 0.5"),
        (flower.StrategySettings("fedavg", dp_clipping=0.0), 3, "--dp-clipping must be a positive L2 norm"),
        (flower.StrategySettings("fedavg", dp_clipping=1.0, dp_side="both"), 3, "--dp-side must be one of server, client"),
        (flower.StrategySettings("sgd"), 3, "unknown strategy 'sgd': choose one of fedavg, fedprox, fedmedian"),
    ]
    for settings, sampled, message in refusals:
        with pytest.raises(flower.StrategyError, match=message):
            flower.build_strategy(settings, min_fit_clients=sampled, expected_clients=sampled, fraction_fit=1.0,
                                  fraction_evaluate=1.0)


def test_fedadam_state_survives_a_restart() -> None:
    from ort_cffi.flower.strategies import restore_strategy_state, strategy_state

    settings = flower.StrategySettings("fedadam")
    first = flower.build_strategy(settings, min_fit_clients=2, expected_clients=2, fraction_fit=1.0, fraction_evaluate=0.0)
    assert strategy_state(first) == {}
    first.m_t = {"w": np.ones(3)}
    first.v_t = {"w": np.full(3, 2.0)}
    saved = strategy_state(first)
    assert set(saved) == {"m_t/w", "v_t/w"}
    second = flower.build_strategy(settings, min_fit_clients=2, expected_clients=2, fraction_fit=1.0, fraction_evaluate=0.0)
    restore_strategy_state(second, saved)
    np.testing.assert_array_equal(second.m_t["w"], np.ones(3))
    np.testing.assert_array_equal(second.v_t["w"], np.full(3, 2.0))


# --- settings -----------------------------------------------------------------------------------

def test_settings_come_from_the_run_config() -> None:
    client = flower.ClientSettings().with_run_config({"partitioning": "dirichlet", "dirichlet-alpha": 2, "seed": 5})
    assert (client.partitioning, client.alpha, client.seed) == ("dirichlet", 2.0, 5)
    server = flower.ServerSettings().with_run_config(
        {"num-server-rounds": 3, "lr": 0.02, "out": "x", "plot": "false", "dp-clipping": 1, "min-fit-clients": 4,
         "strategy": "krum", "resume": True})
    assert (server.rounds, server.lr, server.out, server.plot, server.dp_clipping, server.min_fit_clients) == (3, 0.02, "x", False, 1.0, 4)
    assert server.strategy == "krum" and server.resume is True
    assert server.lr_for(1) == pytest.approx(0.02) and server.lr_for(3) == pytest.approx(0.002)
    with pytest.raises(ValueError, match="run-config key 'num-server-rounds' must be int, not 'many'"):
        flower.ServerSettings().with_run_config({"num-server-rounds": "many"})
    with pytest.raises(ValueError, match="run-config key 'plot' must be true or false, not 'perhaps'"):
        flower.ServerSettings().with_run_config({"plot": "perhaps"})
    assert flower.ServerSettings(clients=10).min_fit == 5 and flower.ServerSettings(clients=3).min_fit == 2
    assert flower.ServerSettings(clients=10, fraction_fit=0.5).min_fit == 3
    with pytest.raises(SetupError, match="min-fit-clients 4 must be between 1 and the 3 clients a round samples"):
        flower.ServerSettings(clients=3, min_fit_clients=4).check()
    assert type(flower.clientapp).__name__ == "ClientApp" and type(flower.serverapp).__name__ == "ServerApp"


# --- the run's files, crash-safe, and what a resume accepts --------------------------------------

def test_run_files_commit_rounds_and_a_resume_continues_from_the_checkpoint(tmp_path: Path) -> None:
    settings = flower.ServerSettings(clients=2, rounds=4, out=str(tmp_path))
    store = RunStore(tmp_path)
    assert store.resume_point(settings.history_config()) is None  # nothing to resume yet
    with flower.GlobalModel(DIGITS) as model:
        doc = new_history(settings.history_config(), layout={}, stateful=True)
        start = model.parameters()
        for server_round in range(3):
            doc["rounds"].append({"round": server_round, "val_loss": 1.0, "seconds": float(server_round)})
            model.session.copyBufferToParameters(start + server_round, True)
            store.commit(model, server_round, doc, {"m_t/w": np.full(2, float(server_round))})
        assert sorted(p.name for p in store.state_dir.iterdir()) == ["round-2.npz"]
        # A crash after round 3's state and history were written, before its checkpoint: the checkpoint
        # (round 2) decides, and the newer records are cut back.
        doc["rounds"].append({"round": 3, "val_loss": 1.0, "seconds": 3.0})
        from ort_cffi.flower.store import save_arrays
        save_arrays(store.state_dir / "round-3.npz", **{"m_t/w": np.full(2, 3.0)})
        store.write_history(doc)
    done, records, state, saved = store.resume_point(settings.history_config())
    assert done == 2 and [r["round"] for r in records] == [0, 1, 2]
    np.testing.assert_array_equal(state["m_t/w"], [2.0, 2.0])
    with flower.GlobalModel(DIGITS, checkpoint=store.checkpoint) as resumed:
        np.testing.assert_array_equal(resumed.parameters(), start + 2)
    assert not list(tmp_path.glob(".*.tmp"))
    # another schedule cannot continue this run; and a fresh run does not overwrite it
    with pytest.raises(flower.FederatedError, match=r"cannot resume the run in .* with other settings \(rounds 4 -> 6; "
                                                    r"lr 0.01 -> 0.1\)"):
        store.resume_point(flower.ServerSettings(clients=2, rounds=6, lr=0.1, out=str(tmp_path)).history_config())
    with pytest.raises(flower.FederatedError, match=r"holds a run that stopped after round 2 of 4: continue it with --resume"):
        store.check_fresh()
    with OrtCheckpointState.loadCheckpoint(store.checkpoint) as checkpoint:
        assert checkpoint.getIntProperty("round") == 2


def test_a_resume_refuses_a_dataset_or_artifacts_changed_in_place(tmp_path: Path, small_data: Path) -> None:
    """The history records the sha256 of the dataset and of the artifacts' files: the same paths with other
    content are refused, naming what changed. A history written before they were recorded resumes."""
    artifacts, data, out = tmp_path / "artifacts", tmp_path / "data.npz", tmp_path / "out"
    shutil.copytree(DIGITS, artifacts)
    shutil.copy(small_data, data)
    settings = flower.ServerSettings(artifacts=str(artifacts), data=str(data), clients=2, rounds=4, out=str(out))
    files = run_files(artifacts, data)
    assert set(files) == {"data", "checkpoint", "train", "eval", "optimizer"}
    store = RunStore(out)
    with flower.GlobalModel(artifacts, data) as model:
        doc = new_history(settings.history_config(), layout={}, stateful=False, files=files)
        for server_round in range(2):
            doc["rounds"].append({"round": server_round, "val_loss": 1.0, "seconds": float(server_round)})
            store.commit(model, server_round, doc, {})
    assert store.resume_point(settings.history_config(), run_files(artifacts, data))[0] == 1
    with np.load(data) as saved:  # the dataset rewritten in place: the same path, other labels
        arrays = {key: saved[key] for key in saved.files}
    arrays["train_labels"] = arrays["train_labels"][::-1].copy()
    np.savez(data, **arrays)
    with pytest.raises(flower.FederatedError, match=r"cannot resume the run in \S+ with files changed since it started "
                                                    r"\(the dataset: sha256 [0-9a-f]{12}\.\.\. -> [0-9a-f]{12}\.\.\.\): "):
        store.resume_point(settings.history_config(), run_files(artifacts, data))
    with open(artifacts / "eval_model.onnx", "ab") as model_file:
        model_file.write(b"\0")
    with pytest.raises(SetupError, match=r"with files changed since it started \(the dataset: sha256 .*; the eval model: "
                                         r"sha256 [0-9a-f]{12}\.\.\. -> [0-9a-f]{12}\.\.\.\)"):
        flower.preflight(flower.ServerSettings(**{**settings.history_config(), "out": str(out), "resume": True}))
    old = store.read_history()
    assert old is not None
    del old["sha256"]  # as ort_cffi wrote it before: the paths alone are compared
    store.write_history(old)
    assert store.resume_point(settings.history_config(), run_files(artifacts, data))[0] == 1


# --- before the first round ---------------------------------------------------------------------

def test_an_eval_model_with_nothing_to_export_fails_before_the_first_round(tmp_path: Path) -> None:
    """Artifacts made with ONNX Runtime's defaults (the eval model outputs only the loss) trained every
    round and then failed at the export, with no plot: now they fail before Flower starts, saying what to
    do, and --export-outputs names an output the eval graph computes."""
    artifacts = loss_only_artifacts(tmp_path)
    out = tmp_path / "out"
    settings = flower.ServerSettings(artifacts=str(artifacts), clients=2, rounds=1, out=str(out))
    with pytest.raises(SetupError, match=r"the eval model's only output is the loss \('onnx::loss::2'\), so there is "
                                         r"nothing to export for inference after the last round: name the inference "
                                         r"model's outputs with --export-outputs"):
        flower.preflight(settings)
    assert not out.exists()  # nothing written, no Flower process started
    flower.preflight(flower.ServerSettings(artifacts=str(artifacts), clients=2, rounds=1, out=str(out),
                                           export_outputs="logits"))
    with pytest.raises(SetupError, match="cannot export nowhere for inference"):
        flower.preflight(flower.ServerSettings(artifacts=str(artifacts), clients=2, rounds=1, out=str(out),
                                               export_outputs="nowhere"))


@pytest.mark.needs_ray  # ort-cffi-federated checks for Ray before anything else
def test_cli_errors_come_before_flower_starts(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    assert federated.main(["--artifacts", str(tmp_path / "nowhere"), "--out", str(tmp_path / "a")]) == 2
    assert "error: artifacts folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        federated.main(["--fraction-fit", "1.5"])
    assert exit_info.value.code == 2 and "must be between 0 and 1" in capsys.readouterr().err
    assert federated.main(["--data", str(small_data), "--clients", "401", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --clients {401} is more than the 400 training samples of dataset '{small_data}'"), err
    assert federated.main(["--strategy", "krum", "--clients", "4", "--out", str(tmp_path / "c")]) == 2
    assert "Krum tolerating 1 hostile client(s) needs at least 5 clients a round" in capsys.readouterr().err
    assert federated.main(["--artifacts", str(loss_only_artifacts(tmp_path)), "--rounds", "1", "--out", str(tmp_path / "d")]) == 2
    assert "nothing to export for inference after the last round" in capsys.readouterr().err
    for name in "abcd":
        assert not (tmp_path / name / "logs").exists(), name  # no SuperLink was started


def _unfinished_run(out: Path, rounds: int = 4) -> "flower.ServerSettings":
    """A run of the command's defaults in ``out`` that stopped after round 1 of ``rounds`` (as if killed)."""
    settings = flower.ServerSettings(artifacts=str(DIGITS.resolve()), clients=10, rounds=rounds, out=str(out))
    store = RunStore(out)
    with flower.GlobalModel(DIGITS) as model:
        doc = new_history(settings.history_config(), layout={}, stateful=False)
        for server_round in range(2):
            doc["rounds"].append({"round": server_round, "val_loss": 1.0, "seconds": float(server_round)})
            store.commit(model, server_round, doc, {})
    return settings


@pytest.mark.needs_ray  # ort-cffi-federated checks for Ray before anything else
def test_what_the_output_folder_refuses_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--out that is a file, an unfinished run in --out, a resume with other settings, a negative --seed:
    exit 2 with one line, before Flower starts (so no pointer to Flower's log)."""
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    assert federated.main(["--out", str(afile)]) == 2  # was a FileExistsError traceback
    assert capsys.readouterr().err == f"error: --out {str(afile)!r} is a file, not a folder\n"
    out = tmp_path / "run"
    _unfinished_run(out)
    assert federated.main(["--out", str(out)]) == 2  # was exit 1, with "(Flower's log: ...)"
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: \S+ holds a run that stopped after round 1 of 4: continue it with --resume [^\n]*\n", err), err
    assert federated.main(["--out", str(out), "--resume", "--rounds", "6"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: cannot resume the run in \S+ with other settings \(rounds 4 -> 6\)[^\n]*\n", err), err
    assert not (out / "logs").exists()  # Flower never started
    with pytest.raises(SystemExit) as exit_info:
        federated.main(["--seed", "-1"])  # was accepted, and numpy's default_rng failed later in every client
    assert exit_info.value.code == 2 and "argument --seed: must not be negative, got -1" in capsys.readouterr().err
    with pytest.raises(SetupError, match="seed must not be negative, got -1"):
        flower.ServerSettings(seed=-1).check()


@pytest.mark.needs_ray  # ort-cffi-federated checks for Ray before anything else
def test_a_run_in_the_output_folder_is_replaced_only_with_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run folder is never overwritten: a new run over a completed run is refused (it was silently
    replaced), saying --overwrite; over an unfinished one, saying --resume; --overwrite replaces either,
    and the new run then starts without the old one's inference model, plot or state."""
    out = tmp_path / "run"
    settings = _unfinished_run(out)
    store = RunStore(out)
    doc = store.read_history()
    assert doc is not None
    store.write_history({**doc, "status": "completed"})
    (out / "inference_model.onnx").write_bytes(b"old")
    (out / "federated.png").write_bytes(b"old")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(SetupError, match=r"holds a completed run \(4 rounds\): a run is never overwritten unless asked\. "
                                         r"To run again in this folder, replacing it, pass --overwrite"):
        flower.preflight(settings)
    assert federated.main(["--out", str(out), "--rounds", "4"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"error: {re.escape(str(out))} holds a completed run \(4 rounds\): [^\n]*pass --overwrite[^\n]*\n", err), err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # untouched
    with pytest.raises(SystemExit) as exit_info:
        federated.main(["--out", str(out), "--resume", "--overwrite"])
    assert exit_info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SetupError, match="resume continues the run in the output folder, overwrite replaces it: not both"):
        flower.ServerSettings(resume=True, overwrite=True).check()
    overwrite = flower.ServerSettings(**{**settings.history_config(), "out": str(out), "overwrite": True})
    flower.preflight(overwrite)  # accepted
    store.write_history({**doc, "status": "running"})  # unfinished: the refusal points at --resume
    with pytest.raises(SetupError, match=r"stopped after round 1 of 4: continue it with --resume .*--overwrite would discard it"):
        flower.preflight(settings)
    flower.preflight(overwrite)
    store.clear()  # what a new run's server does first
    assert not (out / "inference_model.onnx").exists() and not (out / "federated.png").exists()


@pytest.mark.needs_ray  # ort-cffi-federated checks for Ray before anything else
def test_a_failed_preflight_leaves_the_file_system_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The checks before Flower starts made --out (and its parents) first: when a later one failed, the
    empty folders stayed behind. Now they are removed again; a folder that existed stays, as it was."""
    artifacts = loss_only_artifacts(tmp_path)
    new = tmp_path / "new" / "deeper" / "run"
    with pytest.raises(SetupError, match="nothing to export for inference"):
        flower.preflight(flower.ServerSettings(artifacts=str(artifacts), clients=2, rounds=1, out=str(new)))
    assert not (tmp_path / "new").exists()
    assert federated.main(["--artifacts", str(artifacts), "--rounds", "1", "--out", str(new)]) == 2
    assert "nothing to export for inference" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    assert federated.main(["--artifacts", str(artifacts), "--rounds", "1", "--out", str(existing / "a" / "b")]) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name != "loss_only"] == ["existing"] and not list(existing.iterdir())


def test_flower_processes_keep_the_users_telemetry_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Telemetry and the update check are off unless the user has set them (as the guide says)."""
    from ort_cffi.flower.deploy import flower_env

    monkeypatch.delenv("FLWR_TELEMETRY_ENABLED", raising=False)
    monkeypatch.delenv("FLWR_DISABLE_UPDATE_CHECK", raising=False)
    env = flower_env(tmp_path)
    assert (env["FLWR_TELEMETRY_ENABLED"], env["FLWR_DISABLE_UPDATE_CHECK"], env["FLWR_HOME"]) == ("0", "1", str(tmp_path))
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "1")
    monkeypatch.setenv("FLWR_DISABLE_UPDATE_CHECK", "0")
    env = flower_env(tmp_path)
    assert (env["FLWR_TELEMETRY_ENABLED"], env["FLWR_DISABLE_UPDATE_CHECK"]) == ("1", "0")


def test_import_ort_cffi_does_not_import_flower() -> None:
    proc = run_child("""
        import sys
        import ort_cffi, ort_cffi.cli.train, ort_cffi.cli.federated
        print(sorted(m for m in ("flwr", "ray") if m in sys.modules))
    """)
    assert proc.stdout.strip() == "[]"


@pytest.mark.needs_ray  # ort-cffi-federated checks for Ray before anything else
def test_missing_extra_is_a_clear_error() -> None:
    proc = run_child("""
        import sys
        sys.modules["flwr"] = None  # as if Flower were not installed
        try:
            import ort_cffi.flower
        except ImportError as exc:
            print("import:", exc)
        from ort_cffi.cli import federated
        print("exit:", federated.main(["--rounds", "1"]))
    """)
    assert "import: ort_cffi.flower needs Flower (the flwr package)" in proc.stdout
    assert "pip install 'flwr[simulation]>=1.42'" in proc.stdout
    assert "exit: 2" in proc.stdout
    assert "error: flwr not installed" in proc.stderr and "pip install 'flwr[simulation]>=1.42'" in proc.stderr


def test_no_deprecated_flower_api_in_ort_cffi() -> None:
    """Flower's legacy API, which 1.42 deprecates or keeps only for compatibility (NumPyClient and
    client_fn, the ServerAppComponents/ServerConfig server, flwr.server.strategy, start_*, the simulation's
    Python entry point), is used nowhere in the package: only flwr.app, flwr.clientapp, flwr.serverapp."""
    import re

    package = Path(flower.__file__).parent.parent
    legacy = re.compile(r"NumPyClient|ServerAppComponents|ServerConfig|flwr\.server\.strategy|flwr\.client\b|"
                        r"flwr\.simulation|flwr\.compat|start_simulation|start_client|start_server|\brun_simulation\(|to_client\(|"
                        r"client_fn|flwr\.common\b")
    for path in sorted(package.rglob("*.py")):
        found = legacy.findall(path.read_text())
        assert not found, f"{path.relative_to(package)} uses {found}"


def test_a_batchnorm_client_reestimates_the_statistics_before_it_evaluates(tmp_path: Path) -> None:
    """The server sends the trainable parameters only: the client's running statistics are its own, and it
    re-estimates them over its training data for the model it was sent (test_batchnorm.py: the numpy side)."""
    from test_batchnorm import batch_statistics, batches_of, two_batchnorms

    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts, read_manifest

    model, values = two_batchnorms()
    made = generate_artifacts(model, artifact_directory=tmp_path / "artifacts", loss_input_names=["logits"],
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    train, val = batches_of(40, 40, seed=5)[0], batches_of(16, 16, seed=6)[0]
    data = {"train": train, "val": val}
    with OrtEnvironment.getEnvironment().createTrainingSession(
            str(made.checkpoint), str(made.training_model), str(made.eval_model), str(made.optimizer_model)) as session:
        learner = flower.LocalLearner(session, data, batchnorm=read_manifest(made.folder)["batchnorm_statistics"])
        metrics = learner.evaluate(learner.parameters(), batch_size=16)
        state = session.getCheckpointState()
        found = {name: state.getParameter(name) for name in ("m1", "v1", "m2", "v2")}
    assert metrics["num-examples"] == 16 and metrics["eval-loss"] > 0
    per_batch = [batch_statistics(data["train"]["X"][i:i + 16], values) for i in range(0, 40, 16)]
    for layer, (mean, var) in enumerate((("m1", "v1"), ("m2", "v2"))):
        np.testing.assert_allclose(found[mean], np.mean([b[layer][0] for b in per_batch], axis=0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(found[var], np.mean([b[layer][1] for b in per_batch], axis=0), rtol=1e-5, atol=1e-6)
