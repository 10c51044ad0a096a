"""``python -m ort_cffi.artifacts``: the ``ort-cffi-artifacts`` command."""
import sys

from ort_cffi.cli.artifacts import main

sys.exit(main())
