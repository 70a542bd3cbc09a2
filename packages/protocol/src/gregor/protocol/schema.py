"""The declarative schema language of the Kafka messages.

A message is written as an annotated class, the way attrs and dataclasses are, and the
annotation says everything the wire needs:

    class PartitionProduceData(Struct):
        index: Int32 = 0
        records: Annotated[Records | None, V(nullable="0+")] = None

    class ProduceRequest(Request, api_key=0, valid="0-11", flexible="9+"):
        transactional_id: Annotated[str | None, V("3+", nullable="3+")] = None
        acks: Int16 = 0
        timeout_ms: Int32 = 0
        topic_data: list[TopicProduceData] = []

- The Python type gives the wire kind: `str` is a string, `bytes` bytes, `bool`, `float`
  (float64), `uuid.UUID`, `list[...]` an array, a `Struct` subclass a nested struct. Integers
  name their width with the aliases `Int8` ... `UInt32`; record data is `Records`.
- `V(...)` carries the versions (`"0+"`, `"3-5"`, `"none"`), the versions in which the field
  is nullable (by default: all of them when the type admits None), and for tagged fields the
  tag and tagged versions, and whether it is `ignorable` (Kafka's flag: a value set in a
  version without the field is dropped; any other such field fails the encoding).
- The class attribute is the default. A list default is copied for each instance.

Classes are slotted and mutable (handlers build responses field by field). Encoders and
decoders are generated per version by `gregor.protocol.codegen` the first time a version is
used, so no work is done per field at run time beyond the wire work itself.
"""

from __future__ import annotations

import inspect
import types
import uuid
from collections.abc import Callable
from typing import (
    Annotated,
    Any,
    ClassVar,
    Self,
    Union,
    dataclass_transform,
    get_args,
    get_origin,
)

import attrs

from gregor.protocol.errors import DecodeError, EncodeError, ProtocolError, UnsupportedVersionError
from gregor.protocol.primitives import FileRegion, Writer

INF = 0x7FFF


@attrs.frozen
class Versions:
    """An inclusive range of versions, as Kafka writes them: "0+", "3-5", "7", "none"."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str) -> Versions:
        text = text.strip()
        if text == "none":
            return NONE
        if text.endswith("+"):
            return cls(int(text[:-1]), INF)
        lo, sep, hi = text.partition("-")
        return cls(int(lo), int(hi) if sep else int(lo))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def __iter__(self) -> Any:
        return iter(range(self.lo, self.hi + 1))

    def __bool__(self) -> bool:
        return self.lo <= self.hi

    def __str__(self) -> str:
        if not self:
            return "none"
        if self.hi == INF:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


NONE = Versions(0, -1)
ALL = Versions(0, INF)


@attrs.frozen
class Kind:
    """A wire type. Fixed-width kinds carry their `struct` format character."""

    name: str
    fmt: str | None = None
    size: int = 0
    default: Any = None

    def __repr__(self) -> str:
        return self.name.upper()


INT8 = Kind("int8", "b", 1, 0)
INT16 = Kind("int16", "h", 2, 0)
INT32 = Kind("int32", "i", 4, 0)
INT64 = Kind("int64", "q", 8, 0)
UINT16 = Kind("uint16", "H", 2, 0)
UINT32 = Kind("uint32", "I", 4, 0)
FLOAT64 = Kind("float64", "d", 8, 0.0)
BOOL = Kind("bool", "?", 1, False)
UUID = Kind("uuid", None, 16, uuid.UUID(int=0))
STRING = Kind("string", None, 0, "")
BYTES = Kind("bytes", None, 0, b"")
RECORDS = Kind("records", None, 0, None)

Int8 = Annotated[int, INT8]
Int16 = Annotated[int, INT16]
Int32 = Annotated[int, INT32]
Int64 = Annotated[int, INT64]
UInt16 = Annotated[int, UINT16]
UInt32 = Annotated[int, UINT32]
Float64 = Annotated[float, FLOAT64]
# Record data: bytes (or a view) when decoded or produced, or a FileRegion the broker sends
# with sendfile. It is the concatenation of record batches; gregor.protocol.records parses it.
Records = Annotated[bytes | memoryview | FileRegion, RECORDS]

_PLAIN_KINDS: dict[Any, Kind] = {
    str: STRING,
    bytes: BYTES,
    bool: BOOL,
    float: FLOAT64,
    uuid.UUID: UUID,
}


class V:
    """Version metadata of one field (see the module docstring)."""

    __slots__ = ("flexible", "ignorable", "nullable", "tag", "tagged", "versions")

    def __init__(
        self,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        tag: int | None = None,
        tagged: str | None = None,
        flexible: str | None = None,
        ignorable: bool = False,
    ) -> None:
        self.versions = Versions.parse(versions)
        # Kafka's "ignorable": a value set in a version without the field is dropped. Any
        # other field set (not its default) in such a version fails the encoding, so that a
        # message never silently means less than it says.
        self.ignorable = ignorable
        self.nullable = None if nullable is None else Versions.parse(nullable)
        self.tag = tag
        # Tagged fields are tagged in every version they exist in, unless told otherwise.
        self.tagged = NONE if tag is None else Versions.parse(tagged or versions)
        # Only the request header's client_id overrides this ("none": never compact).
        self.flexible = None if flexible is None else Versions.parse(flexible)


@attrs.frozen
class ArrayOf:
    element: Kind | StructOf


@attrs.frozen
class StructOf:
    cls: type[Struct]


FieldKind = Kind | ArrayOf | StructOf


@attrs.frozen
class Field:
    """One resolved field of a struct."""

    name: str
    kind: FieldKind
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    flexible: Versions | None
    default: Any
    ignorable: bool = False

    def fresh_default(self) -> Any:
        """The default, copied when it is mutable (lists, nested structs)."""
        if isinstance(self.default, list):
            return list(self.default)
        if isinstance(self.default, Struct):
            return type(self.default)()
        return self.default


def _resolve_type(tp: Any) -> tuple[FieldKind, list[Any], bool]:
    """Map an annotation to (wire kind, extra metadata, admits None)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        kinds = [e for e in extras if isinstance(e, Kind)]
        metas = [e for e in extras if not isinstance(e, Kind)]
        if kinds:
            admits_none = get_origin(base) in (Union, types.UnionType) and type(None) in get_args(
                base
            )
            return kinds[-1], metas, admits_none
        kind, inner, admits_none = _resolve_type(base)
        return kind, metas + inner, admits_none
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"ambiguous union {tp!r}: name the wire kind with Annotated")
        kind, metas, _ = _resolve_type(args[0])
        return kind, metas, True
    if origin is list:
        (element,) = get_args(tp)
        kind, _, _ = _resolve_type(element)
        if isinstance(kind, ArrayOf):
            raise TypeError("arrays of arrays do not exist in the Kafka protocol")
        return ArrayOf(kind), [], False
    if isinstance(tp, type) and issubclass(tp, Struct):
        return StructOf(tp), [], False
    if tp in _PLAIN_KINDS:
        return _PLAIN_KINDS[tp], [], False
    if tp is int:
        raise TypeError("an int field must name its width: Int8, Int16, Int32, Int64, ...")
    raise TypeError(f"no wire kind for {tp!r}")


