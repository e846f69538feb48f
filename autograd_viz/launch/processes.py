"""Which process a trace comes from, and watching every process of a job.

A training job is often several processes: ``torchrun`` starts one per rank,
``torch.multiprocessing.spawn`` and ``multiprocessing`` start children. Each
process records its own trace, saved to its own file (``t.rank0.jsonl``,
``t.rank1.jsonl``, ..., or ``t.pid4242.jsonl`` for a child with no rank), and
each trace's header says which process it was (:func:`process_info`).

Note [Children armed by the environment]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A command that watches a script (``record``, ``nan``) cannot reach into the
processes the script starts, and the user's code must not change. What every
child inherits is the environment, so :func:`follow_children` puts two things
there: :data:`ENV`, the settings (what to record, where to save it, where to
report), and a directory first on ``PYTHONPATH`` whose ``sitecustomize``
module Python imports at start-up (``autograd_viz/cli/startup``). It starts
the same watching in the child before the child's first line runs, then
hands over to any ``sitecustomize`` of the user's. A child started by
``fork`` or a fork server does not start up again: it inherits its parent's
recording, which :func:`follow_forks` empties in the child (through
``multiprocessing``'s after-fork hooks) so that it holds the child's own
events. Every child saves when it exits (``atexit``, or ``multiprocessing``'s
finalizers for a forked child, which leaves through ``os._exit``), including
when its code raised, and leaves a small report in the job's directory, which
the watching command reads once the script has ended.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import socket
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from autograd_viz.launch.uncaught import trim_process_run, trim_uncaught
from autograd_viz.sources.arming import when_torch_is_imported
from autograd_viz.trace import Trace
from autograd_viz.trace.readers import INT_LIMIT
from autograd_viz.trace.text import one_line

ENV = "AUTOGRAD_VIZ_CHILDREN"
"""The environment variable that carries a watching command's settings to its children."""

STARTUP_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "cli", "startup")
"""The directory whose ``sitecustomize`` starts watching a child (Note [Children armed ...])."""

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Said = Callable[[], dict[str, Any]]
"""What a child says in its report beside its trace: the fields of :class:`ChildReport` that
its watching fills (``nan``: ``missed``), read when it exits."""

_noted: dict[str, Any] = {}
"""The default process group's rank, world size and backend, noted when it was made."""


# -- who this process is ----------------------------------------------------------------


def process_info(inherited_rank: str | None = None) -> dict[str, Any]:
    """The header's ``process`` record: who recorded the trace, and the clock to align it by.

    Args:
        inherited_rank: the ``RANK`` variable of the watching parent, which
            its children inherit without being that rank.

    Returns:
        ``pid``, ``host``, ``rank``, ``world_size``, ``local_rank`` and
        ``backend`` (``None`` when unknown), ``launcher`` (``"torchrun"``,
        ``"torch.multiprocessing.spawn"``, ``"multiprocessing (spawn)"``, ...,
        ``None`` when started directly) and ``clock``: ``[perf_ns, wall_ns]``,
        the event clock (``time.perf_counter_ns``) and ``time.time_ns`` read at
        the same moment, so traces of several processes line up.
    """
    rank, world_size, backend = _rank(inherited_rank)
    local_rank = _env_int("LOCAL_RANK") if rank is not None else None
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        # A rank the program or its launcher set outside the counts a trace holds (-1, the
        # usual "not distributed", or 23 digits) is kept as unknown: the file stays readable.
        "rank": _count_or_none(rank),
        "world_size": _count_or_none(world_size),
        "local_rank": _count_or_none(local_rank),
        "backend": backend,
        "launcher": launcher(),
        "clock": [time.perf_counter_ns(), time.time_ns()],
    }


def _rank(inherited_rank: str | None) -> tuple[int | None, int | None, str | None]:
    """Rank, world size and backend: of the process group, else of torchrun's variables."""
    group = _process_group()
    if group is not None:
        return group
    if _noted:
        return _noted["rank"], _noted["world_size"], _noted["backend"]
    rank = os.environ.get("RANK")
    if rank is None or rank == inherited_rank:
        return None, None, None  # a child of a rank (a data loader's worker) is not that rank
    return _env_int("RANK"), _env_int("WORLD_SIZE"), None


