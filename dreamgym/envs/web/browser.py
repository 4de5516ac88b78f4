"""Headless Chromium processes driven by Playwright, each owned by one worker thread, and a pool of them.

Owns: `BrowserConfig` (the executable, its flags, the time limits), `BrowserWorker` (one Chromium process this
code starts itself and one thread that runs every Playwright call on it), `BrowserFailure` (a crash or a hang,
with its reason), `BrowserPool` (workers handed to environments in turn) and the process-wide `shared_pool`.
Must not know: web tasks, observations, actions, DreamGym's environment contract.

Why a thread per browser: Playwright's sync API binds every object to the thread that created it, while DreamGym
steps environments from whatever thread its rollout pool picks. A worker takes closures over a queue and runs
them on its own thread, so any caller may drive any browser, and several environments (one browser context
each) may share one browser.

Why this code starts Chromium itself (`--remote-debugging-port=0`, then `connect_over_cdp`) instead of
`chromium.launch`: it then knows the process id, so a call that hangs past its limit is ended by killing that
process, which makes the blocked Playwright call raise and frees the thread. The worker then starts a new
Chromium on its next call; the call that hung and every later call on a context of the dead browser raise
`BrowserFailure` naming what happened, so an episode fails with its reason and the run goes on. On Linux the
kernel also kills a browser when the thread that started it ends (`PR_SET_PDEATHSIG`), so a process ended without
its exit handlers (a collect worker stopped by SIGTERM) leaves no orphaned Chromium behind.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dreamgym.config import ConfigError, ranged, validate_config

T = TypeVar("T")

DEFAULT_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage",
                 "--mute-audio", "--hide-scrollbars", "--disable-extensions")
DEFAULT_BROWSERS = 2
"""Browsers in the process-wide pool unless a family is told otherwise (`browsers=`): one per core here."""
_DEVTOOLS_RE = re.compile(r"DevTools listening on (ws://\S+)")


class BrowserFailure(RuntimeError):
    """The browser crashed, hung past its limit or could not start; `reason` says which. The browser that failed
    has been killed; the worker starts a new one on its next call."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass
class BrowserConfig:
    """How browsers are started and how long their calls may take."""

    executable: str = "/usr/bin/chromium"
    """The Chromium (or Chrome) binary; `$DREAMGYM_CHROMIUM` overrides the default."""
    flags: tuple[str, ...] = DEFAULT_FLAGS
    """Command-line flags added to `--headless=new --remote-debugging-port=0 --user-data-dir=<temp>`."""
    launch_timeout_s: float = ranged(30.0, gt=0)
    """A browser that has not opened its DevTools port within this many seconds counts as failed to start."""
    call_timeout_s: float = ranged(30.0, gt=0)
    """A call (an environment's reset or step) running longer than this is a hang: the browser is killed."""
    action_timeout_ms: float = ranged(3000.0, gt=0)
    """Playwright's default time limit for one page operation (a click waiting for its element)."""

    def __post_init__(self) -> None:
        if self.executable == "/usr/bin/chromium" and os.environ.get("DREAMGYM_CHROMIUM"):
            self.executable = os.environ["DREAMGYM_CHROMIUM"]

    def validate(self) -> None:
        if not (os.path.isfile(self.executable) and os.access(self.executable, os.X_OK)):
            raise ConfigError("executable", f"no executable Chromium at {self.executable!r}",
                              "a Chromium binary: `apt-get install chromium` gives /usr/bin/chromium; "
                              "set $DREAMGYM_CHROMIUM to use another")


def chromium_available(executable: str | None = None) -> bool:
    """True when a Chromium binary is where `BrowserConfig` would look."""
    path = executable or BrowserConfig().executable
    return os.path.isfile(path) and os.access(path, os.X_OK)


@dataclass
class _Job:
    fn: Callable[[Any], Any]
    done: threading.Event = field(default_factory=threading.Event)
    started: float | None = None
    result: Any = None
    error: BaseException | None = None


_STOP = object()


