"""The ALFWorld abstract state: the latest observation plus what the agent knows, as compact plain text,
and the admissible commands rebuilt from that text alone.

Owns: the state text format, `StateTracker` (updates the agent's knowledge from the engine's feedback
sentences only, never from hidden engine facts), `parse_state`, `canonical_state`, and
`admissible_from_state` (ALFWorld's command grammar over the receptacles and objects the state names; this is
how the synthetic environment offers actions).
Must not know: the engine, game files, policies, models, torch.

Format (every line always present, in this order; lists sorted as "cabinet 2" < "cabinet 10"):

    Task: put a clean mug in coffeemachine.
    Observation: You open the cabinet 3. The cabinet 3 is open. In it, you see a mug 1.
    Location: cabinet 3 (open)            -- or "middle of the room"; "(closed)" / "(open)" for openables
    Inventory: nothing                    -- or "mug 1 (clean)"
    Opened: cabinet 3                     -- receptacles the agent opened and has not closed; "none"
    Lamps on: none
    Altered: none                         -- objects the agent cleaned/heated/cooled, e.g. "mug 1 (clean)"
    Known contents: cabinet 3: mug 1; countertop 1: apple 1, knife 2; drawer 1: nothing
    Receptacles: cabinet 1, cabinet 2, cabinet 3, coffeemachine 1, countertop 1, drawer 1, sinkbasin 1
    Unexplored: sinkbasin 1, cabinet 2, coffeemachine 1, cabinet 1   -- no known contents, in search order; "none"

"Unexplored" is derived: Receptacles minus those in Known contents, in the episode's *search order*, a
permutation of the receptacles drawn once at reset from the episode seed (`StateTracker.reset(..., seed=)`;
without a seed, the listed order). `parse_state` reads the order back from the line, so the order survives a
round trip and the synthetic environment keeps the one its model wrote; the set is always re-derived.
Why it is spelled out: a small policy cannot take a set difference of two 50-name lists in its head (SFT on
observation-only searcher demonstrations without it wrote "go to cabinet 3" after "cabinet 2" by counting, in
rooms without a cabinet 3), but it can copy a name from a line. Why the order is shuffled: in listed order,
copying and counting agree on almost every demonstrated step, and the tiny policy kept counting within a
receptacle type ("countertop 1" -> "countertop 2" in a room with one countertop). Why it is the last line, and
`searcher-list` explores its *last* name: that name sits a short, nearly fixed distance before where the policy
starts writing. Trained from the tiny preset on such demonstrations, the policy copies it on 94% of exploring
steps (teacher-forced, exact); fine-tuned on first-name demonstrations (from a checkpoint that counted), 5%
(docs/log/04-agents-webshop-alfworld.md). States written before the line existed still parse.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from dreamgym.envs.alfworld.knowledge import can_contain, lower_set, type_of

START = "middle of the room"
_NAME = r"[a-z]+ \d+"


def name_key(name: str) -> tuple[str, int, str]:
    m = re.match(r"^([a-z]+) (\d+)$", name)
    return (m.group(1), int(m.group(2)), "") if m else (name, 0, name)


def parse_list(text: str) -> list[str]:
    """'a apple 1, a bread 2, and a knife 1' -> ['apple 1', 'bread 2', 'knife 1'] ('nothing' -> [])."""
    text = text.strip().rstrip(".").strip()
    if not text or text == "nothing":
        return []
    parts = re.split(r",\s*and\s+|,\s*|\s+and\s+", text)
    out = []
    for p in parts:
        p = re.sub(r"^(a|an|the)\s+", "", p.strip())
        if re.fullmatch(_NAME, p):
            out.append(p)
    return out


def _join(names: list[str] | set[str]) -> str:
    return ", ".join(sorted(names, key=name_key)) or "none"


@dataclass
class AbstractState:
    """The agent's knowledge; `render()` gives the state text, `parse_state` reads it back."""

    task: str = ""
    observation: str = ""
    location: str | None = None
    inventory: str | None = None
    opened: set[str] = field(default_factory=set)
    lamps_on: set[str] = field(default_factory=set)
    altered: dict[str, set[str]] = field(default_factory=dict)  # object -> {"clean", "hot", "cool"}
    known: dict[str, list[str]] = field(default_factory=dict)  # receptacle -> objects last seen in it
    receptacles: list[str] = field(default_factory=list)
    search_order: list[str] = field(default_factory=list)  # the episode's exploring order (see module docstring)

    def is_openable(self, name: str | None) -> bool:
        return bool(name) and type_of(name) in lower_set("openable")  # type: ignore[arg-type]

    def unexplored(self) -> list[str]:
        """Receptacles with no known contents, in search order (the state's "Unexplored" line). Receptacles the
        order lacks follow in listed order, so the set never depends on the order being complete."""
        listed = set(self.receptacles)
        ordered = [r for r in dict.fromkeys(self.search_order) if r in listed]
        placed = set(ordered)
        ordered += [r for r in self.receptacles if r not in placed]
        return [r for r in ordered if r not in self.known]

    def visible(self) -> bool:
        """Whether the agent can reach into the receptacle it stands at."""
        return self.location is not None and (not self.is_openable(self.location) or self.location in self.opened)

    def _props(self, obj: str) -> str:
        props = self.altered.get(obj)
        return f" ({', '.join(sorted(props))})" if props else ""

    def render(self) -> str:
        if self.location is None:
            loc = START
        elif self.is_openable(self.location):
            loc = f"{self.location} ({'open' if self.location in self.opened else 'closed'})"
        else:
            loc = self.location
        inv = f"{self.inventory}{self._props(self.inventory)}" if self.inventory else "nothing"
        altered = ", ".join(f"{o}{self._props(o)}" for o in sorted(self.altered, key=name_key) if self.altered[o])
        known = "; ".join(f"{r}: {', '.join(sorted(self.known[r], key=name_key)) or 'nothing'}"
                          for r in sorted(self.known, key=name_key))
        task = self.task if self.task.endswith(".") or not self.task else self.task + "."
        return "\n".join([
            f"Task: {task}",
            f"Observation: {' '.join(self.observation.split())}",
            f"Location: {loc}",
            f"Inventory: {inv}",
            f"Opened: {_join(self.opened)}",
            f"Lamps on: {_join(self.lamps_on)}",
            f"Altered: {altered or 'none'}",
            f"Known contents: {known or 'none'}",
            f"Receptacles: {_join(self.receptacles)}",
            f"Unexplored: {', '.join(self.unexplored()) or 'none'}",
        ])


