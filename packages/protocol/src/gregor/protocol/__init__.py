"""gregor-protocol: the Kafka wire protocol and record formats, sans-IO.

- `gregor.protocol.apis`: every API's request and response classes, and `ApiKey`.
- `gregor.protocol.framing`: request/response headers and frames, `FrameReader`.
- `gregor.protocol.schema`: the declarative schema language the messages are written in.
- `gregor.protocol.errors`: Kafka's error codes and the exceptions of this package.
"""

from __future__ import annotations

__version__ = "0.1.0"
