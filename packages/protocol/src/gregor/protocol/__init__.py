"""gregor-protocol: the Kafka wire protocol and record formats, sans-IO.

- `gregor.protocol.apis`: every API's request and response classes, and `ApiKey`.
- `gregor.protocol.framing`: request/response headers and frames, `FrameReader`.
- `gregor.protocol.schema`: the declarative schema language the messages are written in.
- `gregor.protocol.errors`: Kafka's error codes and the exceptions of this package.
- `get_include()`: the folder of `_produced_batch.h`, which the C extensions of
  gregor-storage and gregor-client compile against (as `numpy.get_include()`).
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"


def get_include() -> str:
    """The folder holding gregor-protocol's C header, for an Extension's include_dirs."""
    return str(Path(__file__).parent)
