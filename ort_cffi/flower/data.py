"""The clients' local data: a dataset split into one share per client, IID or non-IID by label.

Pure numpy (no Flower, no runtime): the simulation gives every simulated client the same dataset and a
``partition-id`` of ``num-partitions``, and each client keeps its share; a device under the deployment
engine uses its own data whole instead.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import numpy as np

PARTITIONINGS = ("iid", "dirichlet")
Arrays = Dict[str, np.ndarray]


def label_name(arrays: Mapping[str, np.ndarray]) -> Optional[str]:
    """The labels: the one integer array among a split's inputs (a classification task), else None."""
    integer = [name for name, array in arrays.items() if array.dtype.kind in "iu" and array.ndim == 1]
    return integer[0] if len(integer) == 1 else None


def partition(labels: np.ndarray, num_partitions: int, *, partitioning: str = "iid", alpha: float = 0.5,
              seed: int = 0, proportions: Optional[np.ndarray] = None) -> List[np.ndarray]:
    """Split ``range(len(labels))`` into ``num_partitions`` disjoint index arrays covering it.

    ``iid``: a random permutation cut into near-equal parts. ``dirichlet``: non-IID by label, each class
    spread over the partitions in proportions drawn from Dirichlet(``alpha``) (small alpha: each client
    sees few classes; large alpha: close to IID); ``proportions`` ([classes, partitions], rows summing to 1)
    reuses a draw, e.g. that of the training split for the validation split. Deterministic in ``seed``.
    """
    if num_partitions < 1:
        raise ValueError(f"the number of partitions must be at least 1, got {num_partitions}")
    rng = np.random.default_rng(seed)
    n = len(labels)
    if partitioning == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), num_partitions)]
    if partitioning != "dirichlet":
        raise ValueError(f"partitioning must be one of {', '.join(PARTITIONINGS)}, not {partitioning!r}")
    if proportions is None:
        proportions = label_proportions(labels, num_partitions, alpha=alpha, seed=seed)
    parts: List[List[np.ndarray]] = [[] for _ in range(num_partitions)]
    for label in range(proportions.shape[0]):
        members = rng.permutation(np.flatnonzero(labels == label))
        # Cut points from the cumulative proportions, rounded: every sample lands in exactly one part.
        cuts = np.round(np.cumsum(proportions[label])[:-1] * len(members)).astype(int)
        for part, chunk in zip(parts, np.split(members, cuts)):
            part.append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def label_proportions(labels: np.ndarray, num_partitions: int, *, alpha: float = 0.5, seed: int = 0,
                      min_size: Optional[int] = None) -> np.ndarray:
    """[classes, partitions]: how each class is spread over the partitions, drawn from Dirichlet(alpha)
    and drawn again (up to 1000 times) until every partition gets at least ``min_size`` samples
    (default: 10, or fewer for a small dataset) so that every client has something to train on."""
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"the Dirichlet parameter alpha must be a positive number, got {alpha}")
    rng = np.random.default_rng([seed, 1])
    classes = int(labels.max()) + 1 if len(labels) else 0
    counts = np.bincount(labels, minlength=classes)
    if min_size is None:
        min_size = max(1, min(10, len(labels) // (2 * num_partitions)))
    for _ in range(1000):
        proportions = rng.dirichlet(np.full(num_partitions, alpha), size=classes)
        sizes = np.round(proportions * counts[:, None]).sum(axis=0)
        if np.min(sizes) >= min_size:
            return np.asarray(proportions)
    raise ValueError(
        f"no Dirichlet(alpha={alpha}) draw gives each of {num_partitions} partitions at least {min_size} "
        f"of the {len(labels)} samples: use fewer clients or a larger alpha"
    )


def partition_dataset(dataset: Mapping[str, Arrays], num_partitions: int, *, partitioning: str = "iid",
                      alpha: float = 0.5, seed: int = 0) -> List[Dict[str, Arrays]]:
    """The local datasets of ``num_partitions`` clients: each split (``train``, ``val``) partitioned,
    non-IID splits with the same label proportions (a client's validation data looks like its training
    data). Every client gets training data (a ``ValueError`` says when there is too little of it); its
    validation share may be empty (it then weighs nothing in the federated evaluation)."""
    if "train" in dataset:
        n_train = len(next(iter(dataset["train"].values()), ()))
        if n_train < num_partitions:
            raise ValueError(
                f"{num_partitions} clients cannot each get training data from {n_train} training sample"
                f"{'' if n_train == 1 else 's'}: use at most {n_train} clients")
    proportions = None
    if partitioning == "dirichlet":
        labels = label_name(dataset["train"])
        if labels is None:
            raise ValueError("partitioning by label needs one integer labels input (a classification task)")
        proportions = label_proportions(dataset["train"][labels], num_partitions, alpha=alpha, seed=seed)
        classes = proportions.shape[0]
        for split, arrays in dataset.items():  # a class only the validation split has: spread it evenly
            extra = int(arrays[labels].max()) + 1 - classes if len(arrays[labels]) else 0
            if extra > 0:
                proportions = np.vstack([proportions, np.full((extra, num_partitions), 1.0 / num_partitions)])
                classes += extra
    local: List[Dict[str, Arrays]] = [{} for _ in range(num_partitions)]
    for number, (split, arrays) in enumerate(dataset.items()):
        labels = label_name(arrays)
        key = arrays[labels] if labels is not None else np.zeros(len(next(iter(arrays.values()))), np.int64)
        parts = partition(key, num_partitions, partitioning=partitioning if labels is not None else "iid",
                          alpha=alpha, seed=seed + 7919 * number, proportions=proportions)
        if split == "train" and min(len(index) for index in parts) == 0:  # a Dirichlet draw's rounding
            empty = sum(len(index) == 0 for index in parts)
            raise ValueError(
                f"{empty} of the {num_partitions} clients get no training data from this {partitioning} "
                f"partitioning of {len(key)} samples: use fewer clients or a larger alpha")
        for client, index in zip(local, parts):
            client[split] = {name: array[index] for name, array in arrays.items()}
    return local