class StateTracker:
    """Folds the engine's feedback sentences into an `AbstractState` (deterministic, text only)."""

    def __init__(self) -> None:
        self.state = AbstractState()

    def reset(self, task: str, observation: str, seed: int | None = None) -> AbstractState:
        """Start an episode; `seed` draws its search order (None: the listed order)."""
        self.state = AbstractState(task=task.strip())
        intro = observation.split("Your task is to:")[0].strip()
        self.state.observation = intro
        m = re.search(r"you see (.*?)\.\s*$", intro, flags=re.S)
        self.state.receptacles = sorted(set(parse_list(m.group(1))) if m else set(), key=name_key)
        order = list(self.state.receptacles)
        if seed is not None:
            random.Random(seed).shuffle(order)
        self.state.search_order = order
        return self.state

    def update(self, action: str, feedback: str) -> AbstractState:
        s = self.state
        fb = " ".join(feedback.split())
        s.observation = fb
        self._arrive(fb)
        m = re.match(rf"You open the ({_NAME})\.", fb)
        if m:
            s.opened.add(m.group(1))
            self._contents(m.group(1), fb)
        m = re.match(rf"You close the ({_NAME})\.", fb)
        if m:
            s.opened.discard(m.group(1))
        m = re.match(rf"You pick up the ({_NAME}) from the ({_NAME})\.", fb)
        if m:
            s.inventory = m.group(1)
            if m.group(2) in s.known and m.group(1) in s.known[m.group(2)]:
                s.known[m.group(2)].remove(m.group(1))
        m = re.match(rf"You move the ({_NAME}) to the ({_NAME})\.", fb)
        if m:
            s.inventory = None
            s.known.setdefault(m.group(2), [])
            if m.group(1) not in s.known[m.group(2)]:
                s.known[m.group(2)].append(m.group(1))
        m = re.match(rf"You (heat|cool|clean) the ({_NAME}) using the ({_NAME})\.", fb)
        if m:
            verb, obj = m.group(1), m.group(2)
            props = s.altered.setdefault(obj, set())
            props.add({"heat": "hot", "cool": "cool", "clean": "clean"}[verb])
            if verb == "heat":
                props.discard("cool")
            elif verb == "cool":
                props.discard("hot")
        m = re.match(rf"You turn (on|off) the ({_NAME})\.", fb)
        if m:
            (s.lamps_on.add if m.group(1) == "on" else s.lamps_on.discard)(m.group(2))
        m = re.match(r"You are carrying: (.*)\.$", fb)
        if m:
            held = parse_list(m.group(1))
            s.inventory = held[0] if held else None
        if fb.startswith("You are not carrying anything"):
            s.inventory = None
        m = re.match(rf"You are facing the ({_NAME})\.", fb)
        if m:
            s.location = m.group(1)
        if fb.startswith("You are in the middle of a room"):
            s.location = None
        return s

    def _arrive(self, fb: str) -> None:
        m = re.match(rf"You arrive at ({_NAME})\.", fb)
        if m:
            self.state.location = m.group(1)
            self._contents(m.group(1), fb)
            return
        m = re.match(rf"(?:On the|The) ({_NAME})(?:,| is open\.)", fb)
        if m:  # "examine <receptacle>" answers with the arrival sentence minus "You arrive at"
            self._contents(m.group(1), fb)

    def _contents(self, recep: str, fb: str) -> None:
        m = re.search(rf"(?:On the {recep}, you see|The {recep} is open\. In it, you see) (.*?)\.(?:\s|$)", fb)
        if m:
            self.state.known[recep] = parse_list(m.group(1))


