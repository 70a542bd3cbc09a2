"""Generates the encoder and decoder of a struct at one version, as Python source.

The generated code has no per-field interpretation left: absent fields are not mentioned,
runs of fixed-width fields are packed and unpacked by one precompiled `struct.Struct`,
one-byte varints are inlined, and nested structs call their own generated functions.
Versions whose wire layout is identical share one pair of functions.

Encoders are `enc(obj, w: Writer) -> None`; decoders are `dec(buf: bytes, pos) -> (obj, pos)`.
Decoders trust nothing: every length is checked against the buffer before it is used.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from gregor.protocol.errors import DecodeError, EncodeError, UnsupportedVersionError
from gregor.protocol.primitives import INT8, INT16, INT32, Writer, read_uvarint, write_uvarint
from gregor.protocol.schema import (
    BYTES,
    RECORDS,
    STRING,
    UUID,
    ArrayOf,
    DecodeFn,
    EncodeFn,
    Field,
    FieldKind,
    Kind,
    Message,
    Struct,
    StructOf,
)

_BASE_ENV: dict[str, Any] = {
    "DecodeError": DecodeError,
    "EncodeError": EncodeError,
    "UnsupportedVersionError": UnsupportedVersionError,
    "Writer": Writer,
    "_I8": INT8,
    "_I16": INT16,
    "_I32": INT32,
    "_uvarint": read_uvarint,
    "_wuv": write_uvarint,
    "_UUID": uuid.UUID,
    "_pack": struct.pack,
    "_unpack_from": struct.unpack_from,
    "_BYTESLIKE": (bytes, bytearray, memoryview),
}

# (struct class, layout) -> (encoder, decoder); shared by every version with that layout.
_codecs: dict[tuple[type[Struct], tuple[Any, ...]], tuple[EncodeFn, DecodeFn]] = {}


def encoder_for(cls: type[Message], version: int) -> EncodeFn:
    return _codec(cls, version, cls.is_flexible(version))[0]


def decoder_for(cls: type[Message], version: int) -> DecodeFn:
    return _codec(cls, version, cls.is_flexible(version))[1]


def _present(field: Field, version: int) -> bool:
    return version in field.versions


def _layout(cls: type[Struct], version: int, flexible: bool) -> tuple[Any, ...]:
    """Everything that shapes the bytes of `cls` at this version; equal layouts share code."""
    out: list[Any] = [flexible]
    for f in cls.fields():
        if not _present(f, version):
            out.append(None)
            continue
        nested: Any = None
        element = f.kind.element if isinstance(f.kind, ArrayOf) else f.kind
        if isinstance(element, StructOf):
            nested = _layout(element.cls, version, flexible)
        out.append(
            (
                version in f.nullable,
                f.tag if version in f.tagged else None,
                _compact(f, version, flexible),
                nested,
            )
        )
    return tuple(out)


def _compact(field: Field, version: int, flexible: bool) -> bool:
    return flexible and (field.flexible is None or version in field.flexible)


def _codec(cls: type[Struct], version: int, flexible: bool) -> tuple[EncodeFn, DecodeFn]:
    key = (cls, _layout(cls, version, flexible))
    codec = _codecs.get(key)
    if codec is None:
        codec = _codecs[key] = _Generator(cls, version, flexible).build()
    return codec


class _Generator:
    """Writes the source of one struct's encoder and decoder at one version."""

    def __init__(self, cls: type[Struct], version: int, flexible: bool) -> None:
        self.cls = cls
        self.version = version
        self.flexible = flexible
        self.env: dict[str, Any] = dict(_BASE_ENV)
        self.env["_Cls"] = cls
        self.env["_write_tags"] = write_tags
        self.counter = 0

    # -- helpers ---------------------------------------------------------------------------

    def const(self, value: Any, prefix: str = "_k") -> str:
        """Bind a value into the generated module's globals and return its name."""
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.env[name] = value
        return name

    def tmp(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def where(self, field: Field) -> str:
        return f"{self.cls.__name__}.{field.name} v{self.version}"

    def nested(self, element: StructOf) -> tuple[str, str]:
        enc, dec = _codec(element.cls, self.version, self.flexible)
        return self.const(enc, "_enc"), self.const(dec, "_dec")

    def build(self) -> tuple[EncodeFn, DecodeFn]:
        fields = [f for f in self.cls.fields() if _present(f, self.version)]
        regular = [f for f in fields if self.version not in f.tagged]
        tagged = sorted((f for f in fields if self.version in f.tagged), key=lambda f: f.tag or 0)
        enc_src = self.encoder_source(regular, tagged)
        dec_src = self.decoder_source(regular, tagged)
        source = enc_src + "\n" + dec_src
        code = compile(source, f"<gregor.protocol {self.cls.__qualname__} v{self.version}>", "exec")
        exec(code, self.env)
        return self.env["enc"], self.env["dec"]

    @staticmethod
    def runs(fields: list[Field]) -> list[list[Field]]:
        """Group consecutive fixed-width fields, so each run is one struct call."""
        out: list[list[Field]] = []
        for f in fields:
            fixed = isinstance(f.kind, Kind) and f.kind.fmt is not None
            if fixed and out and isinstance(out[-1][0].kind, Kind) and out[-1][0].kind.fmt:
                out[-1].append(f)
            else:
                out.append([f])
        return out

    # -- encoder ---------------------------------------------------------------------------

    def encoder_source(self, regular: list[Field], tagged: list[Field]) -> str:
        lines = ["def enc(o, w):"]
        lines += self.refuse_absent()
        for run in self.runs(regular):
            first = run[0]
            if isinstance(first.kind, Kind) and first.kind.fmt is not None:
                fmt = self.const(_run_struct(run), "_S")
                lines.append(f"    w += {fmt}.pack({', '.join(f'o.{f.name}' for f in run)})")
            else:
                lines.append(f"    v = o.{first.name}")
                lines += self.encode_value(first, first.kind, "v", "w", "    ")
        if self.flexible:
            lines += self.encode_tagged(tagged)
        lines.append("    return None")
        return "\n".join(lines) + "\n"

    def encode_value(self, f: Field, kind: FieldKind, v: str, w: str, ind: str) -> list[str]:
        compact = _compact(f, self.version, self.flexible)
        nullable = self.version in f.nullable
        lines: list[str] = []
        if isinstance(kind, Kind) and kind.fmt is not None:
            return [f"{ind}{w} += {self.const(struct.Struct('>' + kind.fmt), '_S')}.pack({v})"]
        if kind is UUID:
            return [f"{ind}{w} += {v}.bytes"]
        if nullable:
            if isinstance(kind, StructOf):
                null = f"{w}.append(255)"  # int8 -1
            elif compact:
                null = f"{w}.append(0)"  # length + 1 == 0
            else:
                null = f"{w} += {(INT16 if kind is STRING else INT32).pack(-1)!r}"
            lines += [f"{ind}if {v} is None:", f"{ind}    {null}", f"{ind}else:"]
        else:
            msg = repr(f"{self.where(f)} is not nullable")
            lines += [f"{ind}if {v} is None:", f"{ind}    raise EncodeError({msg})", f"{ind}else:"]
        ind += "    "
        if kind is STRING:
            e = self.tmp("e")
            lines.append(f"{ind}{e} = {v}.encode()")
            lines.append(self.length_out(w, f"len({e})", compact, "_I16", ind))
            lines.append(f"{ind}{w} += {e}")
        elif kind is BYTES:
            lines.append(self.length_out(w, f"len({v})", compact, "_I32", ind))
            lines.append(f"{ind}{w} += {v}")
        elif kind is RECORDS:
            lines.append(self.length_out(w, f"len({v})", compact, "_I32", ind))
            lines += [
                f"{ind}if isinstance({v}, _BYTESLIKE):",
                f"{ind}    {w} += {v}",
                f"{ind}else:",
                f"{ind}    {w}.region({v})",
            ]
        elif isinstance(kind, StructOf):
            enc, _ = self.nested(kind)
            if nullable:
                lines.append(f"{ind}{w}.append(1)")
            lines.append(f"{ind}{enc}({v}, {w})")
        elif isinstance(kind, ArrayOf):
            lines.append(self.length_out(w, f"len({v})", compact, "_I32", ind))
            element = kind.element
            if isinstance(element, Kind) and element.fmt is not None:
                lines.append(f"{ind}{w} += _pack('>%d{element.fmt}' % len({v}), *{v})")
            else:
                x = self.tmp("x")
                lines.append(f"{ind}for {x} in {v}:")
                if isinstance(element, StructOf):
                    lines.append(f"{ind}    {self.nested(element)[0]}({x}, {w})")
                else:
                    element_field = _element_field(f)
                    lines += self.encode_value(element_field, element, x, w, ind + "    ")
        else:  # pragma: no cover - every kind is handled above
            raise TypeError(kind)
        return lines

    def refuse_absent(self) -> list[str]:
        """Kafka's rule: a field this version lacks, if set, fails unless it is ignorable.

        Which version is named is added by `Message.encode_into` (layouts share code).
        """
        lines = []
        for f in self.cls.fields():
            if _present(f, self.version) or f.ignorable:
                continue
            msg = repr(f"{self.cls.__name__}.{f.name} is set, but this version lacks it")
            lines += [
                f"    if o.{f.name} != {self.default_expr(f)}:",
                f"        raise UnsupportedVersionError({msg})",
            ]
        if not self.flexible:
            msg = repr(f"{self.cls.__name__} has tagged fields, but this version has none")
            lines += [
                "    if o.unknown_tagged_fields:",
                f"        raise UnsupportedVersionError({msg})",
            ]
        return lines

    @staticmethod
    def length_out(w: str, length: str, compact: bool, fixed: str, ind: str) -> str:
        if compact:
            return f"{ind}_wuv({w}, {length} + 1)"
        return f"{ind}{w} += {fixed}.pack({length})"

    def encode_tagged(self, tagged: list[Field]) -> list[str]:
        if not tagged:
            return [
                "    u = o.unknown_tagged_fields",
                "    if u is None:",
                "        w.append(0)",
                "    else:",
                "        _write_tags(w, u)",
            ]
        lines = ["    t = []"]
        for f in tagged:
            default = self.const(f.default, "_D")
            lines += [
                f"    v = o.{f.name}",
                f"    if v != {default}:",
                "        tb = Writer()",
                *self.encode_value(f, f.kind, "v", "tb", "        "),
                f"        t.append(({f.tag}, tb))",
            ]
        lines += [
            "    u = o.unknown_tagged_fields",
            "    if u:",
            "        t += u",
            "    _write_tags(w, t)",
        ]
        return lines

    # -- decoder ---------------------------------------------------------------------------

    def decoder_source(self, regular: list[Field], tagged: list[Field]) -> str:
        lines = ["def dec(b, p):", "    L = len(b)"]
        for run in self.runs(regular):
            first = run[0]
            if isinstance(first.kind, Kind) and first.kind.fmt is not None:
                s = _run_struct(run)
                targets = "".join(f"f_{f.name}, " for f in run)
                lines.append(f"    {targets}= {self.const(s, '_S')}.unpack_from(b, p)")
                lines.append(f"    p += {s.size}")
            else:
                lines += self.decode_value(first, first.kind, f"f_{first.name}", "    ")
        if self.flexible:
            lines += self.decode_tagged(tagged)
        args = []
        present = {f.name for f in regular} | {f.name for f in tagged}
        for f in self.cls.fields():
            if f.name in present:
                args.append(f"f_{f.name}")
            else:
                args.append(self.default_expr(f))
        lines.append(f"    o = _Cls({', '.join(args)})")
        if self.flexible:
            lines += ["    if unk is not None:", "        o.unknown_tagged_fields = unk"]
        lines.append("    return o, p")
        return "\n".join(lines) + "\n"

    def length_in(self, n: str, compact: bool, fixed: str, size: int, ind: str) -> list[str]:
        """Read a length into `n`: -1 stands for null in both encodings."""
        if compact:
            return [
                f"{ind}{n} = b[p]",
                f"{ind}p += 1",
                f"{ind}if {n} > 127:",
                f"{ind}    {n}, p = _uvarint(b, p - 1)",
                f"{ind}{n} -= 1",
            ]
        return [f"{ind}{n}, = {fixed}.unpack_from(b, p)", f"{ind}p += {size}"]

    def decode_value(self, f: Field, kind: FieldKind, target: str, ind: str) -> list[str]:
        compact = _compact(f, self.version, self.flexible)
        nullable = self.version in f.nullable
        where = repr(self.where(f))
        if isinstance(kind, Kind) and kind.fmt is not None:
            s = struct.Struct(">" + kind.fmt)
            return [
                f"{ind}{target}, = {self.const(s, '_S')}.unpack_from(b, p)",
                f"{ind}p += {s.size}",
            ]
        if kind is UUID:
            return [
                f"{ind}if p + 16 > L:",
                f"{ind}    raise DecodeError('truncated uuid in ' + {where})",
                f"{ind}{target} = _UUID(bytes=b[p:p + 16])",
                f"{ind}p += 16",
            ]
        n = self.tmp("n")
        lines: list[str] = []
        if isinstance(kind, StructOf):
            _, dec = self.nested(kind)
            if not nullable:
                return [f"{ind}{target}, p = {dec}(b, p)"]
            lines += [f"{ind}{n}, = _I8.unpack_from(b, p)", f"{ind}p += 1"]
        elif kind is STRING:
            lines += self.length_in(n, compact, "_I16", 2, ind)
        else:  # bytes, records and arrays carry int32 lengths
            lines += self.length_in(n, compact, "_I32", 4, ind)
        null = f"{target} = None" if nullable else f"raise DecodeError('null in ' + {where})"
        lines += [f"{ind}if {n} < 0:", f"{ind}    {null}", f"{ind}else:"]
        ind += "    "
        if isinstance(kind, StructOf):
            lines.append(f"{ind}{target}, p = {self.nested(kind)[1]}(b, p)")
        elif kind in (STRING, BYTES, RECORDS):
            e = self.tmp("e")
            value = f"b[p:{e}].decode()" if kind is STRING else f"b[p:{e}]"
            lines += [
                f"{ind}{e} = p + {n}",
                f"{ind}if {e} > L:",
                f"{ind}    raise DecodeError('length exceeds the data in ' + {where})",
                f"{ind}{target} = {value}",
                f"{ind}p = {e}",
            ]
        elif isinstance(kind, ArrayOf):
            element = kind.element
            lines += [
                f"{ind}if {n} > L - p:",
                f"{ind}    raise DecodeError('array length exceeds the data in ' + {where})",
            ]
            if isinstance(element, Kind) and element.fmt is not None:
                lines += [
                    f"{ind}{target} = list(_unpack_from('>%d{element.fmt}' % {n}, b, p))",
                    f"{ind}p += {n} * {element.size}",
                ]
            else:
                x = self.tmp("x")
                lines += [f"{ind}{target} = []", f"{ind}for _ in range({n}):"]
                if isinstance(element, StructOf):
                    lines.append(f"{ind}    {x}, p = {self.nested(element)[1]}(b, p)")
                else:
                    lines += self.decode_value(_element_field(f), element, x, ind + "    ")
                lines.append(f"{ind}    {target}.append({x})")
        return lines

    def decode_tagged(self, tagged: list[Field]) -> list[str]:
        lines = [
            "    unk = None",
            *(f"    f_{f.name} = {self.default_expr(f)}" for f in tagged),
            "    nt = b[p]",
            "    p += 1",
            "    if nt > 127:",
            "        nt, p = _uvarint(b, p - 1)",
            "    for _ in range(nt):",
            "        tag, p = _uvarint(b, p)",
            "        size, p = _uvarint(b, p)",
            "        end = p + size",
            "        if end > L:",
            "            raise DecodeError('tagged field exceeds the data')",
        ]
        keyword = "if"
        for f in tagged:
            lines.append(f"        {keyword} tag == {f.tag}:")
            lines += self.decode_value(f, f.kind, f"f_{f.name}", "            ")
            lines += [
                "            if p != end:",
                f"                raise DecodeError('size mismatch in tagged field {f.name}')",
            ]
            keyword = "elif"
        body = "            " if tagged else "        "
        if tagged:
            lines.append("        else:")
        lines += [
            f"{body}if unk is None:",
            f"{body}    unk = []",
            f"{body}unk.append((tag, b[p:end]))",
            f"{body}p = end",
        ]
        return lines

    def default_expr(self, f: Field) -> str:
        if isinstance(f.default, list):
            return "[]"
        if isinstance(f.default, Struct):
            return self.const(type(f.default), "_T") + "()"
        return self.const(f.default, "_D")


def _run_struct(run: list[Field]) -> struct.Struct:
    """One big-endian struct for a run of fixed-width fields."""
    return struct.Struct(
        ">" + "".join(f.kind.fmt for f in run if isinstance(f.kind, Kind) and f.kind.fmt)
    )


def _element_field(f: Field) -> Field:
    """The field an array's non-struct elements are coded as: never null."""
    from gregor.protocol.schema import NONE

    return Field(
        name=f.name,
        kind=f.kind.element if isinstance(f.kind, ArrayOf) else f.kind,
        versions=f.versions,
        nullable=NONE,
        tag=None,
        tagged=NONE,
        flexible=f.flexible,
        default=None,
    )


def write_tags(w: bytearray, tags: list[tuple[int, bytes | bytearray]]) -> None:
    """The tagged-field section: count, then (tag, size, bytes) in ascending tag order."""
    tags = sorted(tags, key=lambda t: t[0])
    write_uvarint(w, len(tags))
    for tag, data in tags:
        write_uvarint(w, tag)
        write_uvarint(w, len(data))
        w += data
