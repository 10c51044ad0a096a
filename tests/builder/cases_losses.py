"""Finite-difference cases of the loss family: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with
every reduction, class weights, ignore_index and extra (spatial) axes."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
from gradcheck import Case, case
from onnx import helper

rng = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


CASES: Dict[str, List[Case]] = {
    "SoftmaxCrossEntropyLoss": [
        case("softmax_cross_entropy", "SoftmaxCrossEntropyLoss",
             [("scores", f32(5, 4)), ("labels", np.array([0, 3, 1, 2, 3], dtype=np.int64))], ["scores"], outputs=2,
             reduction="mean")],
}
for c in CASES["SoftmaxCrossEntropyLoss"]:
    c.outputs = ["y0"]  # the loss; the log-probabilities are read by the gradient, not checked


def labels(*shape: int, classes: int = 4, ignored: Optional[int] = None) -> np.ndarray:
    values = rng.integers(0, classes, shape).astype(np.int64)
    if ignored is not None:
        values.reshape(-1)[::3] = ignored  # every third element ignored
    return values


def loss_case(op: str, name: str, scores_shape: Tuple[int, ...], reduction: str, weighted: bool = False,
              ignore_index: Optional[int] = None) -> Case:
    target_shape = (scores_shape[0],) + scores_shape[2:]
    inputs = [("scores", f32(*scores_shape)), ("labels", labels(*target_shape, classes=scores_shape[1],
                                                                 ignored=ignore_index))]
    if weighted:
        inputs.append(("weight", rng.uniform(0.2, 2.0, scores_shape[1]).astype(np.float32)))
    attributes = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = ignore_index
    made = case(name, op, inputs, ["scores"], outputs=2 if op == "SoftmaxCrossEntropyLoss" else 1, **attributes)
    made.outputs = ["y0"]  # the loss; the log-probabilities are read by the gradient, not checked
    return made


for op, short in (("SoftmaxCrossEntropyLoss", "softmax_ce"), ("NegativeLogLikelihoodLoss", "nll")):
    found = CASES.setdefault(op, [])
    found += [loss_case(op, f"{short}_sum", (5, 4), "sum"),
              loss_case(op, f"{short}_none", (5, 4), "none"),
              loss_case(op, f"{short}_mean_weighted", (5, 4), "mean", weighted=True),
              loss_case(op, f"{short}_mean_ignored", (6, 4), "mean", ignore_index=-100),
              loss_case(op, f"{short}_sum_weighted_ignored", (6, 3), "sum", weighted=True, ignore_index=1),
              loss_case(op, f"{short}_spatial_mean", (2, 4, 3, 2), "mean", weighted=True, ignore_index=2),
              loss_case(op, f"{short}_spatial_none", (2, 3, 5), "none")]
    if op == "SoftmaxCrossEntropyLoss":  # a model's own loss declaring the loss alone (transformers' with labels)
        loss_only = loss_case(op, f"{short}_loss_only", (5, 4), "mean", weighted=True, ignore_index=1)
        del loss_only.nodes[0].output[1:]
        found.append(loss_only)
    symbolic = loss_case(op, f"{short}_symbolic_mean", (5, 4), "mean", ignore_index=0)
    symbolic.data["scores"] = symbolic.params.pop("scores")
    symbolic.params["w"] = rng.uniform(0.5, 1.5, (4,)).astype(np.float32)
    symbolic.nodes.insert(0, helper.make_node("Mul", ["scores", "w"], ["scaled"]))
    symbolic.nodes[1].input[0] = "scaled"
    symbolic.symbolic_batch = True
    found.append(symbolic)
nll = CASES["NegativeLogLikelihoodLoss"]
nll.append(loss_case("NegativeLogLikelihoodLoss", "nll_mean", (5, 4), "mean"))


def log_prob_case(name: str, declared: Tuple[bool, bool], checked: List[str], scores_shape: Tuple[int, ...] = (5, 4),
                  **attributes: object) -> Case:
    """SoftmaxCrossEntropyLoss declaring the outputs ``declared`` marks (loss, log-probabilities; the loss is
    not optional), the loss of the case reading ``checked`` of them: the gradient flows into the loss, the
    log-probabilities, or both (the loss only: the cases above)."""
    made = loss_case("SoftmaxCrossEntropyLoss", name, scores_shape, str(attributes.pop("reduction", "mean")),
                     weighted=bool(attributes.pop("weighted", False)),
                     ignore_index=attributes.pop("ignore_index", None))  # type: ignore[arg-type]
    node = made.nodes[0]
    node.output[0] = "y0" if declared[0] else ""
    node.output[1] = "y1" if declared[1] else ""
    made.outputs = list(checked)
    return made


CASES["SoftmaxCrossEntropyLoss"] += [
    log_prob_case("softmax_ce_read_log_prob_only", (True, True), ["y1"]),
    log_prob_case("softmax_ce_both_read_log_prob", (True, True), ["y1"], (2, 4, 3), reduction="sum", ignore_index=1),
    log_prob_case("softmax_ce_both_read_both", (True, True), ["y0", "y1"], (6, 3), weighted=True, ignore_index=2),
]


def nll_after_log_softmax(name: str, reduction: str, ignore_index: Optional[int]) -> Case:
    """torch's cross-entropy as its exporters write it: LogSoftmax, then NegativeLogLikelihoodLoss (one
    output, the loss), the log-probabilities read by the case's loss as well."""
    made = loss_case("NegativeLogLikelihoodLoss", name, (4, 5), reduction, weighted=True, ignore_index=ignore_index)
    made.nodes[0].input[0] = "log_prob"
    made.nodes.insert(0, helper.make_node("LogSoftmax", ["scores"], ["log_prob"], axis=1))
    made.outputs = ["y0", "log_prob"]
    return made


nll += [nll_after_log_softmax("nll_after_log_softmax_mean", "mean", 3),
        nll_after_log_softmax("nll_after_log_softmax_none", "none", None)]
