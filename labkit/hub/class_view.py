"""The instructor's class view, live from the hub: every learner's progress, no files handed in.

A JupyterHub service (jupyterhub_setup.py starts it; the hub routes ``/services/class-view/`` to it). It opens
only for a user the hub grants ``access:services!service=class-view``: the admins, that is the
instructor. A learner is refused (403); they see their own progress in their own workspace
(``dashboards/progress.ipynb``), and their home is theirs alone, so no learner reads another's work.

Per learner (each user of the hub who is not an admin), the page shows whether their server runs (or is
starting) and when they were last active, then one row per lab they opened (a results summary exists):
quiz, exercises passed out of the lab's total (counted in the course's notebook), predictions, or
"opened, nothing attempted". The summaries are read by `read_progress`:

- from their home on this machine (``~/work/results/labNN.json``), with the service's rights (it runs
  as the hub's user, root, so it reads homes of mode 0700), taking only regular files the learner owns;
- else, where homes are volumes of other machines (zero-to-jupyterhub on Kubernetes), through their
  running server's contents API, with the service's ``access:servers`` scope. A stopped server there
  shows no results until it runs again.

The results are self-reported: files in the learner's own workspace, written by their kernel, which
they can also edit. The page says so. The page reloads itself every 30 seconds. ``?lang=en`` shows it
in English.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence
from urllib.parse import urlencode, urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from tornado import ioloop, web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from labkit.assess.progress import LABS, LabProgress, read_progress
from labkit.hub.results import copy_own_results, exercise_totals, local_account
from labkit.hub.settings import REPO, RESULTS
from labkit.i18n import set_language, t

REFRESH_S = 30


@dataclass(frozen=True)
class Learner:
    name: str
    running: bool
    last_activity: str | None
    labs: list[LabProgress]
    source: str                 # where the results came from, in words
    starting: bool = False      # a spawn is pending
    opened: frozenset[str] = frozenset()      # the labs with a results summary

    def state(self) -> str:
        if self.running:
            return t("运行中", "running")
        return t("启动中", "starting") if self.starting else t("未运行", "stopped")


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


async def learner(hub: Hub, user: dict) -> Learner:
    server = (user.get("servers") or {}).get("")
    running = bool(server and server.get("ready"))
    starting = bool(server and server.get("pending") == "spawn")
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
        opened = frozenset(lab for lab in LABS if (Path(tmp) / f"lab{lab}.json").is_file())
    return Learner(user["name"], running, user.get("last_activity"), labs, source, starting, opened)


CELL = "border:1px solid #ccc;padding:3px 8px;text-align:left"


def _table(cls: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    header = "".join(f"<th style='{CELL};background:#f3f3f3'>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='{CELL}'>{html.escape(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table class='{cls}' style='border-collapse:collapse;font-size:90%;margin:4px 0 10px 0'>" \
           f"<tr>{header}</tr>{body}</table>"


def lab_cells(p: LabProgress, total: int | None) -> list[str]:
    """quiz, exercises, predictions, note: one lab a learner opened."""
    if not (p.quiz_answered or p.exercises_attempted or p.predictions):
        return ["—", "—", "—", t("已打开，尚未作答", "opened, nothing attempted")]
    quiz = (t(f"{p.quiz_first_right}/{p.quiz_size or p.quiz_answered}（已答 {p.quiz_answered}）",
              f"{p.quiz_first_right}/{p.quiz_size or p.quiz_answered} (answered {p.quiz_answered})")
            if p.quiz_answered else "—")
    of = total if total is not None else p.exercises_attempted
    exercises = (t(f"通过 {p.exercises_passed}/{of}（一次通过 {p.exercises_first_try}）",
                   f"passed {p.exercises_passed}/{of} (first try {p.exercises_first_try})")
                 if p.exercises_attempted else t(f"0/{of}，未尝试", f"0/{of}, none attempted"))
    judged = p.judged_predictions
    predictions = (t(f"{len(p.predictions)} 个，对 {p.predictions_right}/{len(judged)}",
                     f"{len(p.predictions)} made, right {p.predictions_right}/{len(judged)}")
                   if p.predictions else "—")
    return [quiz, exercises, predictions, ""]


def class_rows(learners: Sequence[Learner], totals: dict[str, int]) -> list[list[str]]:
    """One row per learner and lab they opened; one row for a learner who opened none."""
    rows = []
    for x in learners:
        opened = [p for p in x.labs if p.lab in x.opened]
        rows += [[x.name, p.lab, *lab_cells(p, totals.get(p.lab))] for p in opened]
        if not opened:
            rows.append([x.name, "—", "—", "—", "—", t("还没有打开任何实验", "no lab opened yet")])
    return rows


def page(learners: Sequence[Learner], totals: dict[str, int]) -> str:
    servers = [[x.name, x.state(), (x.last_activity or "—")[:19].replace("T", " "), x.source] for x in learners]
    title = t("labkit 全班进度", "labkit class progress")
    heading = t(f"全班视图（{len(learners)} 位学习者）", f"Class view ({len(learners)} learners)")
    note = t("这些结果是学习者自报的：它们是每位学习者工作区里的文件（work/results/labNN.json），由其内核写入，"
             "学习者也能自己改写。请把它们当作进度参考，而不是经过核验的成绩。",
             "These results are self-reported: files in each learner's workspace (work/results/labNN.json), "
             "written by their kernel, which the learner can also edit. Read them as progress, not as verified "
             "grades.")
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='{REFRESH_S}'>"
            f"<title>{html.escape(title)}</title></head><body style='font-family:sans-serif;margin:16px'>"
            f"<h3>{html.escape(title)}</h3>"
            + _table("labkit-hub-learners", [t("学习者", "learner"), t("服务器", "server"),
                                             t("最近活动（UTC）", "last active (UTC)"), t("结果来自", "results from")],
                     servers)
            + f"<h4 style='margin:2px 0'>{html.escape(heading)}</h4>"
            + _table("labkit-class-table", [t("学习者", "learner"), t("实验", "lab"),
                                            t("测验（第一次就答对）", "quiz (first attempt)"), t("练习", "exercises"),
                                            t("预测", "predictions"), t("说明", "note")],
                     class_rows(learners, totals))
            + f"<p class='labkit-self-reported' style='color:#444;font-size:90%'>{html.escape(note)}</p>"
            f"<div style='color:#666;font-size:85%'>{html.escape(t(f'每 {REFRESH_S} 秒自动刷新。', f'Reloads every {REFRESH_S} s.'))}"
            "</div></body></html>")


class ClassViewHandler(HubOAuthenticated, web.RequestHandler):
    def initialize(self, hub: Hub, totals: dict[str, int]) -> None:
        self.hub, self.totals = hub, totals

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
        self.finish(page(learners, self.totals))


def make_app() -> web.Application:
    prefix = os.environ["JUPYTERHUB_SERVICE_PREFIX"]
    hub = Hub(os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"],
              os.environ.get("LABKIT_HUB_PUBLIC_URL", "http://127.0.0.1:8000"))
    totals = exercise_totals(Path(os.environ.get("LABKIT_HUB_COURSE", "").strip() or REPO / "labs"))
    return web.Application([
        (prefix, ClassViewHandler, {"hub": hub, "totals": totals}),
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