_KEYS = ("Task", "Observation", "Location", "Inventory", "Opened", "Lamps on", "Altered", "Known contents",
         "Receptacles")


def _line(state: str, key: str) -> str | None:
    m = re.search(rf"^{re.escape(key)}:[ \t]*(.*)$", state, flags=re.M)
    return m.group(1).strip() if m else None


def _names(text: str | None) -> list[str]:
    if not text or text == "none":
        return []
    return [n for n in (x.strip() for x in text.split(",")) if re.fullmatch(_NAME, n)]


def parse_state(state: str) -> AbstractState:
    """Read a state text back (tolerant: missing or malformed lines give empty knowledge, never an error)."""
    s = AbstractState()
    s.task = _line(state, "Task") or ""
    s.observation = _line(state, "Observation") or ""
    loc = _line(state, "Location") or START
    m = re.match(rf"^({_NAME})(?: \((open|closed)\))?$", loc)
    s.location = m.group(1) if m else None
    s.opened = set(_names(_line(state, "Opened")))
    if m and m.group(2) == "open":
        s.opened.add(m.group(1))
    elif m and m.group(2) == "closed":
        s.opened.discard(m.group(1))
    s.lamps_on = set(_names(_line(state, "Lamps on")))
    for obj, props in re.findall(rf"({_NAME}) \(([a-z, ]+)\)", _line(state, "Altered") or ""):
        s.altered[obj] = {p.strip() for p in props.split(",") if p.strip() in ("clean", "hot", "cool")}
    inv = _line(state, "Inventory") or "nothing"
    m = re.match(rf"^({_NAME})(?: \(([a-z, ]+)\))?$", inv)
    if m:
        s.inventory = m.group(1)
        if m.group(2):
            s.altered.setdefault(m.group(1), set()).update(
                p.strip() for p in m.group(2).split(",") if p.strip() in ("clean", "hot", "cool"))
    for part in (_line(state, "Known contents") or "").split(";"):
        if ":" in part:
            recep, objs = part.split(":", 1)
            recep = recep.strip()
            if re.fullmatch(_NAME, recep):
                s.known[recep] = [] if objs.strip() in ("nothing", "") else _names(objs)
    s.receptacles = sorted(set(_names(_line(state, "Receptacles"))), key=name_key)
    s.search_order = _names(_line(state, "Unexplored"))
    return s


