"""Principals: `User:<name>`, from a SASL user or a client certificate's distinguished name.

A certificate's subject is written as RFC 2253 writes it (most specific RDN first, `CN=`,
`OU=`, ... with `,+"\\<>;` escaped), which is what Kafka's `X500Principal.getName()` gives,
then `ssl.principal.mapping.rules` (Kafka's `SslPrincipalMapper` syntax) turn it into a name:

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,DEFAULT

The first rule whose pattern matches the whole DN gives the name (`/L` lower-cases it, `/U`
upper-cases it); DEFAULT gives the DN unchanged. No rule matching is an error, as in Kafka.
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

ANONYMOUS: Final = "User:ANONYMOUS"

# RFC 2253's keywords for the attribute names Python's ssl module reports.
_KEYWORDS: Final = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(peer_certificate: dict[str, Any]) -> str:
    """The subject of `SSLObject.getpeercert()` in RFC 2253 form."""
    rdns = peer_certificate.get("subject", ())
    return ",".join(
        "+".join(f"{_KEYWORDS.get(name, name)}={_escape(value)}" for name, value in rdn)
        for rdn in reversed(rdns)
    )


_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
    r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))\s*(?:,|$)"
)


@attrs.frozen
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self.replacement, dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


@attrs.frozen
class PrincipalMapper:
    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        """Parse `ssl.principal.mapping.rules`; ValueError naming the part that is wrong."""
        rules = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"invalid rule at {text[pos : pos + 30]!r}")
            pos = match.end()
            if match["default"]:
                rules.append(_Rule(None))
                continue
            # Java writes group references $1; Python's re.sub wants \g<1>.
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match["replacement"])
            try:
                pattern = re.compile(match["pattern"])
            except re.error as exc:
                raise ValueError(f"invalid pattern {match['pattern']!r}: {exc}") from None
            rules.append(_Rule(pattern, replacement, match["case"]))
        return cls(tuple(rules) or (_Rule(None),))

    def principal(self, dn: str) -> str:
        """`User:<name>` for a certificate's DN; ValueError when no rule applies."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return f"User:{name}"
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")
