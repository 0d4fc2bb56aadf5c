"""Serving: the launch options shared by ``python app.py`` and the test server, a middleware that keeps the
page from loading anything beyond this server, and the two places the app reads gradio 5.50's session and
queue tables (``client_connected``, ``forget_session``; tests/test_app_api.py runs both against the pinned
gradio)."""
from __future__ import annotations

import re
import time

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
