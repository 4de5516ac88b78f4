"""`dreamgym view` on real run folders made by the real code at tiny scale (a collect, an SFT run and a 1-iteration
dream run on the dial), driven in headless Chromium through Playwright: the run list, a curve, a real episode
replayed in a trained experience model beside the real one, a recorded dream beside reality; a malformed run
folder shows its problems while the rest works; nothing outside the given run folders can be read."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest

from em_helpers import trained_dial_model

from dreamgym.utils import serving
from dreamgym.commands.collect import collect, parse_mix
from dreamgym.data import read_jsonl, write_parquet
from dreamgym.view.episodes import Filter, JsonlSource
from dreamgym.view.server import create_app
from dreamgym.view.site import Site

SECRET = "TOP-SECRET-OUTSIDE-THE-RUNS-7f3a"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Real run folders: `collect` (offline data, and a Parquet copy), `sft` (a short SFT run on its oracle
    episodes, the dream's start policy) and `dream` (1 dream iteration in the trained dial experience model); a
    `broken` folder with a truncated summary, a metrics file with a garbage line and a torn trajectory file; a
    secret file beside them and a link to it inside a run folder."""
    from dreamgym.commands.train import main as train_main

    base = tmp_path_factory.mktemp("view")
    em = trained_dial_model()
    collect("dial", parse_mix("oracle:1.0"), 30, base / "collect" / "offline.jsonl", overwrite=True, progress=False)
    write_parquet(base / "collect" / "offline.parquet", read_jsonl(base / "collect" / "offline.jsonl"))
    # The recipe's small-scale dial settings (`dreamgym.commands.recipe.ENV_DEFAULTS`), as a user types them.
    dial = ["agent.history=0", "agent.show_admissible=false", "agent.system_prompt=You are an agent.",
            "rollout.max_new_tokens=10", "rollout.max_episode_steps=12"]
    common = ["--env", "dial", "--no-progress", "tensorboard=false", "eval_max_tasks=2", *dial]
    assert train_main(["--algo", "sft", *common, f"data={base / 'collect' / 'offline.jsonl'}", "sft.epochs=6",
                       "sft.batch_size=8", "optim.lr=1e-3", f"run_dir={base / 'sft'}"]) == 0
    assert train_main(["--algo", "grpo", *common, "mode=dream", f"dream.em={em}", "dream.iterations=1",
                       f"init={base / 'sft' / 'final'}", "tasks_per_iteration=2", "group_size=2",
                       "eval_at_start=false", f"run_dir={base / 'dream'}"]) == 0
    broken = base / "broken"
    broken.mkdir()
    shutil.copy(base / "dream" / "config.yaml", broken / "config.yaml")
    text = (base / "dream" / "summary.json").read_text()
    (broken / "summary.json").write_text(text[: len(text) // 2])
    rows = (base / "dream" / "metrics.jsonl").read_text().splitlines()
    (broken / "metrics.jsonl").write_text("\n".join([rows[0], "{not json", *rows[1:]]) + "\n")
    episodes = (base / "collect" / "offline.jsonl").read_text().splitlines()
    (broken / "episodes.jsonl").write_text("\n".join(episodes[:3]) + "\n" + episodes[3][:200])
    (base / "secret.jsonl").write_text(json.dumps({"task": {"id": SECRET}, "steps": [], "note": SECRET}) + "\n")
    (base / "dream" / "leak.jsonl").symlink_to(base / "secret.jsonl")
    return {"base": base, "em": em, "dirs": [base / n for n in ("collect", "sft", "dream", "broken")]}


@pytest.fixture(scope="session")
def server(runs):
    site = Site(runs["dirs"], [runs["em"]], page_size=10)
    with serving.start(serving.make_server(create_app(site))) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser():
    """Chromium through Playwright's sync API, which keeps an asyncio loop running on this thread while it is open:
    closed with this module, so no later test in the process meets that loop (`asyncio.run` refuses to start)."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield b
        b.close()


def test_the_server_listens_on_loopback(server):
    assert server.host == "127.0.0.1"


def test_run_list_curve_and_real_vs_dream_episode_in_a_browser(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(server.base + "/")
    names = page.locator("#runs tbody tr td:first-child a").all_inner_texts()
    assert names == ["collect", "sft", "dream", "broken"]
    assert "problem" in page.locator("#runs tbody tr").nth(3).inner_text()

    page.get_by_role("link", name="dream", exact=True).click()
    assert page.locator("h1").inner_text() == "dream"
    # the held-out curve: eval.jsonl's final evaluation with its interval band, and the training curves
    assert page.locator("#curves svg.chart").count() >= 2
    heldout = page.locator("#curves svg.chart").first
    assert "held-out" in heldout.get_attribute("aria-label")
    assert heldout.locator("polyline.series").count() == 1 and heldout.locator("polygon.band").count() == 1
    assert re.search(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", page.locator("#results").inner_text())  # success [95% CI]
    assert page.locator("#machine").inner_text().count("cpu") >= 1
    # the link to a file outside the run folder is not offered, and is reported
    assert "leak.jsonl" not in page.locator("#files").inner_text()
    assert "outside the run folder" in page.locator("#problems").inner_text()

    # a real episode replayed in the trained experience model, step by step
    page.goto(server.base + "/")
    page.get_by_role("link", name="collect", exact=True).click()
    page.locator("#files a").first.click()
    assert page.locator("#episodes tbody tr").count() == 10  # page_size
    page.locator("#episodes tbody tr a").nth(2).click()
    page.locator("#replay-form select[name=em]").select_option(index=1)
    page.locator("#replay-form button").click()
    page.wait_for_selector("#steps li.step")
    summary = page.locator("#compare-summary").inner_text()
    assert "real: recorded real episode" in summary and "free-running" in summary
    steps = page.locator("#steps li.step[id]")
    assert steps.count() >= 2
    first = steps.first
    assert first.locator(".side.real pre.next-state").inner_text().startswith("[dial]")
    assert first.locator(".side.dream pre.next-state").inner_text().startswith("[dial]")
    assert first.locator(".reasoning").count() == 1 and first.locator(".examples summary").inner_text().endswith(
        "retrieved example(s)")
    n_differ = int(page.locator("#n-differ").inner_text())
    assert page.locator("#steps li.step.differs").count() >= n_differ
    assert page.locator("#steps li.step.differs mark.diff").count() >= n_differ
    page.screenshot(path=str(tmp_path / "episode.png"), full_page=True)
    assert (tmp_path / "episode.png").stat().st_size > 10_000


def test_a_recorded_dream_beside_the_real_environment(server, browser):
    page = browser.new_page()
    page.goto(server.base + "/runs/2/")
    link = page.get_by_role("link", name=re.compile(r"dream episodes"))
    link.click()
    rows = page.locator("#episodes tbody tr")
    assert rows.count() >= 1 and "synthetic" in rows.first.inner_text()
    rows.first.locator("a").click()
    assert "real: the real environment, same actions" in page.locator("#compare-summary").inner_text()
    step = page.locator("#steps li.step[id]").first
    assert step.locator(".side.real").count() == 1 and step.locator(".side.dream").count() == 1
    assert step.locator(".reasoning").inner_text().startswith("model's reasoning")


def test_a_malformed_run_shows_its_problems_and_the_rest_keeps_working(server, browser):
    page = browser.new_page()
    page.goto(server.base + "/runs/3/")
    problems = page.locator("#problems").inner_text()
    assert "summary.json: not valid JSON" in problems
    assert "metrics.jsonl: 1 line(s) are not JSON objects" in problems
    assert page.locator("#curves svg.chart").count() >= 1  # the metrics rows that parse are still charted
    page.locator("#files a").first.click()
    assert "truncated record" in page.locator("#problems").inner_text()
    assert page.locator("#episodes tbody tr").count() == 3
    page.goto(server.base + "/")
    assert page.locator("#runs tbody tr").count() == 4
    page.goto(server.base + "/runs/0/files/0/1")
    assert page.locator("#steps li.step[id]").count() >= 1


def test_paths_outside_the_run_folders_cannot_be_read(server, runs):
    secret = runs["base"] / "secret.jsonl"
    probes = ["/static/../secret.jsonl", "/static/..%2f..%2fsecret.jsonl", "/static/%2e%2e/%2e%2e/pyproject.toml",
              f"/static/{secret}", "/runs/../secret.jsonl", "/runs/0/files/..%2f..%2fsecret.jsonl/",
              "/runs/-1/", "/runs/4/", "/runs/2/files/99/", "/runs/0/files/0/99999", f"/runs/0/files/{secret}/",
              "/curves?run=7", "/runs/0/files/0/0?em=5", "/static/view.css/../../../secret.jsonl"]
    with httpx.Client(base_url=server.base) as c:
        for url in probes:
            r = c.get(url)
            assert r.status_code in (400, 404, 422), url
            assert SECRET not in r.text and r.headers["content-type"] == "application/json", url
            assert r.json()["error"]["message"], url
        # every page the site links to, followed from the index: none shows the secret
        seen, todo = set(), ["/"]
        while todo and len(seen) < 150:
            url = todo.pop()
            if url in seen:
                continue
            seen.add(url)
            r = c.get(url)
            assert r.status_code == 200, url
            assert SECRET not in r.text, url
            for href in re.findall(r'href="([^"#]+)"', r.text):
                target = urljoin(url, href.replace("&amp;", "&"))
                if target.startswith("/") and "em=" not in target:
                    todo.append(target)
        assert len(seen) > 20


def test_pages_parse_only_their_own_records(runs, tmp_path):
    """A list page reads its records by offset: a record beyond the page that is damaged does not matter."""
    lines = (runs["base"] / "collect" / "offline.jsonl").read_text().splitlines()
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines[:20] + ["{damaged"] + lines[20:]) + "\n")
    src = JsonlSource(path, tmp_path.resolve())
    assert src.count() == 31
    page = src.page(0, 10, Filter())
    assert [r.index for r in page.rows] == list(range(10)) and page.next_start == 10 and page.scanned == 10
    bad = src.page(20, 1, Filter()).rows[0]
    assert bad.error.startswith("t.jsonl:21: not a JSON record")
    won = src.page(0, 5, Filter(outcome="lost"))
    assert won.rows == [] or all(not r.won for r in won.rows)


def test_static_export_links_resolve(runs, tmp_path):
    from dreamgym.view.command import main

    out = tmp_path / "site"
    assert main([*map(str, runs["dirs"]), "--em", str(runs["em"]), "--export", str(out), "--export-episodes",
                 "3"]) == 0
    pages = list(out.rglob("*.html"))
    assert len(pages) > 10
    for p in pages:
        html = p.read_text()
        assert SECRET not in html
        for href in re.findall(r'(?:href|src)="([^"#?]+)"', html):
            assert not href.startswith("/"), (p, href)
            assert (p.parent / href).resolve().exists(), (p, href)


def test_command_line_errors_are_one_line(tmp_path, capsys):
    from dreamgym.view.command import main

    with pytest.raises(SystemExit):
        main(["--port", "70000"])
    assert main([str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main([str(tmp_path), "--em", str(tmp_path)]) == 2


def test_webshop_states_render_as_the_shops_own_pages(tmp_path):
    """A WebShop state (each page kind of a real episode) is drawn as the page the shop renders: mapped back to an
    abstract state it is the state itself; a product the catalog lacks falls back to text."""
    from dreamgym.envs.webshop.pages import html_to_abstract
    from dreamgym.view.states import shop_page

    collect("webshop", parse_mix("shopper:1.0"), 1, tmp_path / "ws.jsonl", overwrite=True, progress=False)
    traj = next(iter(read_jsonl(tmp_path / "ws.jsonl")))
    kinds = set()
    for step in traj.steps:
        html = shop_page(step.next_state, traj.task, step.info.get("catalog_key"))
        assert html is not None and "<html" in html
        assert html_to_abstract(html) == step.next_state
        kinds.add(step.next_state.splitlines()[0].split()[1])
    assert {"results", "item", "done"} <= kinds
    assert shop_page("[page] item B0NOTREAL00\n[button] Buy Now", traj.task) is None


def test_a_run_logged_before_the_metric_namespaces_shows_under_todays_names(tmp_path):
    """metrics.jsonl rows as runs wrote them before the namespaces (the run loop's figures unprefixed, SFT's under
    sft/) chart on the run page and the curves page under today's names, on the same curve as a run logged since."""
    from dreamgym.view.site import CHART_METRICS, Links

    old, new, sft = tmp_path / "old", tmp_path / "new", tmp_path / "old-sft"
    rows = {old: [{"step": 1, "time": 0.0, "episodes": 8.0, "success_rate": 0.25, "mean_reward": 0.25,
                   "synthetic_steps": 30.0, "end_won": 2.0, "loss": 0.5, "zero_variance_groups": 1.0},
                  {"step": 1, "time": 0.0, "dream/buffer/size": 40.0, "dream/em/predictions": 30.0},
                  {"step": 1, "time": 0.0, "eval/success_rate": 0.5}],
            new: [{"step": 1, "time": 0.0, "rollout/episodes": 8.0, "rollout/success_rate": 0.75,
                   "losses/loss": 0.25}],
            sft: [{"step": 10, "time": 0.0, "sft/loss": 1.5, "sft/epoch": 0.0},
                  {"step": 10, "time": 0.0, "sft/replay_success": 0.125}]}
    for d, lines in rows.items():
        d.mkdir()
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    site = Site([old, new, sft])
    assert set(site.run(0).metrics) == {"rollout/episodes", "rollout/success_rate", "rollout/mean_reward",
                                        "rollout/synthetic_steps", "rollout/end_won", "losses/loss",
                                        "losses/zero_variance_groups", "dream/buffer/size", "dream/em/predictions",
                                        "eval/success_rate"}
    assert set(site.run(2).metrics) == {"losses/loss", "losses/epoch", "eval/replay_success"}
    assert site.run(2).metrics["eval/replay_success"][0].points == [(10.0, 0.125)]
    page = site.run_page(0, Links())
    assert all(f'aria-label="{name}"' in page for name in CHART_METRICS)  # every chart of a run page is there
    # One curve per run on the curves page; a link saved with an old name charts the same.
    for metric in ("rollout/success_rate", "success_rate"):
        curves = site.curves_page([0, 1], metric, Links())
        assert 'aria-label="rollout/success_rate"' in curves and curves.count('class="series"') == 2, metric


def test_the_dream_audit_on_the_run_page_links_each_audited_episode_beside_reality(runs):
    """The dream run audited its episodes (`dream.audit_episodes`' default): its page shows the iteration's
    agreement as the run logged it, lists each audited episode with both outcomes and links to it in the dream's
    episode file; the audit file is not listed as an episode file."""
    from dreamgym.view.site import Links

    site = Site(runs["dirs"])
    run = site.run(2)
    assert [a.iteration for a in run.audit] == [1] and not [p for p in run.problems if "audit" in p]
    logged = [json.loads(line) for line in (runs["dirs"][2] / "metrics.jsonl").read_text().splitlines()]
    figures = next(r for r in logged if "dream/audit/episodes" in r)
    (audited,) = run.audit
    assert len(audited.episodes) == figures["dream/audit/episodes"] > 0
    assert audited.figures["agreement"] == figures["dream/audit/agreement"]
    names = [s.name for s in run.sources]
    assert "dream_audit.jsonl" not in names
    sid = names.index("dream_episodes/it-00001.jsonl")
    page = site.run_page(2, Links())
    assert 'id="audit"' in page and page.count(">dream vs real</a>") == len(audited.episodes)
    for e in audited.episodes:
        assert e.source == sid and e.real_won is not None
        assert f'href="{Links().episode(2, sid, e.index)}"' in page
        assert "the real environment, same actions" in site.episode_page(2, sid, e.index, None, "free", Links())
