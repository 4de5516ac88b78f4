"""The consistency checks that define a self-contradiction of a predicted next state: a generic one (the state
changed although the action was not one the state offered) and one per environment family that has its own.

Owns: `Checker`, `check_generic`, the family checks (dial, webshop, alfworld) and `checkers_for`.
Must not know: models, prompts, how the fidelity figures are aggregated (`dreamgym.experience.fidelity` counts the
contradictions). It knows the abstract-state formats of the families it has checks for and nothing else about them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dreamgym.envs.family import is_admissible

Checker = Callable[[list[tuple[str, str]], str, str, str], list[str]]
"""(episode so far as (state, action) pairs, state, action, next_state) -> contradictions found (reasons)."""


def check_generic(family_mod: Any) -> Checker:
    """The state changed although the action was not one the state offered."""

    def check(past: list[tuple[str, str]], state: str, action: str, nxt: str) -> list[str]:
        try:
            adm = family_mod.admissible_from_state(state)
        except Exception:  # noqa: BLE001 - a state the family cannot parse offers nothing we can check
            return []
        if adm and not is_admissible(action, adm) and state.split() != nxt.split():  # fidelity's exact match
            return [f"state changed after unavailable action {action!r}"]
        return []

    return check


def check_dial(past: list[tuple[str, str]], state: str, action: str, nxt: str) -> list[str]:
    """Dial: the value moves by exactly one on a turn (within 0..9) and never without one."""
    from dreamgym.envs.dial import DIAL_MAX, DIAL_MIN, parse_state

    a, b = parse_state(state), parse_state(nxt)
    if b is None:
        return ["next state has no dial value"]
    if a is None:
        return []
    act = " ".join(action.lower().split())
    if act == "turn up":
        want = min(DIAL_MAX, a + 1)
    elif act == "turn down":
        want = max(DIAL_MIN, a - 1)
    else:
        want = a
    return [] if b == want else [f"dial {a} -> {b} after {action!r} (expected {want})"]


def check_webshop(past: list[tuple[str, str]], state: str, action: str, nxt: str) -> list[str]:
    """WebShop: arriving at an item page shows a product that was listed in a results page earlier in the
    episode (and the one that was clicked); a sub-page (description/features/reviews) belongs to the item
    it was opened from."""
    from dreamgym.envs.webshop.pages import SUB_PAGE_KINDS, parse_abstract

    cur, new = parse_abstract(state), parse_abstract(nxt)
    bad = []
    if new["page"] == "item" and not (cur["page"] in ("item", *SUB_PAGE_KINDS)
                                      and cur["asin"] == new["asin"]):
        listed = {ln["asin"] for s, _ in past + [(state, action)] for ln in parse_abstract(s)["links"]}
        if new["asin"] not in listed:
            bad.append(f"item page {new['asin']} whose product was not in the results")
        m = re.fullmatch(r"\s*click\[\s*(\S+)\s*\]\s*", action, re.I)
        if m and m.group(1).upper() in {a.upper() for a in listed} and m.group(1).upper() != new["asin"].upper():
            bad.append(f"clicked {m.group(1)} but the item page shows {new['asin']}")
    if new["page"] in SUB_PAGE_KINDS and cur["asin"] and new["asin"] != cur["asin"]:
        bad.append(f"{new['page']} of {new['asin']} opened from the page of {cur['asin']}")
    return bad


def check_alfworld(past: list[tuple[str, str]], state: str, action: str, nxt: str) -> list[str]:
    """ALFWorld: the known contents of a receptacle and the inventory change only through take/put.

    For a receptacle known before and after the step, the contents must be unchanged, or (take X from R)
    lose exactly X, or (put X in/on R) gain exactly X; a known receptacle must not vanish from the agent's
    knowledge; the inventory changes only on take (to the taken object) or put (to nothing)."""
    from dreamgym.envs.alfworld.state import parse_state

    a, b = parse_state(state), parse_state(nxt)
    act = " ".join(action.lower().split())
    take = re.fullmatch(r"take (.+?) from (.+)", act)
    put = re.fullmatch(r"(?:put|move) (.+?) (?:in/on|in|on|to) (.+)", act)
    bad = []
    for r, before in a.known.items():
        if r not in b.known:
            bad.append(f"{r} vanished from the known contents")
            continue
        x, y = set(before), set(b.known[r])
        if x == y or (take and take.group(2) == r and y == x - {take.group(1)}) or \
                (put and put.group(2) == r and y == x | {put.group(1)}):
            continue
        gone, new = sorted(x - y), sorted(y - x)
        bad.append(f"{r}: {('+' + ','.join(new)) if new else ''}{(' -' + ','.join(gone)) if gone else ''} "
                   f"after {action!r}")
    if a.inventory != b.inventory:
        ok = (take and b.inventory == take.group(1) and a.inventory is None) or \
             (put and a.inventory == put.group(1) and b.inventory is None)
        if not ok:
            bad.append(f"inventory {a.inventory or 'nothing'} -> {b.inventory or 'nothing'} after {action!r}")
    return bad


FAMILY_CHECKS: dict[str, Checker] = {"dial": check_dial, "webshop": check_webshop, "alfworld": check_alfworld}


def checkers_for(env: str) -> list[Checker]:
    from dreamgym.envs import family

    out: list[Checker] = []
    try:
        out.append(check_generic(family(env)))
    except Exception:  # noqa: BLE001 - an uninstalled family still gets its own check below
        pass
    if env in FAMILY_CHECKS:
        out.append(FAMILY_CHECKS[env])
    return out
