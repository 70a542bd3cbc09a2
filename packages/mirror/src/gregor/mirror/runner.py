"""A mirror process: the enabled flows into the clusters it runs for, and heartbeats."""

from __future__ import annotations

import logging
import signal

import trio

from gregor.mirror.config import MirrorConfig, MirrorConfigError
from gregor.mirror.flow import Flow, keep_running
from gregor.mirror.heartbeats import emit_heartbeats

log = logging.getLogger("gregor.mirror")


class Mirror:
    """Runs the flows of `config` whose target is one of `targets` (None: every cluster),
    as `gregor-mirror mm2.properties --clusters B` does."""

    def __init__(self, config: MirrorConfig, targets: set[str] | None = None) -> None:
        unknown = (targets or set()) - set(config.clusters)
        if unknown:
            raise MirrorConfigError(
                f"--clusters {', '.join(sorted(unknown))}: not in clusters = "
                f"{', '.join(config.clusters)}"
            )
        self.config = config
        self.targets = targets
        self.flows = [Flow(f) for f in config.enabled_flows(targets)]
        for flow in self.flows:
            if flow.flow.exactly_once:
                raise MirrorConfigError(
                    f"{flow.flow.name}: exactly-once delivery (exactly.once.support / "
                    "exactly.once.source.support) needs transactions on the target, which "
                    "gregor-mirror does not use yet; it delivers at least once"
                )
        self.heartbeats = [
            f
            for f in config.flows
            if f.emit_heartbeats and (targets is None or f.target.alias in targets)
        ]

    async def run(self) -> None:
        """Until cancelled, or until `shutdown()` has let every flow drain."""
        if not self.flows:
            log.warning("no enabled flow writes into %s", ", ".join(sorted(self.targets or [])))
        async with trio.open_nursery() as nursery:
            for beat in self.heartbeats:
                nursery.start_soon(
                    keep_running, f"heartbeats {beat.name}", lambda beat=beat: emit_heartbeats(beat)
                )
            async with trio.open_nursery() as flows:
                for flow in self.flows:
                    log.info("starting flow %s", flow.flow.name)
                    flows.start_soon(flow.run)
            nursery.cancel_scope.cancel()

    def shutdown(self) -> None:
        for flow in self.flows:
            flow.shutdown()

    async def run_until_signalled(self) -> None:
        """run(), and on SIGTERM or SIGINT a clean stop: in-flight records delivered, their
        syncs written, clients closed. A second signal stops at once."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    count = 0
                    async for signum in signals:
                        count += 1
                        log.info("signal %d: %s", signum, "stopping" if count == 1 else "now")
                        if count == 1:
                            self.shutdown()
                        else:
                            nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                await self.run()
                nursery.cancel_scope.cancel()
