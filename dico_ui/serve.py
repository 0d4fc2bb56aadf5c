"""Serving: the launch options shared by ``python app.py`` and the test server, a middleware that keeps the
page from loading anything beyond this server, the two places the app reads gradio 5.50's session and queue
tables (``client_connected``, ``forget_session``; tests/test_app_api.py runs both against the pinned gradio), and
two mends of work gradio 5.50 does on its event loop that a burst of visitors waited behind
(``lazy_session_configs``, ``cheap_skipped_outputs``; tests/test_upkeep.py checks each against the pinned gradio's
own result). A gradio upgrade re-reads all four."""
from __future__ import annotations

import re
import time
from collections.abc import MutableMapping

from starlette.middleware import Middleware

from dico.trace import MAX_JSON_BYTES
from dico_ui.limits import LIMITS


class WithoutCdnScripts:
    """ASGI middleware: gradio 5.50's page template loads iframeResizer from cdnjs; drop that tag so the page
    makes no request beyond this server (the script only resizes the page when embedded in an iframe)."""
    CDN_SCRIPT = re.compile(rb'<script[^>]*src="https://cdnjs\.cloudflare\.com/[^"]*"[^>]*>\s*</script>')

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] not in ("/", ""):
            return await self.app(scope, receive, send)
        start, body = {}, []

        async def rewrite(message):
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if not message.get("more_body"):
                    data = b"".join(body)
                    headers = dict(start["headers"])
                    page = headers.get(b"content-type", b"").startswith(b"text/html")
                    if page and b"content-encoding" not in headers:
                        data = self.CDN_SCRIPT.sub(b"", data)
                    headers[b"content-length"] = str(len(data)).encode()
                    await send({**start, "headers": list(headers.items())})
                    await send({"type": "http.response.body", "body": data})
            else:
                await send(message)
        await self.app(scope, receive, rewrite)


class SessionConfig(MutableMapping):
    """gradio 5.50's ``SessionState.config_values`` (each block's config, which only its deep-link endpoint reads),
    with a block's entry computed when first read rather than every block's when a session starts. Eagerly, a new
    session cost gradio's event loop 16 ms for this page's 257 blocks, so a burst of new visitors queued behind it
    before any was told the demo is busy. A block replaced in the session is written here by gradio itself, so an
    entry computed late is the one computed early."""

    def __init__(self, state, ids):
        self._state, self._ids, self._values = state, list(ids), {}
        self._known = set(self._ids)

    def __getitem__(self, key):
        if key not in self._values:
            if key not in self._known:
                raise KeyError(key)
            config = self._state.blocks_config
            self._values[key] = config.config_for_block(key, [], config.blocks[key])
        return self._values[key]

    def __setitem__(self, key, value) -> None:
        self._values[key] = value
        if key not in self._known:
            self._known.add(key)
            self._ids.append(key)

    def __delitem__(self, key) -> None:
        self._known.remove(key)
        self._ids.remove(key)
        self._values.pop(key, None)

    def __contains__(self, key) -> bool:
        return key in self._known

    def __iter__(self):
        return iter(list(self._ids))

    def __len__(self) -> int:
        return len(self._ids)


def lazy_session_configs() -> None:
    """Make gradio's new sessions keep a ``SessionConfig`` instead of computing every block's config (idempotent).
    The rest is ``SessionState.__init__`` of gradio 5.50 field for field; tests/test_upkeep.py checks a session
    made here against one made by the pinned gradio's own code."""
    import os
    from copy import copy

    from gradio.state_holder import SessionState
    if getattr(SessionState.__init__, "lazy_config", False):
        return

    def init(self, blocks):
        self.blocks_config = copy(blocks.default_config)
        self.config_values = SessionConfig(self, [k for k in self.blocks_config.blocks if k in blocks.blocks])
        self.state_data = {}
        self._state_ttl = {}
        self.is_closed = False
        self.STATE_TTL_WHEN_CLOSED = 1 if os.getenv("GRADIO_IS_E2E_TEST", None) else 3600
    init.lazy_config = True
    init.eager = SessionState.__init__
    SessionState.__init__ = init


def cheap_skipped_outputs() -> None:
    """Make gradio pass an output a handler left out of its ``{component: value}`` dict as the empty update it is.
    gradio 5.50 fills every output left out with ``gr.skip()`` and then treats that as a property update: on its event
    loop it builds a new component of that class and its config, for every such output of every yield. A race frame
    sets the status and the answers of some 25 outputs, so each frame cost the loop 15-25 ms, and a burst of new
    visitors waited behind the running races' frames to be told the demo is busy. Here only the outputs given are
    postprocessed by gradio's own code; the rest are sent as gradio sends them, ``{"__type__": "update"}`` (None
    for a ``gr.State``) (idempotent; tests/test_upkeep.py checks the outputs against the pinned gradio's own)."""
    from copy import copy

    from gradio.blocks import Block, Blocks
    from gradio.helpers import skip
    if getattr(Blocks.postprocess_data, "cheap_skips", False):
        return
    everything = Blocks.postprocess_data

    async def postprocess_data(self, block_fn, predictions, state):
        if (isinstance(predictions, dict) and predictions and len(block_fn.outputs) > 1
                and all(isinstance(key, Block) for key in predictions)):
            given = {key._id for key in predictions}
            if len(given) < len(block_fn.outputs):
                part = copy(block_fn)
                part.outputs = [block for block in block_fn.outputs if block._id in given]
                done = iter(await everything(self, part, predictions, state))
                return [next(done) if block._id in given else None if block.stateful else skip()
                        for block in block_fn.outputs]
        return await everything(self, block_fn, predictions, state)
    postprocess_data.cheap_skips = True
    postprocess_data.everything = everything
    Blocks.postprocess_data = postprocess_data


