"""A mirror process: the enabled flows into the clusters it runs for, and heartbeats."""

from __future__ import annotations

import contextlib
import logging
import math
import signal
from collections.abc import Iterator

import trio

from gregor.client.exporter import serving
from gregor.mirror.config import (
    PROMETHEUS_LISTENER,
    SHUTDOWN_TIMEOUT,
    MirrorConfig,
    MirrorConfigError,
)
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
        self.heartbeats = [
            f
            for f in config.flows
            if f.emit_heartbeats and (targets is None or f.target.alias in targets)
        ]

    async def run(self) -> None:
        """Until cancelled, or until `shutdown()` has let every flow drain."""
        if not self.flows:
            log.warning("no enabled flow writes into %s", ", ".join(sorted(self.targets or [])))
        with self._exporter():
            await self._run()

    @contextlib.contextmanager
    def _exporter(self) -> Iterator[None]:
        """The Prometheus exporter, while the flows run, if metrics.prometheus.listener
        is set. An address that cannot be bound is a bad config: the mirror stops."""
        listener = self.config.prometheus_listener
        if listener is None:
            yield
            return
        # (imported here: without a listener, prometheus_client is never loaded)
        from gregor.mirror.prometheus import MirrorCollector

        collector = MirrorCollector([flow.metrics for flow in self.flows])
        with contextlib.ExitStack() as stack:
            try:
                address = stack.enter_context(serving(listener, collector))
            except OSError as exc:
                raise MirrorConfigError(
                    f"{PROMETHEUS_LISTENER} = http://{listener[0]}:{listener[1]}: cannot "
                    f"listen there ({exc})"
                ) from exc
            log.info("metrics for Prometheus on http://%s:%d/metrics", *address)
            yield

    async def _run(self) -> None:
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
        syncs written, clients closed, within task.shutdown.graceful.timeout.ms; what is
        still unsynced then is cut short (a restart copies it again). A second signal stops
        at once. Either way the stop is one line of log, and no traceback."""
        grace = self.config.shutdown_timeout
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                running = trio.CancelScope()

                async def watch() -> None:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        if running.deadline == math.inf:
                            log.info("%s: stopping (in-flight records get %gs)", name, grace)
                            running.deadline = trio.current_time() + grace
                            self.shutdown()
                        else:
                            log.info("%s again: stopping now", name)
                            running.cancel()

                nursery.start_soon(watch)
                with running:
                    await self.run()
                nursery.cancel_scope.cancel()
        if running.cancelled_caught:
            log.info(
                "gregor-mirror stopped: what was in flight and not yet synced is copied again "
                "at the next start (not done within %s = %d ms, or a second signal)",
                SHUTDOWN_TIMEOUT,
                round(grace * 1000),
            )
        else:
            log.info("gregor-mirror stopped: everything copied is synced")