def _count_or_none(value: object) -> int | None:
    """``value`` when it is a count a trace file holds (0 to 2**64), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= INT_LIMIT else None


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _process_group() -> tuple[int, int, str | None] | None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    except Exception:  # noqa: BLE001 - a half-torn-down group says nothing
        return None


def note_process_groups() -> None:
    """Note the rank of the default process group when the program makes one.

    Programs destroy their process group before they exit, which is when a
    trace is saved; so ``init_process_group`` is wrapped (where
    ``torch.distributed`` and its ``distributed_c10d`` name it) to note the
    rank once it returns. The call itself is passed on unchanged. Call it once
    ``torch`` is imported.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available():
        return
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    original = getattr(dist, "init_process_group", None)
    if original is None or getattr(original, "_autograd_viz_noting", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        group = _process_group()
        if group is not None:
            _noted.update(rank=group[0], world_size=group[1], backend=group[2])
        return result

    init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
    init_process_group.__doc__ = original.__doc__
    init_process_group._autograd_viz_noting = True  # type: ignore[attr-defined]
    for module in (dist, c10d):
        if module is not None and getattr(module, "init_process_group", None) is original:
            module.init_process_group = init_process_group  # type: ignore[attr-defined]


def launcher() -> str | None:
    """What started this process: ``torchrun``, ``torch.multiprocessing.spawn``, ... or None."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun"
    mp = sys.modules.get("multiprocessing")
    if mp is None or mp.parent_process() is None:
        return "subprocess" if ENV in os.environ else None
    current = mp.current_process()
    target = getattr(current, "_target", None)
    if getattr(target, "__module__", None) == "torch.multiprocessing.spawn":
        return "torch.multiprocessing.spawn"
    method = getattr(current, "_start_method", None) or mp.get_start_method(allow_none=True)
    return f"multiprocessing ({method})" if method else "multiprocessing"


def process_trace_path(output: str, process: dict[str, Any]) -> str:
    """``t.jsonl`` → ``t.rank1.jsonl`` for rank 1, ``t.pid4242.jsonl`` for a process without one."""
    root, ext = os.path.splitext(output)
    tag = f"rank{process['rank']}" if process["rank"] is not None else f"pid{process['pid']}"
    return f"{root}.{tag}{ext or '.jsonl'}"


# -- following children ------------------------------------------------------------------


@dataclass(frozen=True)
class ChildSettings:
    """What a watching command asks of every child process (Note [Children armed ...])."""

    command: str
    """``"record"``, ``"nan"`` or ``"print"`` (``run --print``): what the child runs its code
    under."""
    job: str
    """The directory children report to."""
    output: str | None = None
    """The trace path that each process's own path is made from (``record``, ``nan -o``)."""
    max_values: int = 16
    """Tensors with at most this many elements keep their values."""
    nan: dict[str, Any] | None = None
    """``nan``'s options: ``first``, ``forward``, ``inf``, ``ignore``."""
    rank: str | None = None
    """The watching process's ``RANK`` variable, which its children inherit."""
    calls: dict[str, Any] | None = None
    """The call selection of ``record`` and ``nan``: ``steps``, ``every``, ``last`` (each process
    counts its own)."""
    root: str = _PACKAGE_ROOT
    """Where ``autograd_viz`` is imported from, for a child whose path lacks it."""
    values: str = "all"
    """Which gradients are summarized (``--values``)."""
    observe: str = "nodes"
    """What is watched (``--observe``)."""
    grads: dict[str, Any] | None = None
    """``grads``' options: ``rows`` (each child prints its own report)."""

    def to_env(self) -> str:
        """The settings as the value of :data:`ENV`."""
        return json.dumps(self.__dict__)

    @classmethod
    def from_env(cls, text: str) -> ChildSettings:
        """The settings in :data:`ENV`'s value.

        Raises:
            ValueError: the value is not settings this version wrote.
        """
        fields = json.loads(text)
        if not isinstance(fields, dict) or not isinstance(fields.get("job"), str):
            raise ValueError(f"{ENV} holds no settings")
        return cls(**fields)


@dataclass(frozen=True)
class ChildReport:
    """What one child process left in the job's directory when it exited."""

    pid: int
    rank: int | None
    world_size: int | None
    path: str
    """Its trace file."""
    graph_tasks: int
    events: int
    clock: tuple[int, int]
    """Its header's ``clock``."""
    missed: dict[str, Any] | None = None
    """``nan``'s finding at the parameters in a backward call it did not record (a
    :class:`~autograd_viz.nan.unrecorded.MissedFinding`'s fields), which no event of its
    trace holds (Note [Checking calls not recorded])."""


# Note [Children that outlive the script]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The watching command reads what the children left once the script has
# ended. After a normal end they have ended too (mp.spawn and torchrun join
# them). Stopped by a signal, they may not have: Ctrl-C and a scheduler's
# SIGTERM reach the whole process group, so the children are saving what they
# hold at that moment (Note [A child stopped by a signal]); a signal sent to
# the watching process alone leaves them running, orphaned, as it would
# unwatched. Read at once, a child still saving had no report yet: the parent
# took the job for its own (leaving its own empty trace beside the ranks'),
# said the child "ended before finishing" and, where it had written no call
# yet (a flight recorder writes only as it ends), removed the file the child
# was about to write, so every call it held was lost. So the command waits a
# few seconds (CHILDREN_WAIT_S) for the children still alive to end, takes a
# child that started a trace as one that records (its own file then is not
# needed when empty), never touches the file of a child still alive, and says
# which ones still run and where they will save. multiprocessing's resource
# tracker, which runs no program code and lives until its parent ends, is
# not watched (read_settings).

CHILDREN_WAIT_S = 5.0
"""How long a watching command waits for its children still saving (Note [Children that
outlive the script])."""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no /proc: the signal test is all there is
    state = stat.rfind(b")") + 2  # the state follows the command's name, which may hold ")"
    return stat[state : state + 1] != b"Z"


GRADS_SUFFIX = ".grads"
"""A ``grads`` child's note in the job's directory: its rank, its pid, whether it found."""


class Job:
    """The child processes of one watched script, followed while :func:`follow_children` lasts."""

    def __init__(self, settings: ChildSettings) -> None:
        self.settings = settings
        """What every child is asked to do."""

    def reports(self) -> list[ChildReport]:
        """What the children that recorded something left, by rank then pid."""
        found = []
        for name in sorted(os.listdir(self.settings.job)):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.settings.job, name), encoding="utf-8") as f:
                    fields = json.load(f)
                fields["clock"] = tuple(fields["clock"])
                found.append(ChildReport(**fields))
            except (OSError, ValueError, TypeError, KeyError):
                continue  # a child killed while writing its report; its trace says the rest
        return sorted(found, key=lambda r: (r.rank is None, r.rank or 0, r.pid))

    def grads_found(self) -> list[tuple[int | None, int, bool]]:
        """``(rank, pid, found)`` of each child that explained its backward calls under
        ``grads`` and printed its report; ``found``: a parameter got no gradient there."""
        found = []
        for name in sorted(os.listdir(self.settings.job)):
            if not name.endswith(GRADS_SUFFIX):
                continue
            try:
                with open(os.path.join(self.settings.job, name), encoding="utf-8") as f:
                    fields = json.load(f)
                found.append((fields["rank"], int(fields["pid"]), bool(fields["found"])))
            except (OSError, ValueError, TypeError, KeyError):
                continue  # a child killed while writing it
        return sorted(found, key=lambda r: (r[0] is None, r[0] or 0, r[1]))

    def unfinished(self) -> list[tuple[int, str]]:
        """``(pid, trace file)`` of each streaming child that ended without finishing its
        trace (killed by a signal): the calls it wrote are in the file. One that wrote none
        leaves none. A child still running is none of them (:meth:`running`)."""
        found = []
        for pid, path in self._started():
            if _alive(pid):
                continue  # its file is its own (Note [Children that outlive the script])
            try:
                with open(path, "rb") as trace:
                    trace.readline()  # the header
                    wrote = bool(trace.readline())
            except OSError:
                continue
            if wrote:
                found.append((pid, path))
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
        return found

    def running(self) -> list[tuple[int, str]]:
        """``(pid, trace file)`` of each child that started its trace, has not reported it
        and still runs (Note [Children that outlive the script])."""
        return [(pid, path) for pid, path in self._started() if _alive(pid)]

    def settle(self, timeout: float = CHILDREN_WAIT_S) -> None:
        """Wait, at most ``timeout`` seconds, for the children still saving their traces to
        end (Note [Children that outlive the script])."""
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _started(self) -> list[tuple[int, str]]:
        """``(pid, trace file)`` of each child that started a trace and has not reported it."""
        found = []
        for name in sorted(os.listdir(self.settings.job)):
            pid = name.removesuffix(".started")
            if pid == name or os.path.exists(os.path.join(self.settings.job, f"{pid}.json")):
                continue
            try:
                with open(os.path.join(self.settings.job, name), encoding="utf-8") as f:
                    found.append((int(pid), f.read()))
            except (OSError, ValueError):
                continue
        return found


