"""Representative ALFWorld text for training a tokenizer: instructions, engine feedback sentences, commands
and abstract states, synthesised from ALFRED's tables and the engine's grammar (no engine, no game files).

Owns: `corpus_text()` (a few thousand deterministic lines, built in well under a second).
Must not know: the engine, game files, policies, models, torch.
"""

from __future__ import annotations

import functools
import random

from dreamgym.envs.alfworld.knowledge import TASK_TYPES, can_contain, lower_set, tables
from dreamgym.envs.alfworld.state import AbstractState, admissible_from_state, engine_listing


@functools.lru_cache(maxsize=1)
def _corpus() -> tuple[str, ...]:
    rng = random.Random(0)
    t = tables()
    receps = sorted(r.lower() for r in t["static_receptacles"])
    objs = sorted(lower_set("pickupable"))
    holds = can_contain()
    lines: list[str] = []
    # Instructions: every template, objects and receptacles drawn from what ALFRED allows.
    for task_type in TASK_TYPES:
        for template in t["templates"][task_type]:
            for _ in range(120):
                if task_type == "look_at_obj_in_light":
                    text = template.format(obj=rng.choice(objs), toggle=rng.choice(sorted(lower_set("toggleable"))))
                else:
                    r = rng.choice(receps)
                    if not holds.get(r):
                        continue
                    text = template.format(obj=rng.choice(sorted(holds[r])), recep=r)
                lines.append(f"Your task is to: {text}.")
    # Engine feedback sentences and abstract states from random rooms.
    for _ in range(160):
        room = sorted({f"{r} {rng.randint(1, 4)}" for r in rng.sample(receps, rng.randint(6, 14))})
        lines.append("You are in the middle of a room. Looking quickly around you, you see "
                     f"{engine_listing(list(reversed(room)))}.")
        r = rng.choice(room)
        rt = r.split()[0]
        fits = sorted(holds.get(rt) or objs)
        inside = sorted({f"{o} {rng.randint(1, 3)}" for o in rng.sample(fits, min(rng.randint(0, 5), len(fits)))})
        if rt in lower_set("openable"):
            lines += [f"You arrive at {r}. The {r} is closed.",
                      f"You open the {r}. The {r} is open. In it, you see {engine_listing(inside)}.",
                      f"You close the {r}."]
        else:
            lines.append(f"You arrive at {r}. On the {r}, you see {engine_listing(inside)}.")
        o = inside[0] if inside else f"{rng.choice(objs)} 1"
        lines += [f"You pick up the {o} from the {r}.", f"You move the {o} to the {r}.",
                  f"You are carrying: a {o}.", "You are not carrying anything.", "Nothing happens.",
                  f"You are facing the {r}. Next to it, you see nothing.", f"There's nothing special about {o}."]
        verb, app = rng.choice((("heat", "microwave 1"), ("cool", "fridge 1"), ("clean", "sinkbasin 1")))
        lines.append(f"You {verb} the {o} using the {app}.")
        lines.append(f"You turn on the {rng.choice(sorted(lower_set('toggleable')))} 1.")
        s = AbstractState(task=f"put a {o.split()[0]} in {rt}", observation=lines[-3], location=r,
                          inventory=o if rng.random() < 0.4 else None, receptacles=room,
                          known={r: [x for x in inside if x != o]})
        # Without the derived "Unexplored" line (names the corpus has anyway): the tiny tokenizer, and with it every
        # tiny-preset result recorded before that line existed, stays exactly as it was.
        text = "\n".join(x for x in s.render().splitlines() if not x.startswith("Unexplored:"))
        lines.append(text)
        lines += admissible_from_state(text)
    return tuple(lines)


def corpus_text() -> list[str]:
    return list(_corpus())
