"""WebArena-Lite: the 165 task configs, the missing-sites error, and WebArena's evaluators scoring recorded pages in
real Chromium (each page served at the URL it was recorded under, so URL checks and JavaScript locators see what
they would on the site)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamgym.envs import family
from dreamgym.envs.web import evaluators as ev
from dreamgym.envs.web.browser import BrowserPool, chromium_available
from dreamgym.envs.web.webarena_tasks import (SITE_VARS, SitesNotConfigured, config_of, fill_urls, load_configs,
                                              site_urls)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "web"
RECORDED = json.loads((FIXTURES / "recorded.json").read_text())


def test_the_165_tasks_load_with_their_evaluators():
    fam = family("webarena_lite")
    every = fam.tasks("all")
    assert len(every) == 165 and len({t.id for t in every}) == 165
    train, test = fam.tasks("train"), fam.tasks("test")
    assert len(train) + len(test) == 165
    assert not {t.goal["template_id"] for t in train} & {t.goal["template_id"] for t in test}
    kinds = {k for c in load_configs() for k in c["eval"]["eval_types"]}
    assert kinds == {"string_match", "url_match", "program_html"}
    assert fam.parse_goal(every[3].instruction)["task_id"] == every[3].goal["task_id"]
    assert fam.parse_goal("set the dial to 3") is None


def test_without_the_sites_the_error_names_the_variables_to_set():
    with pytest.raises(SitesNotConfigured) as e:
        site_urls(["shopping", "reddit"], environ={"WA_REDDIT": "http://forum.test"})
    assert "WA_SHOPPING" in str(e.value) and "set WA_SHOPPING " in str(e.value) + " "
    assert "WA_REDDIT," not in str(e.value).split("all of them")[0]
    assert site_urls(["reddit"], environ={"WA_REDDIT": "http://forum.test/"}) == {"reddit": "http://forum.test"}


@pytest.mark.skipif(not chromium_available(), reason="no Chromium at /usr/bin/chromium")
def test_an_episode_without_sites_fails_with_the_variables_named():
    with BrowserPool(1) as pool:
        env = family("webarena_lite").make_env("all", pool=pool, environ={})
        with pytest.raises(SitesNotConfigured, match="WA_SHOPPING_ADMIN"):
            env.reset(options={"task": family("webarena_lite").tasks("all")[0]})
        env.close()


def test_string_and_url_rules_match_webarena():
    assert ev.must_include("0", "there are 10 of them", tokenize=True) == 0.0  # a one-character answer is a token
    assert ev.must_include("0", "there are 0 of them", tokenize=True) == 1.0
    assert ev.exact_match("N/A", "'n/a'") == 1.0
    assert ev.strict_judge("It is open, not closed", "No, it is open", "") == 0.0  # stricter than an LLM judge
    assert ev.strict_judge("The answer: 10h 33min by bike", "10h 33min", "") == 1.0
    cfg = {"eval": {"reference_url": "http://s.test/a?x=1 |OR| http://s.test/b?x=2"}}
    assert ev.url_match(cfg, "http://s.test/b/?x=1&y=3") == 1.0
    assert ev.url_match(cfg, "http://s.test/b?x=3") == 0.0
    assert ev.reddit_get_post_url("http://f.test/f/nyc/5093/title/-/comment/7") == "http://f.test/f/nyc/5093/"
    with pytest.raises(ValueError, match="unknown helper"):
        ev._call_helper("__import__('os').system('true')", None, {})  # type: ignore[arg-type]


@pytest.mark.skipif(not chromium_available(), reason="no Chromium at /usr/bin/chromium")
def test_evaluators_agree_with_recorded_outcomes():
    urls = site_urls(list(SITE_VARS), environ=RECORDED["sites"])
    pages = {u: (FIXTURES / "pages" / f).read_text() for u, f in RECORDED["pages"].items()}

    def serve(route):
        url = route.request.url
        body = pages.get(url)
        route.fulfill(status=200 if body else 404, content_type="text/html", body=body or "<h1>Not found</h1>")

    def check(browser):
        context = browser.new_context()
        context.route("**/*", serve)
        page = context.new_page()
        got = []
        for case in RECORDED["outcomes"]:
            task = family("webarena_lite").tasks("all")[case["task"]]
            config = fill_urls(config_of(task), urls)
            page.goto(case["url"])
            got.append(ev.evaluate(config, case["answer"], page, settle_s=0.0))
        context.close()
        return got

    with BrowserPool(1) as pool:
        scores = pool.worker().call(check)
    for case, score in zip(RECORDED["outcomes"], scores):
        assert score == case["score"], f"task {case['task']} ({case['why']}): scored {score}"