@contextmanager
def follow_children(
    command: str,
    trace: Trace,
    output: str | None = None,
    max_values: int = 16,
    nan: dict[str, Any] | None = None,
    calls: dict[str, Any] | None = None,
    values: str = "all",
    observe: str = "nodes",
    said: Said | None = None,
    grads: dict[str, Any] | None = None,
) -> Iterator[Job]:
    """Watch, inside the block, every child process the program starts, as ``command`` does here.

    Args:
        command: ``"record"``, ``"nan"``, ``"print"`` or ``"grads"``.
        trace: this process's recording, which a forked child empties and keeps.
        output: the trace path each child's path is made from; ``None`` keeps
            the children's traces in the job's directory (``nan`` without ``-o``).
        max_values: as :class:`~autograd_viz.trace.recorder.Recorder`'s.
        nan: ``nan``'s options, for ``command="nan"``.
        calls: ``steps``, ``every`` and ``last``, for each child's own calls.
        values: ``--values``, the tier of summaries each child keeps.
        observe: ``--observe``, what each child watches.
        said: what a child forked from here says in its report, from the watching it
            inherits (a spawned child says what its own watching says).
        grads: ``grads``' options, for ``command="grads"``.

    Yields:
        The :class:`Job`; read its :meth:`~Job.reports` once the program has ended.
    """
    job_dir = tempfile.mkdtemp(prefix="autograd-viz-job-")
    settings = ChildSettings(
        command=command,
        job=job_dir,
        output=os.path.abspath(output) if output is not None else None,
        max_values=max_values,
        nan=nan,
        rank=os.environ.get("RANK"),
        calls=calls,
        values=values,
        observe=observe,
        grads=grads,
    )
    saved = {name: os.environ.get(name) for name in (ENV, "PYTHONPATH")}
    os.environ[ENV] = settings.to_env()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [STARTUP_DIR, *([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [])]
    )
    job = Job(settings)
    follow_forks(job, trace, said)
    try:
        with (
            when_torch_is_imported(note_process_groups),
            _saving_forks_at_exit(),
            _arming_python_children(),
        ):
            yield job
    finally:
        _forks[:] = [entry for entry in _forks if entry[0]() is not job]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _remove_job_dir(job_dir)