def canonical_state(state: str) -> str:
    """`state` re-rendered from what `parse_state` reads: real states come back unchanged (checked on 22,324 of
    them in listed order, and on the 48,880 state texts of 24,440 steps in search order); a model's state gets
    the derived "Unexplored" line recomputed (its set; the order it wrote is kept) and its other lists sorted.
    A text missing any line but "Unexplored" is returned as it is: re-rendering would turn what it lacks into
    empty knowledge."""
    if any(_line(state, key) is None for key in _KEYS):
        return state
    return parse_state(state).render()


# Lines a room fixes at reset: "Receptacles" never changes within an episode and "Unexplored" follows from it,
# the episode's search order and "Known contents". They are half of a state's characters (0.50 of the initial
# states and 0.51 of all states in 200 searcher-list episodes).
_CARRIED = ("Receptacles", "Unexplored")


def model_state(state: str) -> str:
    """What an experience model writes for `state` (ExperienceModelConfig.compact_states): every line but the
    carried ones, which `complete_state` restores from the previous state. Writing them cost the tiny model about
    half of each generated state, and it miscopied the receptacle lists of floor plans it never saw (one source of
    its self-contradictions, docs/log/03-em-fidelity.md). A text that is not a whole state is returned as it is."""
    if any(_line(state, key) is None for key in _KEYS):
        return state
    return _without_carried(state)


def _without_carried(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith(tuple(f"{k}:" for k in _CARRIED))).strip()


def complete_state(written: str, previous: str) -> str:
    """`written` (a model's state without the carried lines) completed from `previous`, the state the action was
    taken in: its receptacle list, and its unexplored receptacles in their order minus those `written` now
    knows the contents of (`canonical_state` re-derives the set). Carried lines the model wrote anyway are
    replaced. Returns `written` unchanged when `previous` has no receptacle list (a reset)."""
    carried = {k: _line(previous, k) for k in _CARRIED}
    if carried["Receptacles"] is None:
        return written
    lines = [_without_carried(written)] + [f"{k}: {v}" for k, v in carried.items() if v is not None]
    return canonical_state("\n".join(lines))


def model_observation(state: str) -> str:
    """What an experience model writes for `state` under `ExperienceModelConfig.write_observation`: only its
    "Observation" line, the engine's feedback to the action. `state_after` derives every other line from it,
    exactly as the real environment's `StateTracker` does, so the model never rewrites the task, the inventory
    or the known contents. Why: the tiny model that wrote the other lines got the task line right on 18% of 100
    held-out teacher-forced steps and "Known contents" on 3% (`experiments/alf_state_fields.py`, docs/log/07-observation-only.md)."""
    line = _line(state, "Observation")
    return f"Observation: {line}" if line is not None else state.strip()


def state_after(previous: str, written: str) -> str:
    """The whole next state from `previous` (the state the action was taken in) and the model's `written`
    observation (its "Observation" line, or the whole text when it wrote none), folded in by `StateTracker`:
    the same deterministic bookkeeping the real environment applies to the engine's feedback. A reset (no
    receptacle list in `previous`) returns `written` unchanged."""
    if _line(previous, "Receptacles") is None:
        return written
    obs = _line(written, "Observation")
    tracker = StateTracker()
    tracker.state = parse_state(previous)
    tracker.update("", obs if obs is not None else written.strip())
    return tracker.state.render()