class BrowserWorker:
    """One Chromium process and the thread that runs every Playwright call on it (see the module docstring).

    `call(fn)` runs `fn(browser)` on the worker's thread with the connected Playwright `Browser` and returns its
    result; an exception of `fn` is re-raised unchanged, except a dead or hung browser, which raises
    `BrowserFailure`. `generation` counts browser starts: a browser context made under one generation is gone
    once it changes."""

    def __init__(self, config: BrowserConfig | None = None, name: str = "browser"):
        self.config = config or BrowserConfig()
        validate_config(self.config)
        self.name = name
        self.generation = 0
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile: str | None = None
        self._browser: Any = None
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"dreamgym-{name}", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        """The process id of the running Chromium, None before the first call or after a crash."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def call(self, fn: Callable[[Any], T], timeout_s: float | None = None) -> T:
        """`fn(browser)` on the worker's thread; `timeout_s` (default `config.call_timeout_s`) counts from when
        the call starts running, not from when it was queued behind other environments' calls."""
        if self._closed:
            raise BrowserFailure(f"{self.name} is closed")
        limit = self.config.call_timeout_s if timeout_s is None else timeout_s
        job = _Job(fn)
        self._jobs.put(job)
        while not job.done.wait(0.05):
            if job.started is not None and time.monotonic() - job.started > limit:
                self._kill(f"a call ran past {limit:g}s")
                job.done.wait(10.0)  # the blocked Playwright call raises once its browser is gone
                raise BrowserFailure(f"browser hung: a call ran past {limit:g}s; the browser was killed and "
                                     "restarts on the next call")
        if job.error is not None:
            raise job.error
        return job.result

    def kill(self) -> None:
        """Kill the browser process (as a crash would); the next call starts a new one."""
        self._kill("killed on request")

    def close(self) -> None:
        """Stop the browser and the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        self._thread.join(timeout=15.0)
        self._kill("closed")

    # ---------------------------------------------------------------------------------- worker thread

    def _loop(self) -> None:
        pw = None
        try:
            while True:
                job = self._jobs.get()
                if job is _STOP:
                    break
                job.started = time.monotonic()
                try:
                    if pw is None:
                        # Imported on the first call, not at thread start: an idle worker of a process that exits
                        # at once would otherwise still be importing at interpreter shutdown, which fails there.
                        from playwright.sync_api import sync_playwright

                        pw = sync_playwright().start()
                        # BrowserGym's actions find elements by Playwright test id; its ids live in "bid".
                        pw.selectors.set_test_id_attribute("bid")
                    job.result = job.fn(self._ensure_browser(pw))
                except BaseException as e:  # noqa: BLE001 - handed to the caller, never lost on this thread
                    job.error = self._classify(e)
                finally:
                    job.done.set()
        finally:
            self._disconnect()
            if pw is not None:
                try:
                    pw.stop()
                except Exception:  # noqa: BLE001 - stopping is best effort at shutdown
                    pass

    def _ensure_browser(self, pw: Any) -> Any:
        if self._browser is not None and self._browser.is_connected() and self.pid is not None:
            return self._browser
        if self._browser is not None or self._proc is not None:
            self.restarts += 1
        self._disconnect()
        self._kill("restarting")
        self._profile = tempfile.mkdtemp(prefix="dreamgym-chromium-")
        cmd = [self.config.executable, "--headless=new", "--remote-debugging-port=0",
               f"--user-data-dir={self._profile}", *self.config.flags, "about:blank"]
        # A new session: a kill of the browser's process group ends its renderers too.
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=_die_with_parent())
        self._proc = proc
        url = self._devtools_url(proc)
        self._browser = pw.chromium.connect_over_cdp(url, timeout=self.config.launch_timeout_s * 1000)
        self.generation += 1
        return self._browser

    def _devtools_url(self, proc: subprocess.Popen[bytes]) -> str:
        assert proc.stderr is not None
        deadline = time.monotonic() + self.config.launch_timeout_s
        seen: list[str] = []
        result: list[str] = []

        def read() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace")
                m = _DEVTOOLS_RE.search(line)
                if m and not result:
                    result.append(m.group(1))
                elif not result:
                    seen.append(line.strip())
            # Keep draining so Chromium never blocks on a full stderr pipe.

        threading.Thread(target=read, daemon=True, name=f"dreamgym-{self.name}-stderr").start()
        while time.monotonic() < deadline:
            if result:
                return result[0]
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        self._kill("did not start")
        tail = " | ".join(s for s in seen[-3:] if s)
        raise BrowserFailure(f"browser did not start: {self.config.executable} "
                             f"{'exited with ' + str(proc.returncode) if proc.returncode is not None else 'timed out'}"
                             f"{': ' + tail if tail else ''}")

    def _classify(self, e: BaseException) -> BaseException:
        """A failure of the browser itself becomes `BrowserFailure`; anything else is the caller's to handle."""
        if isinstance(e, BrowserFailure):
            return e
        dead = self._proc is None or self._proc.poll() is not None or (
            self._browser is not None and not self._browser.is_connected())
        text = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        closed = any(s in text for s in ("Target page, context or browser has been closed", "Browser has been closed",
                                         "Target closed", "Connection closed", "browser has disconnected"))
        if dead or closed:
            return BrowserFailure(f"browser crashed ({text}); it restarts on the next call")
        return e

    def _disconnect(self) -> None:
        browser, self._browser = self._browser, None
        if browser is not None:
            try:
                browser.close()
            except Exception:  # noqa: BLE001 - the browser may already be gone
                pass

    def _kill(self, why: str) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        profile, self._profile = self._profile, None
        if profile:
            shutil.rmtree(profile, ignore_errors=True)


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a function for `Popen(preexec_fn=)` that has the kernel kill the child when the thread that
    started it ends. Why: the browser runs in its own session, so nothing else ends it when its owner dies
    without running its exit handlers (a worker process ended by SIGTERM, as `multiprocessing.Pool.terminate`
    does); without this it would live on, orphaned."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_death_signal() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return set_death_signal


class BrowserPool:
    """`size` browser workers; `worker()` hands them out in turn, so environments spread over the browsers and
    the environments of one browser take turns on it (each in its own context)."""

    def __init__(self, size: int = 2, config: BrowserConfig | None = None):
        if size < 1:
            raise ConfigError("browsers", f"must be at least 1, got {size}", ">= 1")
        self.config = config or BrowserConfig()
        self.workers = [BrowserWorker(self.config, name=f"browser-{i}") for i in range(size)]
        self._next = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.workers)

    def worker(self) -> BrowserWorker:
        with self._lock:
            w = self.workers[self._next % len(self.workers)]
            self._next += 1
            return w

    def close(self) -> None:
        for w in self.workers:
            w.close()

    def __enter__(self) -> BrowserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: dict[tuple[Any, ...], BrowserPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(size: int = DEFAULT_BROWSERS, config: BrowserConfig | None = None) -> BrowserPool:
    """The process-wide pool of `size` browsers with `config` (made on first use, closed at exit), which the
    families' `make_env` uses unless given a pool."""
    cfg = config or BrowserConfig()
    key = (size, cfg.executable, cfg.flags, cfg.launch_timeout_s, cfg.call_timeout_s, cfg.action_timeout_ms)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = BrowserPool(size, cfg)
        return _SHARED[key]


@atexit.register
def _close_shared() -> None:
    for pool in _SHARED.values():
        pool.close()
    _SHARED.clear()
