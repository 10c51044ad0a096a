"""Facade: ``OnnxModelMetadata``, a model's metadata as ``OrtSession.getMetadata()`` gives it (Java's
``ai.onnxruntime.OnnxModelMetadata``), read once from the runtime into plain Python data."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from ort_cffi._native.handles import process
from ort_cffi._native.tables import check_status, ffi


class OnnxModelMetadata:
    """The producer, graph, domain, description, version and custom metadata of a model.

    Plain Python data: it stays valid after the session closes. Strings the model holds as invalid UTF-8
    are decoded with replacement characters.

    Java: `ai.onnxruntime.OnnxModelMetadata`.
    """

    __slots__ = ("_producer", "_graph", "_graph_description", "_domain", "_description", "_version", "_custom")

    def __init__(self, producerName: str, graphName: str, graphDescription: str, domain: str, description: str,
                 version: int, customMetadata: Mapping[str, str]) -> None:
        self._producer = producerName
        self._graph = graphName
        self._graph_description = graphDescription
        self._domain = domain
        self._description = description
        self._version = int(version)
        self._custom = dict(customMetadata)

    def getProducerName(self) -> str:
        """The model's producer (`ModelProto.producer_name`).

        Java: `String getProducerName()`.
        """
        return self._producer

    def getGraphName(self) -> str:
        """The graph's name.

        Java: `String getGraphName()`.
        """
        return self._graph

    def getGraphDescription(self) -> str:
        """The graph's doc string.

        Java: `String getGraphDescription()`.
        """
        return self._graph_description

    def getDomain(self) -> str:
        """The model's domain.

        Java: `String getDomain()`.
        """
        return self._domain

    def getDescription(self) -> str:
        """The model's doc string.

        Java: `String getDescription()`.
        """
        return self._description

    def getVersion(self) -> int:
        """The model's version (`ModelProto.model_version`; ONNX Runtime answers INT64_MAX where the model
        sets none).

        Java: `long getVersion()`.
        """
        return self._version

    def getCustomMetadata(self) -> Dict[str, str]:
        """The model's `metadata_props`.

        Java: `Map<String,String> getCustomMetadata()`.

        Returns:
            A new dict at each call, the caller's own.
        """
        return dict(self._custom)

    def getCustomMetadataValue(self, key: str) -> Optional[str]:
        """One `metadata_props` value.

        Java: `Optional<String> getCustomMetadataValue(String key)`.

        Returns:
            The value (an immutable `str`, nobody's to own), or None where Java gives an empty `Optional`.
        """
        return self._custom.get(key)

    def _fields(self) -> tuple:
        return (self._producer, self._graph, self._graph_description, self._domain, self._description,
                self._version, self._custom)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OnnxModelMetadata) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields()[:6])

    def __repr__(self) -> str:
        return (f"OnnxModelMetadata(producerName={self._producer!r}, graphName={self._graph!r}, "
                f"graphDescription={self._graph_description!r}, domain={self._domain!r}, "
                f"description={self._description!r}, version={self._version}, customMetadata={self._custom!r})")


def _text(rt: Any, allocator: Any, chars: Any) -> str:
    """A string the runtime allocated, freed; bytes that are not UTF-8 are replaced, never refused."""
    try:
        return ffi.string(chars).decode("utf-8", errors="replace")
    finally:
        check_status(rt.api.AllocatorFree(allocator, chars), "AllocatorFree")


def read_metadata(rt: Any, session: Any) -> OnnxModelMetadata:
    """The metadata of the native ``session`` (``SessionGetModelMetadata``), everything freed before returning."""
    out = ffi.new("OrtModelMetadata**")
    check_status(rt.api.SessionGetModelMetadata(session, out), "reading the model's metadata")
    metadata = out[0]
    allocator = process.allocator()
    try:
        def field(getter: Any, what: str) -> str:
            value = ffi.new("char**")
            check_status(getter(metadata, allocator, value), f"reading the model's {what}")
            return _text(rt, allocator, value[0])

        texts = [field(rt.api.ModelMetadataGetProducerName, "producer name"),
                 field(rt.api.ModelMetadataGetGraphName, "graph name"),
                 field(rt.api.ModelMetadataGetGraphDescription, "graph description"),
                 field(rt.api.ModelMetadataGetDomain, "domain"),
                 field(rt.api.ModelMetadataGetDescription, "description")]
        version = ffi.new("int64_t*")
        check_status(rt.api.ModelMetadataGetVersion(metadata, version), "reading the model's version")
        keys = ffi.new("char***")
        count = ffi.new("int64_t*")
        check_status(rt.api.ModelMetadataGetCustomMetadataMapKeys(metadata, allocator, keys, count),
                     "reading the model's custom metadata")
        custom: Dict[str, str] = {}
        if keys[0] != ffi.NULL:  # NULL when the model has none
            try:
                raw_keys = [ffi.string(keys[0][i]) for i in range(count[0])]
            finally:
                for i in range(count[0]):
                    check_status(rt.api.AllocatorFree(allocator, keys[0][i]), "AllocatorFree")
                check_status(rt.api.AllocatorFree(allocator, keys[0]), "AllocatorFree")
            for key in raw_keys:
                value = ffi.new("char**")
                check_status(rt.api.ModelMetadataLookupCustomMetadataMap(metadata, allocator, key, value),
                             "reading the model's custom metadata")
                if value[0] != ffi.NULL:
                    custom[key.decode("utf-8", errors="replace")] = _text(rt, allocator, value[0])
    finally:
        rt.api.ReleaseModelMetadata(metadata)
    return OnnxModelMetadata(texts[0], texts[1], texts[2], texts[3], texts[4], version[0], custom)


__all__ = ["OnnxModelMetadata", "read_metadata"]