def noop_state(state: str, action: str) -> str:
    """The state the real environment shows after `action` did nothing: the engine answers "Nothing happens.",
    which `StateTracker` writes into the Observation line and nothing else. Why it matters: a synthetic
    environment that kept the previous state unchanged showed the policy a prompt the real game never does,
    and a policy with no history saw the very prompt it had just failed on (docs/log/16-noop-state.md)."""
    return state_after(state, "Observation: Nothing happens.")


_PUT = re.compile(r"^put (.+?) (?:in/on|into|in|on|onto|to) (.+)$")


def normalize_command(action: str) -> str:
    """A command as the engine reads it: lower case, single spaces, no final period, "put X in/on Y" as
    "move X to Y"."""
    a = " ".join(action.strip().lower().split()).rstrip(".").strip()
    m = _PUT.match(a)
    if m:
        a = f"move {m.group(1)} to {m.group(2)}"
    return a


_REVEALING = re.compile(rf"^(go to|open|examine) ({_NAME})$")


def hidden_outcome_key(task: Any, state: str, action: str) -> str | None:
    """A key for `action`'s outcome in `state` of `task` when that outcome depends only on the game's hidden
    layout, else None. The key names the game (`world_id`), so equal keys mean the same world.

    That is a step that reveals a receptacle whose contents the state does not know: "go to X" from elsewhere,
    or "open X" / "examine X" while standing at it. What it shows is the game's initial placement, whatever
    else the episode did: the agent cannot have put anything into or taken anything out of a receptacle it
    never saw inside, and an unknown receptacle that can be opened is still closed (opening one shows its
    contents). So within one game, every such step with the same key has the same observation, and a
    recorded real one answers it exactly (`ExperienceModelConfig.copy_hidden_outcomes`). Every other step's
    outcome follows from the state itself, which is the model's job. Why only these: they are the steps the
    state cannot determine, and where dreams of data games first part from the real game (a `go to` in 54 of
    64 greedy dream episodes, docs/log/10-copy-real-steps.md)."""
    m = _REVEALING.match(normalize_command(action))
    if not m:
        return None
    verb, recep = m.group(1), m.group(2)
    s = parse_state(state)
    if recep not in s.receptacles or recep in s.known:
        return None
    if (verb == "go to") == (s.location == recep):  # go to: from elsewhere; open/examine: standing at it
        return None
    return f"{world_id(task)}|{verb} {recep}"


def world_id(task: Any) -> str:
    """The game a task is played in: its goal's generator, seed, split and `game_id`, else its id. A curriculum
    variant keeps its parent's goal fields, `game_id` and `game_file` among them (`curriculum.Curriculum` merges
    the parsed variant goal over the parent's), so the real environment resets it into the parent's game and
    its first looks are the parent's recorded ones."""
    goal = getattr(task, "goal", None) or {}
    if not goal.get("game_id"):
        return str(getattr(task, "id", task))
    # The same game id under another generator seed is another layout; the file path would also say so, but it
    # names this machine's cache, and a buffer recorded elsewhere must still match.
    return "/".join(str(goal.get(k, "")) for k in ("generator", "seed", "split", "game_id"))


def engine_listing(names: list[str]) -> str:
    """Objects as the engine lists them, in the given order: "a pen 1", "a pen 1, and a book 2", "a a, a b, and
    a c"; "nothing" for none."""
    items = [f"a {n}" for n in names]
    if len(items) > 1:
        items[-1] = f"and {items[-1]}"
    return ", ".join(items) or "nothing"


def _contents_sentence(s: AbstractState, r: str) -> str:
    """What the engine says of a receptacle whose contents the state knows (arriving at it, or examining it)."""
    contents = engine_listing(sorted(s.known[r], key=name_key)) if r in s.known else ""
    if s.is_openable(r):
        return f"The {r} is open. In it, you see {contents}." if r in s.opened else f"The {r} is closed."
    return f"On the {r}, you see {contents}."