def _remove_job_dir(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        with contextlib.suppress(OSError):
            os.remove(os.path.join(job_dir, name))
    with contextlib.suppress(OSError):
        os.rmdir(job_dir)


def follow_forks(owner: object, trace: Trace, said: Said | None = None) -> None:
    """Make a child that ``multiprocessing`` forks from here record into ``trace``, emptied.

    The hook lasts as long as ``owner`` (``multiprocessing`` keeps it weakly);
    ``said``: what the child says in its report beside its trace.
    """
    from multiprocessing import process, util

    settings: ChildSettings = owner.settings  # type: ignore[attr-defined]
    parent = os.getpid()

    finishing: list[Callable[[], None]] = []  # this fork's saving, once forked() made it

    def in_child(_: object) -> None:
        with contextlib.suppress(Exception):  # Note [A child's uncaught error]
            trim_uncaught()
            trim_process_run(process.current_process())
        if os.getpid() == parent or not finishing:
            return  # a spawned child runs the hooks it registered at start-up: not a fork
        with contextlib.suppress(Exception):
            # multiprocessing cleared the finalizers it inherited just before this hook.
            util.Finalize(None, finishing[-1], exitpriority=-(10**6))

    def forked() -> None:
        if os.getpid() == parent:
            return
        with contextlib.suppress(Exception):  # nothing of ours may break the child's start
            # The thread that held the lock at the fork does not exist here: never wait for it.
            locked = trace.lock.acquire(timeout=1)
            try:
                trace.events.clear()
                trace.graph_tasks.clear()
                trace._replayer = None
                trace.header.pop("process", None)
            finally:
                if locked:
                    trace.lock.release()
            if settings.command in ("print", "grads"):
                return  # it prints its own calls as they end, headed by its pid: nothing to save
            finish = _finisher(trace, settings, said)
            finishing[:] = [finish]
            atexit.register(finish)
            _exit_hooks.append(finish)

    util.register_after_fork(owner, in_child)
    _forks.append((weakref.ref(owner), forked))
    _at_fork_once()


# Note [Every fork]
# ~~~~~~~~~~~~~~~~~
# multiprocessing's after-fork hooks run only in the children it starts itself;
# a program that calls os.fork() (a data loader of its own, a daemon) gets a
# child that records into the parent's trace and saves nothing. So the trace is
# emptied and its saving set up by os.register_at_fork, in every forked child,
# before the child's first line runs. A forked child leaves by its exit hooks,
# by multiprocessing's finalizers, or by os._exit, which runs neither: while a
# script is watched, os._exit saves what a forked child recorded first
# (_saving_forks_at_exit). A hook registered with os.register_at_fork stays for
# the life of the process, so it runs the followers still listed in _forks.

_forks: list[tuple[weakref.ref[object], Callable[[], None]]] = []
"""(owner, what a forked child does) of each recording that forks follow (Note [Every fork])."""

_exit_hooks: list[Callable[[], None]] = []
"""What a forked child saves before ``os._exit`` ends it (each checks it is its own process)."""

_at_fork: list[bool] = []


def _at_fork_once() -> None:
    if _at_fork or not hasattr(os, "register_at_fork"):
        return
    _at_fork.append(True)
    os.register_at_fork(after_in_child=_in_forked_child)


def _in_forked_child() -> None:
    _exit_hooks.clear()  # the parent's are its own
    for owner, forked in list(_forks):
        if owner() is not None:
            forked()


# Note [A child's PYTHONPATH replaced]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A script may set PYTHONPATH itself before it starts a child (its own source
# tree, a venv's), in os.environ or in the env it hands to subprocess; the
# child then never imports our sitecustomize and would run unwatched, silently.
# Every process start on POSIX, subprocess's and multiprocessing's spawn and
# forkserver alike, goes through _posixsubprocess.fork_exec with the child's
# environment (None: this process's). While a script is watched, a Python
# child whose environment carries our settings (ENV) but not our start-up
# directory first on PYTHONPATH gets it put back in front of the script's
# PYTHONPATH, as follow_children put it there at first; a Python child whose
# environment lost ENV itself (a script that hands it a clean env) cannot be
# watched: one line names it. Other programs' environments are left alone.

_FORK_EXEC_ENV = 5
"""Where ``fork_exec`` takes the child's environment (CPython 3.8 to 3.13)."""


@contextmanager
def _arming_python_children() -> Iterator[None]:
    """Inside the block, a Python child started with our settings but a replaced
    ``PYTHONPATH`` is armed all the same (Note [A child's PYTHONPATH replaced])."""
    try:
        import _posixsubprocess
        import subprocess
    except ImportError:  # not POSIX: children are armed through the environment alone
        yield
        return
    real = getattr(_posixsubprocess, "fork_exec", None)
    if real is None:
        yield
        return

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        if len(args) > _FORK_EXEC_ENV:
            with contextlib.suppress(Exception):  # never in the way of the child's start
                env = _armed_env(args[0], args[_FORK_EXEC_ENV])
                if env is not None:
                    args = (*args[:_FORK_EXEC_ENV], env, *args[_FORK_EXEC_ENV + 1 :])
        return real(*args, **kwargs)

    patched = [
        (module, name)
        for module, name in ((_posixsubprocess, "fork_exec"), (subprocess, "_fork_exec"))
        if getattr(module, name, None) is real
    ]
    for module, name in patched:
        setattr(module, name, fork_exec)
    try:
        yield
    finally:
        for module, name in patched:
            if getattr(module, name, None) is fork_exec:
                setattr(module, name, real)


def _armed_env(argv: Any, env: list[bytes] | None) -> list[bytes] | None:
    """The environment to start ``argv`` with, when it must change to watch a Python child;
    ``None`` to start it as asked."""
    if not argv or not _is_python(os.fsdecode(argv[0])):
        return None
    entries = env if env is not None else [k + b"=" + v for k, v in os.environb.items()]
    values = dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)
    if os.fsencode(ENV) not in values:  # a clean environment: our settings are gone
        command = one_line(" ".join(os.fsdecode(word) for word in argv), 200)
        print(
            f"autograd-viz: a child process ({command}) was started without {ENV} in its "
            "environment: it is not watched",
            file=sys.stderr,
        )
        return None
    path = os.fsdecode(values.get(b"PYTHONPATH", b""))
    parts = path.split(os.pathsep) if path else []
    if parts[:1] == [STARTUP_DIR]:
        return None
    values[b"PYTHONPATH"] = os.fsencode(os.pathsep.join([STARTUP_DIR, *parts]))
    return [k + b"=" + v for k, v in values.items()]


