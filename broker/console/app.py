"""The console's ASGI app (Starlette): a page per concern, rendered on the server from Jinja2 templates.

A page's changing part is the template's ``live`` block; console.js asks for it alone (header
X-Console-Live) every REFRESH_S seconds while the page is visible and swaps it in. Data come from state.py
through a cache that lives a little less than a refresh, so any number of open pages of one kind cost the
cluster what one does. No exception reaches the browser as a trace: a cluster that cannot be read gives the
error page naming the bootstrap address (served for as long as it lasts), anything else one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from importlib.resources import files
from urllib.parse import parse_qs, quote, urlparse

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..admin import transactions
from ..admin.client import AdminError, KafkaError
from ..admin.configs import SOURCES
from . import records, state
from .client import ConsoleClient, ReadOnly
from .lag import LagHistory, chart

log = logging.getLogger("moldau.console")

REFRESH_S = 5
CACHE_S = REFRESH_S - 1  # a page refreshing every REFRESH_S always gets fresh data
ERROR_CACHE_S = 2  # a failure is asked again this soon, not at every page's every refresh
DEFAULT_COUNT = 20  # records the message browser shows
MAX_ROWS = 500  # rows of one table: what bounds a page's weight on a large cluster (lists filter by name)


class Cache:
    """Results of page data by key for CACHE_S; concurrent askers share one computation."""

    def __init__(self):
        self._entries: dict[tuple, tuple[float, asyncio.Future]] = {}

    async def get(self, key: tuple, compute) -> object:
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is None or entry[0] < now:
            for stale in [k for k, (expires, _) in self._entries.items() if expires < now]:
                del self._entries[stale]
            future = asyncio.ensure_future(compute())
            self._entries[key] = entry = (now + CACHE_S, future)
            future.add_done_callback(lambda f, key=key: self._failed(key, f))
        return await asyncio.shield(entry[1])

    def _failed(self, key: tuple, future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            entry = self._entries.get(key)
            if entry is not None and entry[1] is future:
                self._entries[key] = (min(entry[0], time.monotonic() + ERROR_CACHE_S), future)


def _timestamp(ms: int | None) -> str:
    if ms is None or ms < 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _duration(ms: int | None) -> str:
    if ms is None:
        return ""
    s = ms // 1000
    return f"{s // 3600}h {s // 60 % 60}m {s % 60}s" if s >= 3600 else f"{s // 60}m {s % 60}s" if s >= 60 else f"{s}s"


def _parse_time(text: str) -> int:
    """A timestamp field: ms since the epoch, or an ISO date and time (UTC unless it says otherwise)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


