"""Settings that Flower's run config may override: a run started with ``flwr run`` (or by
``ort-cffi-federated``) carries its settings as ``[tool.flwr.app.config]`` keys, which both apps read."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar, Dict, Mapping, TypeVar

_Settings = TypeVar("_Settings", bound="RunConfigurable")


class RunConfigurable:
    """A dataclass mixin: ``RUN_CONFIG`` maps a field to its run-config key, and
    `with_run_config` applies a run config to a copy, converting each value to the field's type."""

    RUN_CONFIG: ClassVar[Dict[str, str]] = {}

    def with_run_config(self: _Settings, run_config: Mapping[str, Any]) -> _Settings:
        """A copy with the fields whose keys ``run_config`` holds (an empty string leaves a field as it is).
        Raises ``ValueError`` naming the key whose value does not convert."""
        hints = typing.get_type_hints(type(self))
        changes: Dict[str, Any] = {}
        for name, key in self.RUN_CONFIG.items():
            if key in run_config and run_config[key] != "":
                changes[name] = _convert(run_config[key], hints[name], key)
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]  # the subclasses are dataclasses

    def to_run_config(self) -> Dict[str, Any]:
        """The run-config keys of the fields that are set (None is left out), for ``flwr run``."""
        return {key: getattr(self, name) for name, key in self.RUN_CONFIG.items() if getattr(self, name) is not None}


def _convert(value: Any, hint: Any, key: str) -> Any:
    """``value`` (a TOML scalar) as ``hint``: int, float, str, bool, or Optional of one of them."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    kind = kinds[0]
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError(f"run-config key {key!r} must be true or false, not {value!r}")
    try:
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"run-config key {key!r} must be {kind.__name__}, not {value!r}") from None