def _is_python(program: str) -> bool:
    """Whether ``program`` (a child's ``argv[0]``) is a Python interpreter."""
    name = os.path.basename(program)
    return program == sys.executable or re.fullmatch(r"python[0-9.]*", name) is not None


@contextmanager
def before_os_exit(before: Callable[[int], None]) -> Iterator[None]:
    """Inside the block, ``os._exit(status)`` calls ``before(status)`` first, then exits
    whatever ``before`` raised; afterwards it is ``os._exit`` as it was."""
    real_exit = os._exit

    def exit_after(status: int) -> NoReturn:
        try:
            with contextlib.suppress(Exception):  # the exit goes on
                before(status)
        finally:
            real_exit(status)

    os._exit = exit_after
    try:
        yield
    finally:
        if os._exit is exit_after:
            os._exit = real_exit


def _saving_forks_at_exit() -> contextlib.AbstractContextManager[None]:
    """Inside the block, ``os._exit`` in a forked child saves its trace first (Note [Every
    fork]); in this process it is ``os._exit`` as it was."""

    def run_hooks(status: int) -> None:
        for hook in list(_exit_hooks):
            with contextlib.suppress(Exception):  # the next hook still runs
                hook()

    return before_os_exit(run_hooks)


def watch_as_child(trace: Trace, settings: ChildSettings, said: Said | None = None) -> None:
    """Save ``trace`` when this process exits, and report it with what ``said`` says (a
    spawned child's start-up). The job's directory is told that it runs (Note [Children
    that outlive the script])."""
    pid = os.getpid()
    if settings.output is not None:
        path = process_trace_path(settings.output, {"rank": None, "pid": pid})
    else:
        path = os.path.join(settings.job, f"{pid}.jsonl")
    with contextlib.suppress(OSError):  # the child is watched all the same
        _tell_started(settings, path)
    atexit.register(_finisher(trace, settings, said))
    follow_forks(_Holder(settings), trace, said)


