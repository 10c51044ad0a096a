"""The trainer: one run of ``ort-cffi-train`` as a job object (``TrainingJob(TrainSettings(...)).run()``),
an application on the facade. Its parts: ``data`` (the artifacts folder and the dataset, checked), ``sources``
(what ``--data`` is: an ``.npz`` file, an image folder, a CSV or text file, and the metadata the exported model
carries), ``schedule`` (the learning rate of each step), ``predict`` (what ``ort-cffi-predict`` does),
``config`` (the run's configuration, stored in each checkpoint for ``--resume``), ``loop`` (epochs,
validation, checkpoints, the export check), ``batchnorm`` (BatchNorm statistics re-estimated for the trained
weights, ``reestimate_batchnorm``), ``output`` (metrics and plot), ``job`` (a whole run)."""
from ort_cffi.trainer.batchnorm import Reestimated, reestimate_batchnorm
from ort_cffi.trainer.data import DEFAULT_ARTIFACTS
from ort_cffi.trainer.errors import OutputError, SetupError
from ort_cffi.trainer.job import GENERATION_FLAGS, TrainingJob, TrainSettings, settings_from

__all__ = ["DEFAULT_ARTIFACTS", "GENERATION_FLAGS", "OutputError", "Reestimated", "SetupError", "TrainSettings", "TrainingJob",
           "reestimate_batchnorm", "settings_from"]
