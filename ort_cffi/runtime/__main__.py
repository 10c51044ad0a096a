"""``python -m ort_cffi.runtime``: the ``ort-cffi-runtime`` command."""
import sys

from ort_cffi.cli.runtime import main

sys.exit(main())