# The engine's answer to "help", the same in every game (whitespace-normalised like every state's observation).
_HELP = " ".join(f"{cmd}: {what}" for cmd, what in (
    ("look", "look around your current location"), ("inventory", "check your current inventory"),
    ("go to (receptacle)", "move to a receptacle"), ("open (receptacle)", "open a receptacle"),
    ("close (receptacle)", "close a receptacle"), ("take (object) from (receptacle)", "take an object from a receptacle"),
    ("move (object) to (receptacle)", "place an object in or on a receptacle"),
    ("examine (something)", "examine a receptacle or an object"), ("use (object)", "use an object"),
    ("heat (object) with (receptacle)", "heat an object using a receptacle"),
    ("clean (object) with (receptacle)", "clean an object using a receptacle"),
    ("cool (object) with (receptacle)", "cool an object using a receptacle"),
    ("slice (object) with (object)", "slice an object using a sharp object")))


def determined_outcome(task: Any, state: str, action: str) -> str | None:
    """The engine's feedback to `action` when the state alone fixes it, else None (a first look into a
    receptacle, a command the state does not admit, examining the held object). Checked against every step of the real episodes
    of docs/log/12-contradictions-survey.md and 13-dream-follows-game.md and `tests/envs/test_alfworld.py::test_determined_outcome_is_the_engines_answer`:

    - "take O from R" at R with empty hands and O among R's known contents: "You pick up the O from the R.";
    - "go to R" from elsewhere, R's contents known: the arrival sentence with those contents (or "closed"), and
      "examine R" at R likewise without "You arrive at R." (a revisit may list the same objects in another order,
      176 of 1,478 recorded ones, which the state's sorted lists cannot keep);
    - "examine R" at a closed R: "The R is closed.";
    - an admissible "move", "heat/cool/clean", "close", or "use" of a lamp that is off: the engine's one sentence
      restating the command; "inventory", "look" and "help": fixed sentences."""
    s = parse_state(state)
    command = normalize_command(action)
    m = re.match(rf"^take ({_NAME}) from ({_NAME})$", command)
    if m:
        obj, recep = m.groups()
        ok = s.location == recep and s.inventory is None and obj in s.known.get(recep, []) and s.visible()
        return f"You pick up the {obj} from the {recep}." if ok else None
    m = re.match(rf"^go to ({_NAME})$", command)
    if m:
        r = m.group(1)
        ok = r in s.known and s.location != r and r in s.receptacles
        return f"You arrive at {r}. {_contents_sentence(s, r)}" if ok else None
    if command == "inventory":
        return f"You are carrying: a {s.inventory}." if s.inventory else "You are not carrying anything."
    if command == "help":
        return f"Available commands: {_HELP}"
    if command == "look":
        if s.location is None:
            return "You are in the middle of a room. Looking quickly around you, you see nothing."
        return f"You are facing the {s.location}. Next to it, you see nothing."
    if command not in admissible_from_state(state):
        return None
    m = re.match(rf"^examine ({_NAME})$", command)
    if m and m.group(1) == s.location:  # the held object's answer depends on its kind ("This is a normal plate 1")
        r = m.group(1)
        closed = s.is_openable(r) and r not in s.opened
        return _contents_sentence(s, r) if closed or r in s.known else None
    m = re.match(rf"^move ({_NAME}) to ({_NAME})$", command)
    if m:
        return f"You move the {m.group(1)} to the {m.group(2)}."
    m = re.match(rf"^(heat|cool|clean) ({_NAME}) with ({_NAME})$", command)
    if m:
        return f"You {m.group(1)} the {m.group(2)} using the {m.group(3)}."
    m = re.match(rf"^close ({_NAME})$", command)
    if m:
        return f"You close the {m.group(1)}."
    m = re.match(rf"^use ({_NAME})$", command)
    if m and m.group(1) not in s.lamps_on:  # turning a lamp off again is not recorded in any real play here
        return f"You turn on the {m.group(1)}."
    return None