class _Holder:
    """Keeps a child's after-fork hook registered for the life of the process."""

    def __init__(self, settings: ChildSettings) -> None:
        self.settings = settings
        _held.append(self)


_held: list[_Holder] = []


_finished: set[tuple[int, int]] = set()
"""(trace id, pid) of every trace saved at exit: once, by whichever exit hook runs first."""


def _finisher(trace: Trace, settings: ChildSettings, said: Said | None = None) -> Any:
    pid = os.getpid()

    def finish() -> None:
        key = (id(trace), pid)
        if os.getpid() != pid or key in _finished:
            return  # a fork of this process has its own
        _finished.add(key)
        try:
            save_child_trace(trace, settings, said)
        except Exception as exc:  # noqa: BLE001 - the child's exit goes on; one line says why
            print(f"autograd-viz: process {pid} could not save its trace: {exc}", file=sys.stderr)

    return finish


def save_child_trace(trace: Trace, settings: ChildSettings, said: Said | None = None) -> str | None:
    """Save a child's trace where its settings say, and report it with what ``said`` says;
    ``None`` if it recorded nothing and says nothing.

    Returns:
        The trace file's path.
    """
    extra = said() if said is not None else {}
    if not trace.events and not extra:
        return None
    process = process_info(settings.rank)
    trace.header["process"] = process
    if settings.output is not None:
        path = process_trace_path(settings.output, process)
    else:
        path = os.path.join(settings.job, f"{process['pid']}.jsonl")
    trace.save(path)
    stats = trace.stats()
    report_child(settings, process, path, stats.graph_tasks, stats.events, extra)
    return path