def _blocks():
    from gradio.context import LocalContext
    return LocalContext.blocks.get(None)


def client_connected() -> bool:
    """Whether the client of the event being handled still listens. Gradio marks an event not alive when its
    stream closes but tells a generator only at its next yield, which may be many decode steps later."""
    from gradio.context import LocalContext
    blocks, event_id = _blocks(), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:           # called outside a served event (unit tests, the CLI)
        return True
    for job in list(queue.active_jobs):
        for event in job or ():
            if event._id == event_id:
                return event.alive
    return True


def forget_session(session: str) -> None:
    """Drop a closed page's session state now: gradio keeps it an hour after the page closes, and keeps every
    session's per-page copy of the components until ``state_session_capacity`` pushes it out. Then ``trim``."""
    _on_loop(lambda blocks: _trim(blocks, gone=session))


def trim_sessions() -> None:
    """After each run: ``_trim`` gradio's tables, so they hold the sessions gradio keeps state for, and no more."""
    _on_loop(_trim)


def _on_loop(fn) -> None:
    """Run ``fn(blocks)`` on the event loop, where gradio sweeps and fills its tables (a change from another thread
    could break a sweep); a no-op outside a served event (unit tests, the CLI)."""
    blocks = _blocks()
    if getattr(blocks, "state_holder", None) is None or getattr(blocks, "_queue", None) is None:
        return
    try:
        from anyio.from_thread import run_sync
        run_sync(fn, blocks)             # from a handler's worker thread
    except RuntimeError:                 # already on the event loop (an async handler)
        fn(blocks)


FINAL = ("success", "failed", "cancelled")      # what gradio 5.50 writes last in an event's record


def _trim(blocks, gone: str | None = None) -> None:
    """gradio 5.50 bounds its session state (``state_session_capacity``, least recently used out) but not the
    tables beside it, which gain an entry per session that ever sent an event and never lose it: the state's
    last-use times, the queue's finished events (each holding its request and inputs), the per-session message
    queues and pending-event sets, the stream-diff tables. Keep only the sessions whose state is kept or that have
    an event pending, and only the events still pending or running; ``gone`` (a closed page) goes first.

    Four more grow by one entry per event, whoever sent it (gradio 6 bounds them; PRs 13156 and 13756): the queue's
    monitoring record of each event, its list of finished event tasks, the server's table of each event's
    generator (None once it has finished) and its set of reset generators. Keep the pending events' entries."""
    holder, queue, server = blocks.state_holder, blocks._queue, blocks.server_app   # all three set at launch
    with holder.lock:
        if gone is not None:
            holder.session_data.pop(gone, None)
        kept = set(holder.session_data)
        for session in [s for s in holder.time_last_used if s not in kept]:
            del holder.time_last_used[session]
    pending = {event_id for ids in queue.pending_event_ids_session.values() for event_id in ids}
    pending |= {event._id for job in queue.active_jobs if job for event in job}
    pending |= {event._id for events in queue.event_queue_per_concurrency_id.values() for event in events.queue}
    for table in (queue.event_ids_to_events, server.iterators):
        for event_id in [e for e in list(table) if e not in pending]:
            table.pop(event_id, None)
    # a finished event's record is written once more after it leaves the running jobs: keep it until it says so
    # (or, for an event dropped from the line before it ran, until it is an hour old)
    stale = time.time() - 3600
    for event_id, record in list(queue.event_analytics.items()):
        if event_id not in pending and (record.get("status") in FINAL or (record.get("time") or 0) < stale):
            queue.event_analytics.pop(event_id, None)
    server.iterators_to_reset.intersection_update(pending)
    queue._asyncio_tasks[:] = [task for task in queue._asyncio_tasks if not task.done()]
    live = kept | {s for s, ids in queue.pending_event_ids_session.items() if ids}
    for table in (queue.pending_event_ids_session, queue.pending_messages_per_session, blocks.pending_diff_streams,
                  blocks.pending_streams):
        for session in [s for s in list(table.keys()) if s not in live]:
            table.pop(session, None)


def session_tables(blocks) -> dict[str, int]:
    """The sizes of gradio's per-session and per-event tables (the soak and the tests watch them stay bounded)."""
    holder, queue, server = blocks.state_holder, blocks._queue, blocks.server_app
    return {"state": len(holder.session_data), "last_used": len(holder.time_last_used),
            "events": len(queue.event_ids_to_events), "pending_sets": len(queue.pending_event_ids_session),
            "message_queues": len(queue.pending_messages_per_session), "diff_streams": len(blocks.pending_diff_streams),
            "streams": len(blocks.pending_streams), "event_records": len(queue.event_analytics),
            "event_tasks": len(queue._asyncio_tasks),
            "generators": len(server.iterators), "generators_reset": len(server.iterators_to_reset)}


# demo.launch(**LAUNCH): the same options for `python app.py` and the test server.
LAUNCH = dict(max_file_size=MAX_JSON_BYTES, ssr_mode=False, show_error=False,
              state_session_capacity=LIMITS.sessions, max_threads=LIMITS.threads,
              app_kwargs={"middleware": [Middleware(WithoutCdnScripts)]})
# gradio's queue is a backstop far above the app's own line (dico_ui.runs.LINE), so that overload is told in the
# app's words, with the wait, instead of gradio's "Queue is full".
QUEUE = dict(max_size=LIMITS.gradio_queue, default_concurrency_limit=LIMITS.decoders)
