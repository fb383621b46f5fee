"""The instructor's class view, live from the hub: every learner's progress, no files handed in.

A JupyterHub service (config.py starts it; the hub routes ``/services/class-view/`` to it). It opens
only for a user the hub grants ``access:services!service=class-view``: the admins, that is the
instructor. A learner is refused (403); they see their own progress in their own workspace
(``dashboards/progress.ipynb``), and their home is theirs alone, so no learner reads another's work.

Per learner (each user of the hub who is not an admin), the page shows whether their server runs and
when they were last active, then the class table of `labkit.assess.progress.class_html` built from
their results summaries, read by `read_progress`:

- from their home on this machine (``~/work/results/labNN.json``), with the service's rights (it runs
  as the hub's user, root, so it reads homes of mode 0700), taking only regular files the learner owns;
- else, where homes are volumes of other machines (zero-to-jupyterhub on Kubernetes), through their
  running server's contents API, with the service's ``access:servers`` scope. A stopped server there
  shows no results until it runs again.

The page reloads itself every 30 seconds. ``?lang=en`` shows it in English.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import pwd
import signal
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence
from urllib.parse import urlencode, urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from tornado import ioloop, web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from labkit.assess.progress import LABS, LabProgress, class_html, read_progress
from labkit.hub.settings import RESULTS, WORK
from labkit.i18n import set_language, t

REFRESH_S = 30
MAX_SUMMARY_BYTES = 4 * 2**20       # a lab's results summary is a few kB


@dataclass(frozen=True)
class Learner:
    name: str
    running: bool
    last_activity: str | None
    labs: list[LabProgress]
    source: str                 # where the results came from, in words


class Hub:
    """The hub's REST API with the service's token, and the learners' servers through the public proxy."""

    def __init__(self, api_url: str, token: str, public_url: str):
        self.api_url, self.token, self.public_url = api_url.rstrip("/"), token, public_url.rstrip("/")
        self.http = AsyncHTTPClient()

    async def get(self, url: str, **headers: str) -> bytes:
        request = HTTPRequest(url, headers={"Authorization": f"token {self.token}", **headers}, request_timeout=15)
        return (await self.http.fetch(request)).body

    async def users(self) -> list[dict]:
        """Every user of the hub, page by page."""
        users, offset = [], 0
        while True:
            page = json.loads(await self.get(f"{self.api_url}/users?{urlencode({'offset': offset, 'limit': 200})}",
                                             Accept="application/jupyterhub-pagination+json"))
            users += page["items"]
            if not page["_pagination"].get("next"):
                return users
            offset = page["_pagination"]["next"]["offset"]

    async def results_through_server(self, server_url: str, folder: Path) -> None:
        """Copy the server's ``results/labNN.json`` files into ``folder`` (a missing one is skipped)."""
        for lab in LABS:
            url = f"{self.public_url}{server_url}api/contents/{RESULTS}/lab{lab}.json?content=1&type=file&format=text"
            try:
                model = json.loads(await self.get(url))
            except HTTPClientError as exc:
                if exc.code == 404:
                    continue
                raise
            (folder / f"lab{lab}.json").write_text(model["content"], encoding="utf-8")


