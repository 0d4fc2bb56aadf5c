"""A soak of the public demo: start ``app.py``, hit it as strangers do, and say whether it stays up.

    python -m dico_ui.soak                                    # the issue-28 targets (about an hour on 2 busy cores)
    python -m dico_ui.soak --sessions 60 --burst 40 --gen 48  # a quick look

Phases, each through gradio_client against a fresh server process: ``--sessions`` runs, each from a new
session that then closes (attention capture on); ``--concurrent`` clients at once (a full line's worth, all must
be right); ``--burst`` clients at once (each a result or the app's busy message), first over bare HTTP (the
server's own answer times), then through gradio_client; every kind of bad input (each
a message naming its field); one more run. Prints resident memory after ``--warmup`` sessions and at the end,
latency percentiles, failures and the tracebacks in the server's log; exits 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?",
           "Here is a list: 4, 9, 13. Make every item smaller by 3. Keep the order.",
           "Take the numbers 4, 9, 2. Add 3 to each number."]
METHODS = ["vanilla", "fast", "dico"]
GROWTH_MB = 25.0          # the target: resident memory grows at most this much after the warm-up
# (what is wrong, keyword arguments of run()) for every kind of bad input the API can be sent
BAD = [("prompt", dict(prompt="")), ("prompt", dict(prompt="   ")), ("prompt", dict(prompt="x" * 100_000)),
       ("gen_length", dict(gen=0)), ("gen_length", dict(gen=-5)), ("gen_length", dict(gen=10**9)),
       ("gen_length", dict(gen=3.5)), ("block_length", dict(mode="semi-ar", gen=96, block=7)),
       ("block_length", dict(mode="semi-ar", gen=96, block=0)),
       ("threshold", dict(settings='{"fast": {"threshold": "high"}}')), ("mode", dict(mode="sideways")),
       ("model", dict(model="no/such-model")), ("methods", dict(methods=[])), ("methods", dict(methods=["nope"])),
       ("settings", dict(settings="{")), ("settings", dict(settings='{"fast": 1}')),
       ("method", dict(settings='{"nope": {}}')), ("threshold", dict(settings='{"fast": {"threshold": 2}}')),
       ("nope", dict(settings='{"dico": {"nope": 1}}')), ("top_k", dict(settings='{"dico": {"top_k": 0.5}}'))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log.open("w"),
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return server, url
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit(f"the app did not start; see {log}")


def refused(error: str) -> str:
    """What a refused run was: the app's busy message, or another refusal."""
    return "busy" if "The demo is busy" in error else "refused"


def served(status: str, answers: str, methods) -> str:
    """What a run that came back was: right (done, every lane's answer complete), stopped at the time limit, or
    failed."""
    if status.startswith("Done") and answers.count("answer complete at step") == len(methods):
        return "right"
    return "stopped" if status.startswith("Stopped at the time limit") else "failed"


class Soak:
    def __init__(self, url: str, gen: int, timeout: float = 60.0):
        from gradio_client import Client
        self.Client, self.url, self.gen, self.timeout = Client, url, gen, timeout
        self.closers = ThreadPoolExecutor(8)            # Client.close waits up to 1 s for its heartbeat thread

    def client(self):
        # gradio_client's own: 5 s for a request (httpx's default), none for the stream of answers; a browser waits
        # longer for a busy server, so the soak gives every read ``timeout`` s (0: gradio_client's own)
        return self.Client(self.url, verbose=False, **({"httpx_kwargs": {"timeout": self.timeout}} if self.timeout
                                                          else {}))

    def close(self, client) -> None:
        self.closers.submit(client.close)

    def run(self, client, prompt=PROMPTS[0], gen=None, block=32, mode="non-ar", model="dico-tiny", methods=METHODS,
            settings=""):
        """One /run: (outcome, seconds, status) with outcome "right", "stopped" (at the run's time limit, with its
        partial answers), "busy", "refused", "no answer" (the client gave up waiting: its stream read nothing for
        its timeout) or "failed"."""
        from concurrent.futures import CancelledError

        import httpx
        from gradio_client.exceptions import AppError
        started = time.perf_counter()
        try:
            out = client.predict(prompt, model, mode, self.gen if gen is None else gen, block, methods, settings,
                                 True, api_name="/run")
        except AppError as exc:
            return refused(str(exc)), time.perf_counter() - started, str(exc)
        except (httpx.TimeoutException, CancelledError) as exc:     # gradio_client cancels a call whose stream died
            return "no answer", time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - counted as a failure, with what it was
            return "failed", time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
        return served(out[0], out[1], methods), time.perf_counter() - started, out[0][:200]

    def one_session(self, prompt):
        client = self.client()
        try:
            return self.run(client, prompt)
        finally:
            self.close(client)

    def at_once(self, n: int, gen: int):
        """``n`` clients (new sessions) send a run at the same moment."""
        with ThreadPoolExecutor(16) as pool:
            clients = list(pool.map(lambda _: self.client(), range(n)))
        gate = threading.Barrier(n)

        def go(i):
            gate.wait()
            return self.run(clients[i], PROMPTS[i % len(PROMPTS)], gen=gen)
        with ThreadPoolExecutor(n) as pool:
            outcomes = list(pool.map(go, range(n)))
        for client in clients:
            self.close(client)
        return outcomes


