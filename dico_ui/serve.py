"""Serving: the launch options shared by ``python app.py`` and the test server, a middleware that keeps the
page from loading anything beyond this server, and the two places the app reads gradio 5.50's session and
queue tables (``client_connected``, ``forget_session``; tests/test_app_api.py runs both against the pinned
gradio)."""
from __future__ import annotations

import re

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
    session's per-page copy of the components until ``state_session_capacity`` pushes it out. Also the finished
    events of sessions no longer kept, which gradio never drops (each holds its request and inputs). Done on the
    event loop, where gradio sweeps and fills those tables (a change from another thread could break a sweep)."""
    blocks = _blocks()
    holder, queue = getattr(blocks, "state_holder", None), getattr(blocks, "_queue", None)
    if holder is None or queue is None:
        return

    def drop():
        with holder.lock:
            holder.session_data.pop(session, None)
            holder.time_last_used.pop(session, None)
            kept = set(holder.session_data)
        running = {event._id for job in queue.active_jobs if job for event in job}
        done = [event_id for event_id, event in queue.event_ids_to_events.items()
                if event_id not in running and (event.session_hash == session or event.session_hash not in kept)]
        for event_id in done:
            queue.event_ids_to_events.pop(event_id, None)
    try:
        from anyio.from_thread import run_sync
        run_sync(drop)                   # from a handler's worker thread
    except RuntimeError:                 # already on the event loop (an async handler)
        drop()


# demo.launch(**LAUNCH): the same options for `python app.py` and the test server.
LAUNCH = dict(max_file_size=MAX_JSON_BYTES, ssr_mode=False, show_error=False,
              state_session_capacity=LIMITS.sessions, max_threads=LIMITS.threads,
              app_kwargs={"middleware": [Middleware(WithoutCdnScripts)]})
# gradio's queue is a backstop far above the app's own line (dico_ui.runs.LINE), so that overload is told in the
# app's words, with the wait, instead of gradio's "Queue is full".
QUEUE = dict(max_size=LIMITS.gradio_queue, default_concurrency_limit=LIMITS.decoders)
