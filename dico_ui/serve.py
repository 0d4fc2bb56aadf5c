"""Serving: the launch options shared by ``python app.py`` and the test server, and a middleware that keeps
the page from loading anything beyond this server."""
from __future__ import annotations

import re

from starlette.middleware import Middleware

from dico.trace import MAX_JSON_BYTES


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


# demo.launch(**LAUNCH): the same options for `python app.py` and the test server.
LAUNCH = dict(max_file_size=MAX_JSON_BYTES, ssr_mode=False, show_error=False,
              app_kwargs={"middleware": [Middleware(WithoutCdnScripts)]})
QUEUE = dict(max_size=32, default_concurrency_limit=2)
