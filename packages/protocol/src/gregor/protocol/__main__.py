"""`python -m gregor.protocol`: the Kafka APIs and versions this library encodes and decodes."""

from __future__ import annotations

from gregor.protocol import __version__
from gregor.protocol.apis import REQUESTS


def main() -> None:
    print(f"gregor-protocol {__version__}: Kafka APIs, by key")
    print(f"{'key':>4}  {'api':<30} {'versions':<10} flexible")
    for key, request in sorted(REQUESTS.items()):
        name = request.__name__.removesuffix("Request")
        print(f"{key:>4}  {name:<30} {request.valid_versions!s:<10} {request.flexible_versions}")


if __name__ == "__main__":
    main()