def bare_burst(url: str, n: int, gen: int, methods=METHODS) -> list[tuple[str, float, str]]:
    """``n`` new sessions send a run at the same moment, each over bare HTTP from one asyncio loop (no gradio_client,
    no HTTP library), speaking gradio's queue protocol as the page does: (outcome, seconds, status) as ``Soak.run``.
    What it times is the server's answer; gradio_client's threads cost seconds of these same cores themselves."""
    import asyncio
    import json
    import uuid
    from urllib.parse import urlparse
    host, port = urlparse(url).hostname, urlparse(url).port
    with urllib.request.urlopen(url + "config", timeout=30) as response:
        run = next(d["id"] for d in json.load(response)["dependencies"] if d.get("api_name") == "run")

    async def exchange(request: bytes):
        reader, writer = await asyncio.open_connection(host, port, limit=2**26)
        writer.write(request)
        await writer.drain()
        return reader, writer

    async def one(i: int, started: float):
        session = uuid.uuid4().hex
        body = json.dumps({"data": [PROMPTS[i % len(PROMPTS)], "dico-tiny", "non-ar", gen, 32, methods, "", True, "",
                                    None], "fn_index": run, "session_hash": session, "trigger_id": None,
                           "event_data": None}).encode()
        reader, writer = await exchange(b"POST /gradio_api/queue/join HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n"
                                        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                        % (len(body), body))
        await reader.read()
        writer.close()
        reader, writer = await exchange(f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: soak"
                                        f"\r\nConnection: close\r\n\r\n".encode())
        try:
            while line := await reader.readline():
                if not line.startswith(b"data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("msg") != "process_completed":
                    continue
                seconds, output = time.perf_counter() - started, message.get("output") or {}
                if not message.get("success"):
                    error = str(output.get("error"))
                    return refused(error), seconds, error
                status, answers = output["data"][:2]
                return served(status, answers, methods), seconds, status[:200]
            return "no answer", time.perf_counter() - started, "the stream ended without a result"
        finally:
            writer.close()

    async def burst():
        started = time.perf_counter()
        return await asyncio.gather(*(one(i, started) for i in range(n)))
    with ThreadPoolExecutor(1) as alone:        # a loop of its own, whatever loop the caller's thread runs
        return alone.submit(asyncio.run, burst()).result()


def percentiles(seconds: list[float]) -> str:
    if len(seconds) < 2:
        return "n/a"
    q = statistics.quantiles(seconds, n=100, method="inclusive")
    return f"p50 {q[49]:.1f} s, p90 {q[89]:.1f} s, p99 {q[98]:.1f} s, max {max(seconds):.1f} s"


def tally(outcomes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind, _, _ in outcomes:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500, help="runs, each from a new session (default 500)")
    parser.add_argument("--warmup", type=int, default=50, help="sessions before the first memory reading (50)")
    parser.add_argument("--every", type=int, default=50, help="sessions between memory readings (50)")
    parser.add_argument("--session-cap", type=int, default=None, help="the server's session cap (default: "
                        "LIMITS.sessions; a smaller one reaches past it sooner, env DICO_SESSION_CAP)")
    parser.add_argument("--clients", type=int, default=1, help="sessions running at once (default 1)")
    parser.add_argument("--arenas", type=int, default=None, help="the server's glibc malloc arenas (default: "
                        "LIMITS.malloc_arenas; 0 glibc's own, env DICO_MALLOC_ARENAS)")
    parser.add_argument("--gen", type=int, default=96, help="gen_length of the sessions' runs (default 96)")
    parser.add_argument("--concurrent", type=int, default=None, help="clients at once, all must be right "
                        "(default: the app's line, LIMITS.queue; 0 skips)")
    parser.add_argument("--burst", type=int, default=200, help="clients at once, each a result or busy (200; 0 skips)")
    parser.add_argument("--burst-gen", type=int, default=48, help="gen_length of the concurrent runs (48)")
    parser.add_argument("--client-timeout", type=float, default=60.0, help="seconds a client waits for a read "
                        "(default 60; 0: gradio_client's own, 5 s a request and none for the stream)")
    parser.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "dico-soak-server.log")
    return parser.parse_args(argv)


