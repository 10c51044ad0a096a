"""Export ``tests/data/embedding_bag_dynamo.onnx``: a small ``nn.EmbeddingBag`` classifier written by torch's
default exporter (``torch.onnx.export(..., dynamo=True)``), which writes the bag reduction as a Loop that
appends each bag's row to a sequence (SequenceEmpty, SequenceInsert) and a ConcatFromSequence after it: the
model the gradient rules of the sequence operators are checked on (tests/builder/test_sequence_training.py).

Run once, with the environment that has torch (never a dependency of ort_cffi; scripts/export_zoo.py says how
that environment is made):

    /work/zoo-venv/bin/python scripts/export_embedding_bag.py --out tests/data

It writes the model (random weights from a seed, the number of ids ``N`` and of bags ``B`` dynamic) and
``embedding_bag_dynamo.json`` beside it, which records the exporter, its versions, the model's sha256 and the
operators it holds, as tests/zoo/zoo.json records the zoo's models. Like the zoo's ``*_dynamo`` models, each
node's ``pkg.torch.onnx.stack_trace`` metadata is dropped (it names local paths).
"""
from __future__ import annotations

import argparse
import collections
import copy
import hashlib
import json
import warnings
from pathlib import Path

VOCABULARY, WIDTH, CLASSES = 12, 4, 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import onnx
    import torch

    torch.manual_seed(0)

    class BagClassifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(VOCABULARY, WIDTH, mode="mean")
            self.fc = torch.nn.Linear(WIDTH, CLASSES)

        def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
            return self.fc(self.bag(ids, offsets))

    model = BagClassifier().eval()
    ids = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 7, 11])
    offsets = torch.tensor([0, 4, 7])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "embedding_bag_dynamo.onnx"
    dynamic = ({0: torch.export.Dim("N")}, {0: torch.export.Dim("B")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (ids, offsets), input_names=["ids", "offsets"], output_names=["logits"],
                                    dynamo=True, dynamic_shapes=dynamic, verbose=False)
    program.save(str(path))
    exported = onnx.load(str(path))
    for node in exported.graph.node:
        kept = [copy.deepcopy(p) for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    onnx.save(exported, str(path))
    operators: collections.Counter = collections.Counter()
    graphs = [exported.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            operators[node.op_type] += 1
            for attribute in node.attribute:
                graphs.extend(([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs))
    opset = {o.domain: o.version for o in exported.opset_import}.get("")
    record = {
        "file": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "architecture": f"EmbeddingBag({VOCABULARY}, {WIDTH}, mode='mean') -> Linear({WIDTH}, {CLASSES}) ('fc')",
        "exporter": {"tool": "torch.onnx.export", "torch": torch.__version__, "dynamo": True,
                     "opset_version": f"the exporter's default ({opset})",
                     "dynamic_shapes": ["ids: Dim('N')", "offsets: Dim('B')"], "module_mode": "eval",
                     "metadata": "pkg.torch.onnx.stack_trace removed from every node (it names local paths)"},
        "example": {"ids": ids.tolist(), "offsets": offsets.tolist(),
                    "logits": model(ids, offsets).detach().numpy().round(6).tolist()},
        "operators (subgraphs included)": dict(sorted(operators.items())),
    }
    (args.out / "embedding_bag_dynamo.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