class Console:
    def __init__(self, client: ConsoleClient, bootstrap: str, max_transaction_timeout_ms: int):
        self.client = client
        self.bootstrap = bootstrap
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self.cache = Cache()
        self.rates = state.Rates()
        self.history = LagHistory()
        self.started = time.monotonic()
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("broker.console", "templates"), autoescape=True,
            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(timestamp=_timestamp, duration=_duration, url=lambda s: quote(str(s), safe=""),
                                      source=lambda code: SOURCES.get(code, str(code)))
        static = files("broker.console") / "static"
        self.static = {name: (static / name).read_bytes() for name in ("console.js", "console.css")}

    # --- rendering ---------------------------------------------------------------------------------

    def render(self, request: Request, name: str, status: int = 200, **context) -> HTMLResponse:
        template = self.templates.get_template(name)
        context.update(bootstrap=self.bootstrap, refresh_s=REFRESH_S, allow_writes=self.client.allow_writes,
                       max_rows=MAX_ROWS,
                       requests_last_minute=self.client.requests_last_minute(), path=request.url.path)
        if request.headers.get("x-console-live") and "live" in template.blocks:
            body = "".join(template.blocks["live"](template.new_context(context)))
        else:
            body = template.render(context)
        return HTMLResponse(body, status, headers={"Cache-Control": "no-store"})

    async def cached(self, key: tuple, compute):
        return await self.cache.get(key, compute)

    # --- pages -------------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        view = await self.cached(("cluster",), lambda: state.cluster(self.client))
        return self.render(request, "overview.html", cluster=view)

    async def cluster(self, request: Request) -> Response:
        view = await self.cached(("cluster",), lambda: state.cluster(self.client))
        return self.render(request, "cluster.html", cluster=view)

    async def topics(self, request: Request) -> Response:
        rows = await self.cached(("topics",), lambda: state.topics(self.client, self.rates))
        q = request.query_params.get("q", "")
        return self.render(request, "topics.html", topics=[t for t in rows if q.lower() in t.name.lower()], q=q)

    async def topic(self, request: Request) -> Response:
        name = request.path_params["name"]
        live = bool(request.headers.get("x-console-live"))  # the partitions alone: configs and records are read on load
        view = await self.cached(("topic", name, live), lambda: state.topic(self.client, name, configs=not live))
        q = request.query_params
        browser = {"partition": q.get("partition", ""), "count": q.get("count", str(DEFAULT_COUNT)),
                   "offset": q.get("offset", ""), "timestamp": q.get("timestamp", ""),
                   "read_committed": q.get("isolation") == "read_committed"}
        messages = problem = None
        if not live:
            try:
                partition = int(browser["partition"] or (view.partitions[0].partition if view.partitions else 0))
                browser["partition"] = str(partition)
                count = int(browser["count"] or DEFAULT_COUNT)
                offset = int(browser["offset"]) if browser["offset"].strip() else None
                timestamp = _parse_time(browser["timestamp"]) if browser["timestamp"].strip() else None
            except ValueError:
                problem = "partition, count and offset are numbers; timestamp is ms since the epoch or ISO 8601"
            else:
                if view.partitions:
                    try:
                        messages = await records.browse(self.client, name, partition, count=count, offset=offset,
                                                        timestamp_ms=timestamp,
                                                        read_committed=browser["read_committed"])
                    except KafkaError as exc:
                        problem = state.refused(exc)
        return self.render(request, "topic.html", topic=view, browser=browser, messages=messages, problem=problem)

    async def groups(self, request: Request) -> Response:
        rows = await self.cached(("groups",), lambda: state.groups(self.client, self.history))
        q = request.query_params.get("q", "")
        return self.render(request, "groups.html", groups=[g for g in rows if q.lower() in g.group_id.lower()], q=q)

    async def group(self, request: Request) -> Response:
        group_id = request.path_params["group_id"]
        view = await self.cached(("group", group_id), lambda: state.group(self.client, group_id, self.history))
        return self.render(request, "group.html", group=view, chart=chart(self.history.samples(group_id)))

    async def transactions(self, request: Request) -> Response:
        view = await self.cached(("transactions",),
                                 lambda: state.transactions_view(self.client, self.max_transaction_timeout_ms))
        return self.render(request, "transactions.html", txns=view, notice=request.query_params.get("notice"))

    async def abort(self, request: Request) -> Response:
        if not self.client.allow_writes:
            raise HTTPException(403, "the console was started without --allow-writes")
        origin = request.headers.get("origin")
        if origin and urlparse(origin).netloc != request.headers.get("host"):  # another site's form, posted here
            raise HTTPException(403, f"an abort asked from another site ({origin}) is refused")
        form = parse_qs((await request.body()).decode("utf-8", "replace"))  # (a plain form: no multipart parser)
        try:
            topic, partition, start = form["topic"][0], int(form["partition"][0]), int(form["start_offset"][0])
        except (KeyError, ValueError):
            raise HTTPException(400, "topic, partition and start_offset are needed") from None
        try:
            txn = await transactions.abort(self.client, topic, partition, start, None, None, None)
            notice = f"aborted the transaction of producer {txn.producer_id} at offset {start} in {topic}-{partition}"
        except AdminError as exc:
            notice = f"not aborted: {exc}"
        log.info("abort from %s: %s", request.client.host if request.client else "?", notice)
        self.cache = Cache()  # what the pages show has changed
        return RedirectResponse(f"/transactions?notice={quote(notice)}", 303)

    async def acls(self, request: Request) -> Response:
        rows, why = await self.cached(("acls",), lambda: state.acls(self.client))
        return self.render(request, "acls.html", acls=rows, why=why)

    async def users(self, request: Request) -> Response:
        rows, why = await self.cached(("users",), lambda: state.scram_users(self.client))
        return self.render(request, "users.html", users=rows, why=why)

    async def stats(self, request: Request) -> Response:
        return JSONResponse({"bootstrap": self.bootstrap, "refresh_s": REFRESH_S,
                             "requests_last_minute": self.client.requests_last_minute(),
                             "requests_by_api": dict(self.client.sent),
                             "uptime_s": round(time.monotonic() - self.started, 1)})

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.static:
            raise HTTPException(404, f"no {name}")
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        return Response(self.static[name], media_type=kind, headers={"Cache-Control": "max-age=3600"})

    # --- failures ----------------------------------------------------------------------------------

    async def cluster_error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, KafkaError) and exc.code in state.NOT_AUTHORIZED:
            title, status = "Not authorized", 403
        elif isinstance(exc, ReadOnly):
            title, status = "Read-only console", 403
        elif isinstance(exc, KafkaError):
            title, status = "The cluster answered with an error", 502
        else:
            title, status = "Cannot reach the cluster", 503
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return self.render(request, "error.html", status, title=title, message=str(exc))

    async def http_error(self, request: Request, exc: HTTPException) -> Response:
        return self.render(request, "error.html", exc.status_code, title=f"{exc.status_code}", message=exc.detail)

    async def internal_error(self, request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return self.render(request, "error.html", 500, title="The console failed",
                           message=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])


def make_app(client: ConsoleClient, bootstrap: str,
             max_transaction_timeout_ms: int = state.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS) -> Starlette:
    console = Console(client, bootstrap, max_transaction_timeout_ms)
    routes = [
        Route("/", console.overview), Route("/cluster", console.cluster), Route("/topics", console.topics),
        Route("/topics/{name}", console.topic), Route("/groups", console.groups),
        Route("/groups/{group_id:path}", console.group), Route("/transactions", console.transactions),
        Route("/transactions/abort", console.abort, methods=["POST"]), Route("/acls", console.acls),
        Route("/users", console.users), Route("/stats", console.stats), Route("/static/{name}", console.asset),
    ]
    app = Starlette(routes=routes, exception_handlers={
        AdminError: console.cluster_error, HTTPException: console.http_error, Exception: console.internal_error})
    app.state.console = console
    return app
