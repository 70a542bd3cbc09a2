"""A wake-up call for a trio task that any thread may make.

The sender, the fetcher and the metadata refresher sleep until something changes; what
changes it may come from the application's thread (a sync client) or from the loop itself.
A trio.Event may only be set from its own loop, so a set from elsewhere is passed to the
loop (TrioToken.run_sync_soon), which is cheap and never blocks.
"""

from __future__ import annotations

import trio

from gregor.client.timeouts import call_at


class Wakeup:
    def __init__(self) -> None:
        self._event = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    def bind(self) -> None:
        """Called once by the task that waits, on its loop."""
        self._token = trio.lowlevel.current_trio_token()

    def set(self) -> None:
        token = self._token
        if token is None:
            return  # not running yet: the task checks its state when it starts
        try:
            in_loop = trio.lowlevel.current_trio_token() is token
        except RuntimeError:
            in_loop = False
        if in_loop:
            self._event.set()
            return
        try:
            token.run_sync_soon(self._set_now)
        except trio.RunFinishedError:
            pass

    def _set_now(self) -> None:
        self._event.set()  # the event current when the call runs, not when it was made

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    async def wait(self, timeout: float) -> bool:
        """Until set or `timeout` seconds (none left: just a look); True if it was set.
        The timeout sets the event too (its entry in gregor.client.timeouts is cheaper
        than a cancel scope per wait), so a waiter clears it after waking, as each does."""
        event = self._event
        if timeout <= 0 or event.is_set():
            await trio.lowlevel.checkpoint()
            return event.is_set()
        expiry = call_at(trio.current_time() + timeout, event.set)
        try:
            await event.wait()
        finally:
            timed_out = not expiry.pending
            expiry.cancel()
        return not timed_out