# The engine's first sentence for each kind of command, and the command that sentence answers. Checked on real
# play: every real step's feedback either matches its own command's sentence or none of these.
_ANSWERS = (
    (re.compile(rf"^You arrive at ({_NAME})\."), "go to {0}"),
    (re.compile(rf"^You open the ({_NAME})\."), "open {0}"),
    (re.compile(rf"^You close the ({_NAME})\."), "close {0}"),
    (re.compile(rf"^You pick up the ({_NAME}) from the ({_NAME})\."), "take {0} from {1}"),
    (re.compile(rf"^You move the ({_NAME}) to the ({_NAME})\."), "move {0} to {1}"),
    (re.compile(rf"^You (heat|cool|clean) the ({_NAME}) using the ({_NAME})\."), "{0} {1} with {2}"),
    (re.compile(rf"^You turn (?:on|off) the ({_NAME})\."), "use {0}"),
    (re.compile(rf"^(?:On the ({_NAME}), you see|The ({_NAME}) is (?:open|closed)\.)"), "examine {0}"),
)


def outcome_contradiction(task: Any, state: str, action: str, next_state: str) -> str:
    """Why `next_state`'s observation cannot be the engine's answer to `action`, or "" when it can.

    The engine opens its feedback with a sentence that restates the command it carried out ("go to stoveburner 3"
    -> "You arrive at stoveburner 3."). An observation that opens with such a sentence for a different command
    (another receptacle, object or verb) is not what this game says to this action, whatever the game's hidden
    layout: an experience model wrote "You arrive at stoveburner 4" there (docs/log/11-copy-hidden-world.md). Any other
    feedback ("Nothing happens.", a look, an examined object) is not judged. A reset (`state` empty) has no
    action to contradict."""
    if not state.strip():
        return ""
    obs = _line(next_state, "Observation")
    fb = " ".join((obs if obs is not None else next_state).split())
    command = normalize_command(action)
    for pattern, answer in _ANSWERS:
        m = pattern.match(fb)
        if m:
            names = [g for g in m.groups() if g is not None]
            said = answer.format(*names)
            return "" if said == command else f"the observation answers {said!r}, not {command!r}"
    return ""


def admissible_from_state(state: str) -> list[str]:
    """ALFWorld's admissible commands for a state text, rebuilt from the command grammar and ALFRED's
    tables (which receptacle holds what, what can be cleaned/heated/cooled/toggled). Sorted like the engine's."""
    s = parse_state(state)
    cmds = {"look", "inventory", "help"}
    cmds.update(f"go to {r}" for r in s.receptacles if r != s.location)
    toggleable, pickupable = lower_set("toggleable"), lower_set("pickupable")
    if s.location is not None:
        loc_type = type_of(s.location)
        cmds.add(f"examine {s.location}")
        if s.is_openable(s.location):
            cmds.add(f"close {s.location}" if s.location in s.opened else f"open {s.location}")
        if s.visible():
            for obj in s.known.get(s.location, []):
                # The engine only offers "examine <object>" for the object in hand (its examineObject
                # precondition's receptacle branch is lost in fast-downward's translation), so neither do we.
                if type_of(obj) in toggleable:
                    cmds.add(f"use {obj}")
                elif s.inventory is None and type_of(obj) in pickupable:
                    cmds.add(f"take {obj} from {s.location}")
        if s.inventory is not None:
            held = type_of(s.inventory)
            if s.visible() and held in can_contain().get(loc_type, ()):
                cmds.add(f"move {s.inventory} to {s.location}")
            for verb, recep_type, kinds in (("heat", "microwave", "heatable"), ("cool", "fridge", "coolable"),
                                            ("clean", "sinkbasin", "cleanable")):
                if loc_type == recep_type and held in lower_set(kinds):
                    cmds.add(f"{verb} {s.inventory} with {s.location}")
    if s.inventory is not None:
        cmds.add(f"examine {s.inventory}")
    return sorted(cmds)
