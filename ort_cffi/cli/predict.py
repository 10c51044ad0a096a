"""``ort-cffi-predict MODEL.onnx INPUT...``: name the class of each input with an inference model that
``ort-cffi-train`` exported, preparing the inputs as its metadata says (``ort_cffi.trainer.predict``); this
module is the command line: argparse and exit codes."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ort_cffi import OrtException, __version__
from ort_cffi.trainer import SetupError
from ort_cffi.trainer.predict import predict

DESCRIPTION = """\
Predict with an inference model that ort-cffi-train exported (its inference_model.onnx): the
model's metadata says how its training data was prepared (image size and scaling, the CSV's
columns and standardisation, the vocabulary or tokenizer) and names its classes; each input
is prepared the same way. One line per input: the input, the class, its probability, separated
by tabs.

INPUT: image files or folders of images (a model trained on an image folder); CSV or TSV
files with the training's feature columns, one prediction per row (a table); texts, text
files (one text per line) or CSV files with the text column (a text model).
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ort-cffi-predict`` command; returns its exit status (2: a usage error, 1: the runtime refused)."""
    parser = argparse.ArgumentParser(prog="ort-cffi-predict", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, metavar="MODEL.onnx", help="an inference model ort-cffi-train exported")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files or folders, CSV files, texts or text files")
    parser.add_argument("--version", action="version", version=f"%(prog)s (ort_cffi {__version__})")
    args = parser.parse_args(argv)
    try:
        predictions = predict(args.model, args.inputs)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OrtException as exc:  # the runtime refused something: its message says what
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    for prediction in predictions:
        chance = "" if prediction.probability is None else f"\t{prediction.probability:.4f}"
        print(f"{prediction.input}\t{prediction.label}{chance}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
