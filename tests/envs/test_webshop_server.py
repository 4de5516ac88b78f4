"""`dreamgym webshop serve` on a loopback port: a purchase driven through HTTP, session isolation, errors."""

import json
import re
import urllib.error
import urllib.request
from html import unescape
from urllib.parse import quote

import pytest
from servers import cli_server

from dreamgym.envs import webshop as ws


@pytest.fixture(scope="module")
def server():
    with cli_server(["webshop", "serve", "--port", "0", "--n-products", "300", "--split", "test"]) as (_, base):
        yield base


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.geturl(), r.read().decode("utf-8")


def _post(url, obj):
    req = urllib.request.Request(url, data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_purchase_through_http_pages(server):
    # Start a session on test task 0, then shop by following the links of the served HTML pages.
    page_url, html = _get(f"{server}/?task=0&seed=1")
    base = page_url.rsplit("/", 1)[0] + "/"
    assert re.match(rf"{server}/s/[0-9a-f]{{16}}/$", base) and "Instruction:" in html
    state = json.loads(_get(base + "state")[1])
    task = next(t for t in ws.tasks("test", n_products=300) if t.instruction == state["instruction"])
    policy = ws.POLICIES["oracle"](0)
    info = {"abstract_state": state["abstract_state"], "catalog_key": "synthetic-n300-s0"}
    policy.reset(task, "", info)
    for _ in range(15):
        action = policy.act("", info)
        if action.startswith("search["):
            assert 'name="q"' in html
            _, html = _get(base + "act?q=" + quote(action[len("search["):-1]))
        else:
            links = {unescape(a): unescape(h) for h, a in re.findall(r'href="(act\?a=[^"]+)"[^>]*>([^<]+)</a>', html)}
            label = action[len("click["):-1]
            assert label in links, (label, list(links))
            _, html = _get(base + links[label])
        assert ws.html_to_abstract(html) == json.loads(_get(base + "state")[1])["abstract_state"]
        state = json.loads(_get(base + "state")[1])
        info = {"abstract_state": state["abstract_state"], "catalog_key": "synthetic-n300-s0"}
        if state["terminated"] or state["truncated"]:
            break
    assert state["terminated"] and state["won"] and state["reward"] == 1.0
    assert "Thank you for shopping with us!" in html


def test_json_api_and_session_isolation(server):
    a = _post(f"{server}/reset", {"split": "test", "task": 1, "seed": 0})
    b = _post(f"{server}/reset", {"split": "test", "task": 2, "seed": 0})
    assert a["session"] != b["session"] and a["abstract_state"] == "[page] search\n[searchbox] search"
    a2 = _post(f"{server}/s/{a['session']}/step", {"action": "search[lipstick]"})
    assert a2["abstract_state"].startswith('[page] results for "lipstick"')
    b2 = json.loads(_get(f"{server}/s/{b['session']}/state")[1])
    assert b2["abstract_state"] == "[page] search\n[searchbox] search" and b2["instruction"] != a2["instruction"]
    bad = _post(f"{server}/s/{a['session']}/step", {"action": "click[" + "☃" * 50})
    assert bad["notice"] and bad["abstract_state"].startswith("[page] results")


def test_http_errors(server):
    for url in (f"{server}/s/0123456789abcdef/", f"{server}/s/zz/", f"{server}/nope"):
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(url)
        assert e.value.code == 404
    req = urllib.request.Request(f"{server}/reset", data=b"[1,2", headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(f"{server}/reset", {"split": "bogus"})
    assert e.value.code == 400