_MISSING = object()


def _generate_dunders(cls: type[Struct], names: tuple[str, ...], defaults: dict[str, Any]) -> None:
    """__init__, __eq__ and __repr__, generated like attrs does (plain code, no loops)."""
    env: dict[str, Any] = {"_MISSING": _MISSING}
    params, body = [], []
    for name in names:
        default = defaults[name]
        if isinstance(default, list | Struct):
            params.append(f"{name}=_MISSING")
            fresh = "[]" if isinstance(default, list) else f"_D_{name}()"
            env[f"_D_{name}"] = type(default)
            body.append(f"    self.{name} = {fresh} if {name} is _MISSING else {name}")
        else:
            env[f"_D_{name}"] = default
            params.append(f"{name}=_D_{name}")
            body.append(f"    self.{name} = {name}")
    body.append("    self.unknown_tagged_fields = None")
    fields_tuple = "(" + "".join(f"self.{n}, " for n in names) + ")"
    other_tuple = "(" + "".join(f"other.{n}, " for n in names) + ")"
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(params)}):" if params else "def __init__(self):",
            *body,
            "def __eq__(self, other):",
            "    if other.__class__ is not self.__class__:",
            "        return NotImplemented",
            f"    return {fields_tuple} == {other_tuple} and "
            "self.unknown_tagged_fields == other.unknown_tagged_fields",
            "def __repr__(self):",
            f"    return f'{cls.__qualname__}("
            + ", ".join(f"{n}={{self.{n}!r}}" for n in names)
            + ")'",
        ]
    )
    exec(compile(source, f"<gregor.protocol {cls.__qualname__}>", "exec"), env)
    for dunder in ("__init__", "__eq__", "__repr__"):
        setattr(cls, dunder, env[dunder])
    cls.__hash__ = None  # type: ignore[assignment]  # mutable: unhashable, like dataclasses


