"""What the server accepts from a round: each reply is screened before any strategy sees it.

A reply is left out of the round, and named in the history with the reason, when the client failed
(an error reply: it raised, its node went offline, ...), when no reply came before the round's deadline,
or when its update is not a model the server can average: not exactly one ``ArrayRecord`` and one
``MetricRecord``, arrays of other names, dtypes or shapes, NaN or infinite values, or a ``num-examples``
weight that is not a positive finite number. Only what passes reaches the strategy, so a broken or
hostile update is never averaged in, whatever the strategy.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from flwr.app import Message, RecordDict

from ort_cffi.flower.model import ParameterLayout

WEIGHT_KEY = "num-examples"  # the MetricRecord key Flower's strategies weight by (their default)
ARRAYS_KEY, METRICS_KEY = "arrays", "metrics"  # the records a reply carries (Flower's strategies check them)


@dataclass(frozen=True)
class Rejection:
    """A client left out of a round: its node, its name when known, and why."""

    node: int
    client: Optional[str]
    reason: str

    def to_json(self) -> Dict[str, object]:
        """The history's record of it."""
        return {"node": self.node, "client": self.client, "reason": self.reason}


def client_name(message: Message) -> Optional[str]:
    """The name a reply gives its client (its ``client`` ConfigRecord), if any: the client's own claim,
    which any client can make (`reply_node` is the node the reply came from)."""
    if not message.has_content():
        return None
    record = message.content.config_records.get("client")
    name = record.get("name") if record is not None else None
    return str(name) if name is not None else None


def sent_to(sent: Iterable[Message]) -> Dict[str, int]:
    """The node each of the server's messages went to, by message id."""
    return {m.metadata.message_id: m.metadata.dst_node_id for m in sent}


def reply_node(reply: Message, nodes: Mapping[str, int]) -> int:
    """The Flower node id of the client a reply answers for: the node the server sent the message it
    answers to (``nodes``, `sent_to`). The reply's own source may be the SuperLink itself (an error
    reply for a node that went offline)."""
    return nodes.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)


def accepted_clients(sent: Iterable[Message], accepted: Iterable[Message]) -> List[Dict[str, object]]:
    """The history's record of a round's accepted replies: each one's Flower node id (`reply_node`: the
    SuperLink's identity of the node, not the client's word) and the name the reply claims (`client_name`)."""
    nodes = sent_to(sent)
    return [{"node": reply_node(m, nodes), "client": client_name(m)} for m in accepted]


def error_text(reason: Optional[str], limit: int = 400) -> str:
    """A client's error reason, shortened to what it raised: Flower's reason holds the whole traceback,
    whose last ``SomeError: message`` line is the exception the client raised."""
    text = (reason or "").strip()
    raised = [m for m in re.finditer(r"^([\w.]*(?:Error|Exception|Exit)): (.+)$", text, re.M)
              if not m.group(1).endswith("ClientAppException")]
    if raised:
        text = f"{raised[-1].group(1).rsplit('.', 1)[-1]}: {raised[-1].group(2).strip()}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def update_problem(content: RecordDict, layout: ParameterLayout, *, train: bool) -> Optional[str]:
    """Why the content of a (non-error) reply cannot be aggregated, or None. Train replies need exactly one
    model of the layout and one MetricRecord with a valid weight; evaluate replies only the MetricRecord."""
    metrics = list(content.metric_records.values())
    if list(content.metric_records.keys()) != [METRICS_KEY]:
        return f"its reply holds MetricRecords {list(content.metric_records.keys())}, not one named {METRICS_KEY!r}"
    weight = metrics[0].get(WEIGHT_KEY)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        return f"its {WEIGHT_KEY!r} is {weight!r}, not a finite number of examples"
    for key, value in metrics[0].items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            return f"its metric {key!r} is not finite ({value!r})"
    if not train:
        return None
    if weight <= 0:
        return f"it trained on {weight!r} examples"
    if list(content.array_records.keys()) != [ARRAYS_KEY]:
        return f"its reply holds ArrayRecords {list(content.array_records.keys())}, not one model named {ARRAYS_KEY!r}"
    return layout.problem(content.array_records[ARRAYS_KEY])


def screen_replies(sent: Iterable[Message], replies: Iterable[Message], layout: ParameterLayout, *,
                   train: bool, timeout: Optional[float], names: Dict[int, str]) -> Tuple[List[Message], List[Rejection]]:
    """Split a round's replies into those a strategy may aggregate and the rejected ones (error replies,
    unusable updates, and the nodes that did not reply before ``timeout``). ``names`` maps node ids to
    client names; it is updated from the replies that name their client."""
    accepted: List[Message] = []
    rejected: List[Rejection] = []
    sent = list(sent)
    nodes = sent_to(sent)
    answered = set()
    for message in replies:
        answered.add(message.metadata.reply_to_message_id)
        node = reply_node(message, nodes)
        name = client_name(message)
        if name is not None:
            names[node] = name
        if message.has_error():
            rejected.append(Rejection(node, names.get(node), f"failed: {error_text(message.error.reason)}"))
            continue
        problem = update_problem(message.content, layout, train=train)
        if problem is not None:
            rejected.append(Rejection(node, names.get(node), f"update rejected: {problem}"))
            continue
        accepted.append(message)
    # Replies that weigh nothing (a client without validation data) are averaged with nothing either.
    weighted, odd = _same_metric_keys([m for m in accepted if _weight(m) > 0], nodes, names)
    accepted = weighted + [m for m in accepted if _weight(m) <= 0]
    rejected.extend(odd)
    for message in sent:
        node = message.metadata.dst_node_id
        if message.metadata.message_id not in answered:
            waited = f" within {timeout:g} s" if timeout is not None else ""
            rejected.append(Rejection(node, names.get(node), f"no reply{waited}"))
    # A fixed order, not the order the replies arrived in: a strategy's sums in floating point, and so the
    # global model, depend on it (a run with a fixed seed repeats itself).
    accepted.sort(key=lambda m: reply_order(names.get(reply_node(m, nodes)), reply_node(m, nodes)))
    rejected.sort(key=lambda r: reply_order(r.client, r.node))
    return accepted, rejected


def reply_order(name: Optional[str], node: int) -> Tuple[object, ...]:
    """The sort key of a client's reply: by the name it gives (numbers in it by value: ``client 2`` before
    ``client 10``), then by node id; replies without a name last."""
    parts = tuple((int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", name or "") if part)
    return (name is None, parts, node)


def _weight(message: Message) -> float:
    value = message.content[METRICS_KEY].get(WEIGHT_KEY)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _same_metric_keys(accepted: List[Message], nodes: Mapping[str, int],
                      names: Dict[int, str]) -> Tuple[List[Message], List[Rejection]]:
    """Flower's strategies refuse a whole round whose replies' metrics differ in their keys: keep the
    replies with the most common key set, reject the others."""
    keysets = [tuple(sorted(m.content[METRICS_KEY].keys())) for m in accepted]
    if len(set(keysets)) <= 1:
        return accepted, []
    common = max(set(keysets), key=keysets.count)
    kept = [m for m, keys in zip(accepted, keysets) if keys == common]
    odd = [Rejection(reply_node(m, nodes), names.get(reply_node(m, nodes)),
                     f"update rejected: its metrics are {list(keys)}, the other clients' {list(common)}")
           for m, keys in zip(accepted, keysets) if keys != common]
    return kept, odd
