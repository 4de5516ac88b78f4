"""Environment-grounded reasoning traces of web transitions, and the state a web page shows after an action that did
nothing.

Owns: `explain` (what the action did to which element, what changed on the page, why the reward and the end are
what they are), `noop_state` (the state the real page shows after an action it cannot carry out, with
BrowserGym's error line).
Must not know: browsers, benchmarks' own rules beyond what a transition records, models.
"""

from __future__ import annotations

import re

from dreamgym.envs.web.axtree import Element, parse_state
from dreamgym.types import Transition

_CALL_RE = re.compile(r"^\s*(\w+)\((.*)\)\s*$", re.S)
_BID_RE = re.compile(r"""^\s*['"]([a-zA-Z]*\d+)['"]""")


def action_target(action: str) -> tuple[str, str | None]:
    """(verb, element id) of a high-level action string; ("", None) when it is no call."""
    m = _CALL_RE.match(action)
    if not m:
        return "", None
    b = _BID_RE.match(m.group(2))
    return m.group(1), (b.group(1) if b else None)


def _describe(e: Element) -> str:
    return f"the {e.role} '{e.name}'" if e.name else f"the {e.role} [{e.bid}]"


def noop_state(state: str, action: str, subsets: tuple[str, ...] = ("bid",)) -> str:
    """The page unchanged, with the error line BrowserGym's parser or action functions give for `action`: text that
    is no call, a call of an action not offered, or an element id the page lacks."""
    from dreamgym.envs.web.actions import action_set

    verb, bid = action_target(action)
    if not verb:
        error = "invalid action: ValueError: Received an empty action."
    elif verb not in action_set(tuple(subsets)).action_set:
        error = f"invalid action: NameError: Invalid action type '{verb}'."
    elif bid is not None:
        error = f'ValueError: Could not find element with bid "{bid}"'
    else:
        error = f"{verb} did nothing on this page"
    return "\n".join([*(ln for ln in state.splitlines() if not ln.startswith("[error] ")), f"[error] {error}"])


def explain(tr: Transition) -> str:
    """Why the next state, reward and end follow from the action on this page."""
    _, title, before, _ = parse_state(tr.state)
    _, title_after, after, error = parse_state(tr.next_state)
    verb, bid = action_target(tr.action)
    by_bid = {e.bid: e for e in before if e.bid}
    target = by_bid.get(bid) if bid else None
    if not verb:
        what = f"'{tr.action[:60]}' is not a BrowserGym action call, so the page does not change"
    elif bid is not None and target is None:
        what = f"{verb} names element [{bid}], which this page does not have, so nothing happens"
    elif error:
        what = f"{verb} on {_describe(target) if target else 'the page'} fails ({error[:80]}), so the page stays"
    else:
        what = f"{verb} acts on {_describe(target)}" if target else f"{verb} acts on the page"
        what += _changes(before, after, title, title_after)
    if tr.done:
        outcome = (f"The task checks the page and the episode ends with reward {tr.reward:g}: "
                   + ("the goal is met." if tr.reward >= 1 else "the goal is partly met (partial credit)."
                      if tr.reward > 0 else "the goal is not met."))
    else:
        outcome = "The task is not finished yet, so the episode continues with reward 0."
    return f"{what}. {outcome}"


def _changes(before: list[Element], after: list[Element], title: str, title_after: str) -> str:
    if title_after != title:
        return f"; the page changes to '{title_after}'"
    old = {(e.bid, e.role, e.name, e.attrs) for e in before}
    new = {(e.bid, e.role, e.name, e.attrs) for e in after}
    changed = [e for e in after if (e.bid, e.role, e.name, e.attrs) not in old]
    gone = len(old - new) - len([e for e in changed if e.bid in {b.bid for b in before}])
    if not changed and gone <= 0:
        return "; the page looks the same afterwards"
    shown = ", ".join(f"{_describe(e)} now reads '{e.attrs.strip(', ')[:40]}'" if e.attrs.strip(", ") else
                      _describe(e) for e in changed[:2])
    return f"; on the page {shown}" + (f" and {len(changed) - 2} more changes" if len(changed) > 2 else "")