def local_account(name: str) -> pwd.struct_passwd | None:
    """The learner's account when their home is on this machine."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry if Path(entry.pw_dir).is_dir() else None


def copy_own_results(account: pwd.struct_passwd, folder: Path) -> None:
    """Copy the learner's ``~/work/results/labNN.json`` into ``folder``: each only if it is a regular file
    the learner owns, opened without following a link and without blocking. The service reads as root, so
    a learner's link to a file of someone else, or a named pipe that would hang the page, is left out."""
    results = Path(account.pw_dir) / WORK / RESULTS
    for lab in LABS:
        try:
            fd = os.open(results / f"lab{lab}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_uid == account.pw_uid and info.st_size <= MAX_SUMMARY_BYTES:
                (folder / f"lab{lab}.json").write_bytes(f.read(MAX_SUMMARY_BYTES))


async def learner(hub: Hub, user: dict) -> Learner:
    server = (user.get("servers") or {}).get("")
    running = bool(server and server.get("ready"))
    account = local_account(user["name"])
    with tempfile.TemporaryDirectory() as tmp:
        if account is not None:
            copy_own_results(account, Path(tmp))
            source = t("本机主目录", "home on this machine")
        elif running:
            await hub.results_through_server(server["url"], Path(tmp))
            source = t("经由其服务器", "through their server")
        else:
            source = t("服务器未运行，暂无", "none: server not running")
        labs = read_progress(tmp)
    return Learner(user["name"], running, user.get("last_activity"), labs, source)


def page(learners: Sequence[Learner]) -> str:
    cell = "border:1px solid #ccc;padding:3px 8px;text-align:left"
    head = [t("学习者", "learner"), t("服务器", "server"), t("最近活动（UTC）", "last active (UTC)"),
            t("结果来自", "results from")]
    rows = "".join(
        "<tr>" + "".join(f"<td style='{cell}'>{html.escape(v)}</td>" for v in (
            x.name, t("运行中", "running") if x.running else t("未运行", "stopped"),
            (x.last_activity or "—")[:19].replace("T", " "), x.source)) + "</tr>"
        for x in learners)
    header = "".join(f"<th style='{cell};background:#f3f3f3'>{html.escape(h)}</th>" for h in head)
    title = t("labkit 全班进度", "labkit class progress")
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='{REFRESH_S}'>"
            f"<title>{html.escape(title)}</title></head><body style='font-family:sans-serif;margin:16px'>"
            f"<h3>{html.escape(title)}</h3>"
            f"<table class='labkit-hub-learners' style='border-collapse:collapse;font-size:90%'><tr>{header}</tr>{rows}"
            f"</table>{class_html([(x.name, x.labs) for x in learners])}"
            f"<div style='color:#666;font-size:85%'>{html.escape(t(f'每 {REFRESH_S} 秒自动刷新。', f'Reloads every {REFRESH_S} s.'))}"
            "</div></body></html>")


class ClassViewHandler(HubOAuthenticated, web.RequestHandler):
    def initialize(self, hub: Hub) -> None:
        self.hub = hub

    @property
    def hub_scopes(self) -> set[str]:
        # never the "any hub user" default of a service whose scopes are unset: only those granted this service
        return {f"access:services!service={os.environ.get('JUPYTERHUB_SERVICE_NAME', 'class-view')}"}

    @web.authenticated
    async def get(self) -> None:
        set_language("en" if self.get_argument("lang", "zh") == "en" else "zh")
        users = [u for u in await self.hub.users() if not u.get("admin") and u.get("kind", "user") == "user"]
        learners = await asyncio.gather(*(learner(self.hub, u) for u in sorted(users, key=lambda u: u["name"])))
        self.set_header("Cache-Control", "no-store")
        self.finish(page(learners))


def make_app() -> web.Application:
    prefix = os.environ["JUPYTERHUB_SERVICE_PREFIX"]
    hub = Hub(os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"],
              os.environ.get("LABKIT_HUB_PUBLIC_URL", "http://127.0.0.1:8000"))
    return web.Application([
        (prefix, ClassViewHandler, {"hub": hub}),
        (prefix.rstrip("/"), web.RedirectHandler, {"url": prefix}),
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
    ], cookie_secret=os.urandom(32))


def main() -> None:
    where = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    make_app().listen(where.port, where.hostname)
    loop = ioloop.IOLoop.current()
    for sig in (signal.SIGINT, signal.SIGTERM):         # the hub stops its services with these
        signal.signal(sig, lambda *_: loop.add_callback_from_signal(loop.stop))
    loop.start()


if __name__ == "__main__":
    main()