def streamed_path(settings: ChildSettings) -> str:
    """Where a child streams its trace while it runs: its ``pid`` file (renamed to its rank's
    when it turns out to have one). The job's directory is told, so that a child killed
    before it finished is still named (:meth:`Job.unfinished`)."""
    assert settings.output is not None
    path = process_trace_path(settings.output, {"rank": None, "pid": os.getpid()})
    _tell_started(settings, path)
    return path


def _tell_started(settings: ChildSettings, path: str) -> None:
    """Tell the job's directory that this child runs and where its trace goes (``path``, or
    its rank's name for it)."""
    with open(os.path.join(settings.job, f"{os.getpid()}.started"), "w", encoding="utf-8") as f:
        f.write(path)


def finish_streamed(path: str, settings: ChildSettings, graph_tasks: int, events: int) -> None:
    """A child's streamed trace is complete: rename it for its rank, and report it.

    A child that recorded nothing leaves no file.
    """
    if not events:
        with contextlib.suppress(OSError):
            os.remove(path)
        return
    process = process_info(settings.rank)
    final = process_trace_path(settings.output or path, process)
    if final != path:
        os.replace(path, final)
    report_child(settings, process, final, graph_tasks, events)


def report_child(
    settings: ChildSettings,
    process: dict[str, Any],
    path: str,
    graph_tasks: int,
    events: int,
    extra: dict[str, Any] | None = None,
) -> None:
    """Leave this child's report in the job's directory, for the watching command to read
    (``extra``: more of :class:`ChildReport`'s fields)."""
    report = {
        **(extra or {}),
        "pid": process["pid"],
        "rank": process["rank"],
        "world_size": process["world_size"],
        "path": path,
        "graph_tasks": graph_tasks,
        "events": events,
        "clock": process["clock"],
    }
    if not os.path.isdir(settings.job):
        # The watching command has ended and read what it could (a child that outlives it,
        # as a spawned rank stopped only when its parent died): nobody is left to tell, and
        # the trace is where the command said the calls it wrote are.
        return
    target = os.path.join(settings.job, f"{process['pid']}.json")
    with open(f"{target}.tmp", "w", encoding="utf-8") as f:
        json.dump(report, f)
    os.replace(f"{target}.tmp", target)


def wall_ns(t_ns: int, clock: tuple[int, int] | list[int]) -> int:
    """An event's ``t_ns`` as wall-clock nanoseconds, by its trace's ``clock`` pair."""
    return t_ns - clock[0] + clock[1]


def read_settings() -> ChildSettings | None:
    """This process's settings as a child of a watching command, or ``None`` if it is not one
    (or is multiprocessing's resource tracker: Note [Children that outlive the script])."""
    text = os.environ.get(ENV)
    if not text or _resource_tracker():
        return None
    return ChildSettings.from_env(text)


def _resource_tracker() -> bool:
    """Whether this process is multiprocessing's resource tracker (``python -c 'from
    multiprocessing.resource_tracker import main; ...'``)."""
    argv = list(getattr(sys, "orig_argv", ()))
    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else ""
    return code.startswith("from multiprocessing.resource_tracker import main")
