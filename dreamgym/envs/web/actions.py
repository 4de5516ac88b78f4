"""Web actions as text: BrowserGym's high-level action set (`click('12')`, `fill('15', 'Myron')`, ...), parsed and
carried out on a page with BrowserGym's own parser and action functions.

Owns: the action subsets a web family offers, turning an action string into BrowserGym's code (`parse_action`,
which refuses anything that is not one call of an offered action), carrying it out on a Playwright page
(`execute`), and the action set's description for prompts.
Must not know: Chromium processes, observations, which benchmark a page belongs to.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

# bid: click/fill/select/hover/press/focus/clear/drag on element ids; nav: goto/go_back/go_forward; chat:
# send_msg_to_user (WebArena's answer); infeas: report_infeasible (WebArena's "N/A").
MINIWOB_SUBSETS: tuple[str, ...] = ("bid",)
WEBARENA_SUBSETS: tuple[str, ...] = ("chat", "infeas", "bid", "nav", "tab")


@functools.lru_cache(maxsize=8)
def action_set(subsets: tuple[str, ...]) -> Any:
    """BrowserGym's `HighLevelActionSet` for these subsets: one action per step, no demo-mode effects."""
    from browsergym.core.action.highlevel import HighLevelActionSet

    return HighLevelActionSet(subsets=list(subsets), multiaction=False, strict=False, demo_mode="off")


class InvalidAction(ValueError):
    """An action string that is not one call of an offered action; the message says why."""


def parse_action(action: str, subsets: tuple[str, ...]) -> str:
    """BrowserGym's Python code for `action`, or `InvalidAction`. The code is built by BrowserGym's parser from
    literal arguments only, so it calls the action functions and nothing else."""
    try:
        return str(action_set(subsets).to_python_code(action))
    except (ValueError, NameError) as e:
        raise InvalidAction(f"{type(e).__name__}: {e}") from None
    except Exception as e:  # noqa: BLE001 - pyparsing errors: the text is no action call
        raise InvalidAction(f"not an action call ({type(e).__name__})") from None


@dataclass
class Outcome:
    """What carrying out an action did: `error` (BrowserGym's `last_action_error` form, "" when none), a message
    the action sent to the user (WebArena's answer), and whether the agent reported the task infeasible."""

    error: str = ""
    message: str | None = None
    infeasible: str | None = None


def execute(code: str, page: Any) -> Outcome:
    """Run BrowserGym's code for one action on `page`; a failing action (no such element, a timeout) is recorded
    in `Outcome.error` as BrowserGym's environment does, never raised."""
    from browsergym.core.action.base import execute_python_code

    out = Outcome()

    def send(text: str) -> None:
        out.message = str(text)

    def infeasible(reason: str) -> None:
        out.infeasible = str(reason)

    try:
        execute_python_code(code, page, send_message_to_user=send, report_infeasible_instructions=infeasible)
    except Exception as e:  # noqa: BLE001 - an action that fails is feedback, as in BrowserGym's env
        if _browser_gone(e):
            raise
        out.error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return out


def _browser_gone(e: BaseException) -> bool:
    text = str(e)
    return any(s in text for s in ("has been closed", "Target closed", "Connection closed", "disconnected"))


def describe(subsets: tuple[str, ...]) -> str:
    """The action set's signatures, one per line, for a prompt or a docs page."""
    return "\n".join(a.signature for a in action_set(subsets).action_set.values())