@dataclass_transform(eq_default=True)
class StructMeta(type):
    """Turns an annotated class body into a slotted struct with generated dunders."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> StructMeta:
        if namespace.get("__module__") == __name__:  # the bases defined below carry no fields
            return super().__new__(mcs, name, bases, namespace, **kwargs)
        own = namespace.get("__annotations__", {})
        names = tuple(n for n in own if not _is_classvar(own[n]))
        defaults: dict[str, Any] = {}
        for field_name in names:
            if field_name not in namespace:
                raise TypeError(f"{name}.{field_name} needs a default value")
            defaults[field_name] = namespace.pop(field_name)
        namespace["__slots__"] = names
        namespace["_field_names"] = names
        namespace["_field_defaults"] = defaults
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        _generate_dunders(cls, names, defaults)  # type: ignore[arg-type]
        return cls


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return str(text).startswith(("ClassVar", "typing.ClassVar"))


class _TaggedFieldsSlot:
    """Holds the one attribute every struct has that is not a schema field.

    It lives outside StructMeta so that type checkers do not take it for a field.
    """

    __slots__ = ("unknown_tagged_fields",)
    # Tagged fields this library does not know, kept to be written back: (tag, raw bytes).
    unknown_tagged_fields: list[tuple[int, bytes]] | None


class Struct(_TaggedFieldsSlot, metaclass=StructMeta):
    """Base of every message and nested struct."""

    __slots__ = ()
    _field_names: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}
    _fields_cache: ClassVar[tuple[Field, ...] | None] = None

    @classmethod
    def fields(cls) -> tuple[Field, ...]:
        """The resolved fields, in wire order (resolved on first use: forward references)."""
        cached = cls.__dict__.get("_fields_cache")
        if cached is None:
            cached = _resolve_fields(cls)
            cls._fields_cache = cached
        return cached


def _resolve_fields(cls: type[Struct]) -> tuple[Field, ...]:
    # Only the class's own annotations: the bases carry bookkeeping, not fields.
    annotations = inspect.get_annotations(cls, eval_str=True)
    out = []
    for name in cls._field_names:
        kind, metas, admits_none = _resolve_type(annotations[name])
        meta = next((m for m in metas if isinstance(m, V)), None) or V()
        nullable = meta.nullable
        if nullable is None:
            nullable = meta.versions if admits_none else NONE
        elif not admits_none and nullable:
            raise TypeError(f"{cls.__name__}.{name} is nullable but its type does not admit None")
        out.append(
            Field(
                name=name,
                kind=kind,
                versions=meta.versions,
                nullable=nullable,
                tag=meta.tag,
                tagged=meta.tagged,
                flexible=meta.flexible,
                default=cls._field_defaults[name],
                ignorable=meta.ignorable,
            )
        )
    return tuple(out)


EncodeFn = Callable[[Any, Writer], None]
DecodeFn = Callable[[bytes, int], tuple[Any, int]]


class Message(Struct):
    """A top-level request or response body of one API."""

    __slots__ = ()
    api_key: ClassVar[int]
    valid_versions: ClassVar[Versions]
    flexible_versions: ClassVar[Versions]
    _encoders: ClassVar[dict[int, EncodeFn]]
    _decoders: ClassVar[dict[int, DecodeFn]]

    def __init_subclass__(
        cls, *, api_key: int | None = None, valid: str = "none", flexible: str = "none", **kw: Any
    ) -> None:
        super().__init_subclass__(**kw)
        if api_key is not None:
            cls.api_key = api_key
        cls.valid_versions = Versions.parse(valid)
        cls.flexible_versions = Versions.parse(flexible)
        cls._encoders = {}
        cls._decoders = {}

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return version in cls.flexible_versions

    @classmethod
    def _check_version(cls, version: int) -> None:
        if version not in cls.valid_versions:
            raise UnsupportedVersionError(
                f"{cls.__name__} has versions {cls.valid_versions}, not {version}"
            )

    def encode_into(self, out: Writer, version: int) -> None:
        """Append this message's body at `version` to `out`."""
        encoder = self._encoders.get(version)
        if encoder is None:
            self._check_version(version)
            from gregor.protocol.codegen import encoder_for

            encoder = self._encoders[version] = encoder_for(type(self), version)
        try:
            encoder(self, out)
        except UnsupportedVersionError as exc:  # a field the version lacks is set
            raise UnsupportedVersionError(f"{type(self).__name__} v{version}: {exc}") from None
        except ProtocolError:
            raise
        except Exception as exc:
            raise EncodeError(f"cannot encode {type(self).__name__} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        """This message's body at `version`, as bytes (no header, no size prefix)."""
        out = Writer()
        self.encode_into(out, version)
        if out.has_regions():
            raise EncodeError("a file region needs encode_chunks(), not encode()")
        return bytes(out)

    @classmethod
    def decode_prefix(cls, data: bytes, version: int, pos: int = 0) -> tuple[Self, int]:
        """Decode one body at `version` starting at data[pos]; return it and where it ends."""
        decoder = cls._decoders.get(version)
        if decoder is None:
            cls._check_version(version)
            from gregor.protocol.codegen import decoder_for

            decoder = cls._decoders[version] = decoder_for(cls, version)
        if type(data) is not bytes:
            data = bytes(data)
        try:
            return decoder(data, pos)
        except ProtocolError:
            raise
        except Exception as exc:
            raise DecodeError(f"malformed {cls.__name__} v{version}: {exc!r}") from exc

    @classmethod
    def decode(cls, data: bytes, version: int, pos: int = 0, *, strict: bool = True) -> Self:
        """Decode a whole body at `version` from data[pos:].

        Strict (the default: fuzzers, tests, stored formats), bytes after the body are an
        error. Not strict, they are ignored, as Kafka ignores what follows the fields a
        request's version defines (librdkafka 2.16 sends Metadata v12 with 3 more bytes).
        """
        if type(data) is not bytes:
            data = bytes(data)
        message, end = cls.decode_prefix(data, version, pos)
        if strict and end != len(data):
            raise DecodeError(
                f"malformed {cls.__name__} v{version}: {len(data) - end} trailing bytes"
            )
        return message


class Request(Message):
    __slots__ = ()


class Response(Message):
    __slots__ = ()