def sessions(soak: Soak, args, pid: int, missed: list) -> None:
    """``args.sessions`` runs, each from a new session, ``args.clients`` of them at a time; resident memory every
    ``args.every`` sessions after the warm-up (with the machine's load, which slows runs but moves no memory)."""
    outcomes, memory, lock = [], [], threading.Lock()

    def one(i):
        outcome = soak.one_session(PROMPTS[i % len(PROMPTS)])
        with lock:
            outcomes.append(outcome)
            n = len(outcomes)
            if n == args.warmup or n % args.every == 0 or n == args.sessions:
                memory.append((n, rss_mb(pid)))
                print(f"  {n} sessions: {memory[-1][1]:.0f} MB, {tally(outcomes)}, load {os.getloadavg()[0]:.1f}",
                      flush=True)
    with ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(one, range(args.sessions)))
    memory.sort()
    after = [(n, mb) for n, mb in memory if n >= args.warmup]
    counts = tally(outcomes)
    print(f"sessions: {args.sessions} runs from new sessions, {args.clients} at a time (gen {args.gen}, attention "
          f"on): {counts}; latency {percentiles([s for k, s, _ in outcomes if k == 'right'])}")
    if len(after) > 1:
        growth = after[-1][1] - after[0][1]
        slope = growth / (after[-1][0] - after[0][0]) * 100
        print(f"resident memory: {after[0][1]:.0f} MB after {after[0][0]} sessions, {after[-1][1]:.0f} MB after "
              f"{after[-1][0]}: {growth:+.1f} MB ({slope:+.2f} MB per 100 sessions; target at most "
              f"{GROWTH_MB:.0f} MB over 500)")
        if growth > GROWTH_MB * (after[-1][0] - after[0][0]) / 450:
            missed.append("memory growth")
    if counts.get("right", 0) != args.sessions:
        missed.append("sessions")
        print("  not right:", [o for o in outcomes if o[0] != "right"][:5])


def at_once(soak: Soak, n: int, gen: int, missed: list) -> None:
    """``n`` clients at once, all must be right (a full line's worth)."""
    full = soak.at_once(n, gen)
    print(f"concurrent: {n} clients at once (gen {gen}): {tally(full)}; latency {percentiles([s for _, s, _ in full])}")
    if tally(full).get("right", 0) != n:
        missed.append("concurrent")
        print("  not right:", [o for o in full if o[0] != "right"][:5])


def burst(soak: Soak, n: int, gen: int, missed: list) -> None:
    """``n`` clients at once, each served (a result, or its partial answers at the run's time limit) or told busy:
    first over bare HTTP (the server's own answer times), then through gradio_client (what a Python client sees,
    its threads sharing these cores)."""
    for how, send in (("bare HTTP", lambda: bare_burst(soak.url, n, gen)),   # each returns once all have answers
                      ("gradio_client", lambda: soak.at_once(n, gen))):
        outcomes = send()
        counts = tally(outcomes)
        busy = [s for k, s, _ in outcomes if k == "busy"]
        served = [s for k, s, _ in outcomes if k in ("right", "stopped")]
        print(f"burst, {how}: {n} clients at once (gen {gen}, {len(METHODS)} lanes, attention on): {counts}; results "
              f"{percentiles(served)}; busy answered in {percentiles(busy)}; load {os.getloadavg()[0]:.1f}",
              flush=True)
        if len(served) + len(busy) != n:
            missed.append(f"burst ({how})")
            print("  neither:", [o for o in outcomes if o[0] not in ("right", "stopped", "busy")][:5])
        example = next((t for k, _, t in outcomes if k == "busy"), "")
        if example:
            print(f"  the busy message: {example}")


def bad_inputs(soak: Soak, pid: int, missed: list) -> None:
    """Every kind of bad input names its field; one more run after them is right."""
    client = soak.client()
    bad = [(field, soak.run(client, **kwargs)) for field, kwargs in BAD]
    unclear = [(field, text) for field, (kind, _, text) in bad if kind != "refused" or field not in text]
    print(f"bad inputs: {len(BAD)} kinds, {len(BAD) - len(unclear)} came back as a message naming the field")
    for field, text in unclear:
        print(f"  {field}: {text[:160]}")
    if unclear:
        missed.append("bad inputs")
    last = soak.run(client)
    soak.close(client)
    print(f"after: one more run is {last[0]} ({last[2][:60]}); {rss_mb(pid):.0f} MB at the end")
    if last[0] != "right":
        missed.append("after")


def main(argv=None) -> int:
    args = parse_args(argv)
    from dico_ui.limits import LIMITS
    concurrent = LIMITS.queue if args.concurrent is None else args.concurrent
    if args.session_cap is not None:
        os.environ["DICO_SESSION_CAP"] = str(args.session_cap)
    if args.arenas is not None:
        os.environ["DICO_MALLOC_ARENAS"] = str(args.arenas)
    server, url = start_server(args.log)
    missed: list[str] = []
    try:
        soak = Soak(url, args.gen, args.client_timeout)
        print(f"server {url} (pid {server.pid}, log {args.log}); {rss_mb(server.pid):.0f} MB at start", flush=True)
        sessions(soak, args, server.pid, missed)
        if concurrent:
            at_once(soak, concurrent, args.burst_gen, missed)
        if args.burst:
            burst(soak, args.burst, args.burst_gen, missed)
        bad_inputs(soak, server.pid, missed)
    finally:
        server.terminate()
        server.wait(30)
    tracebacks = args.log.read_text(errors="replace").count("Traceback")
    print(f"server log: {tracebacks} traceback(s)")
    if tracebacks:
        missed.append("tracebacks")
    print("targets missed: " + ", ".join(missed) if missed else "every target met")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
