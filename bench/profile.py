"""Where the time goes: py-spy records each service while a scenario runs.

py-spy samples a running process from outside (no code changes, native frames included), so
the services are profiled exactly as benchmarked. Output per service: the raw collapsed stacks
(`<name>.txt`, flamegraph.pl / speedscope input) and a summary of the hottest frames.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

_RATE = 100
# Frames every sample passes through: they say nothing about where the time goes.
_PLUMBING = frozenset(
    {
        "<frozen runpy>",
        "__main__.py",
        "threading.py",
        "thread.py",
        "base_events.py",
        "events.py",
        "runners.py",
        "_asynciomodule.c",
        "_ctypes.c",
        "callproc.c",
        "libffi.so.8.1.2",
        "libc.so.6",
        "libpython3.11.so.1.0",
    }
)
# Frames of a thread that is blocked, not running: event loops waiting for I/O, locks,
# condition variables, queues, sleeps.
_BLOCKING = frozenset(
    {
        "epoll_wait",
        "poll",
        "ppoll",
        "select",
        "PyThread_acquire_lock_timed",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_cond_clockwait",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "nanosleep",
        "clock_nanosleep",
        "accept",
        "accept4",
    }
)


def _py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "py-spy"
    return str(beside) if beside.exists() else None


@contextmanager
def recording(pids: Mapping[str, int], out_dir: Path) -> Iterator[None]:
    """Samples every process in `pids` until the block ends, then writes the summaries."""
    binary = _py_spy()
    if binary is None:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    out_dir.mkdir(parents=True, exist_ok=True)
    recorders: dict[str, subprocess.Popen[bytes]] = {}
    for name, pid in pids.items():
        # --native (llama.cpp and sqlite-vec frames) pauses the process at each sample, which
        # --nonblocking would avoid but cannot combine with.
        command = [binary, "record", "--pid", str(pid), "--rate", str(_RATE), "--native"]
        command += ["--format", "raw", "--output", str(out_dir / f"{name}.txt")]
        with (out_dir / f"{name}.log").open("wb") as log:
            recorders[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        for recorder in recorders.values():
            recorder.send_signal(signal.SIGINT)
        for recorder in recorders.values():
            try:
                recorder.wait(30)
            except subprocess.TimeoutExpired:
                recorder.kill()
        for name in recorders:
            raw = out_dir / f"{name}.txt"
            if raw.exists():
                (out_dir / f"{name}-summary.txt").write_text(summarize(raw.read_text()))


def _frame_name(frame: str) -> str:
    # "function (path/to/file.py:123)" -> "function (file.py)"; native frames have no line.
    name, _, where = frame.partition(" (")
    if not where:
        return name
    source = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({Path(source).name})"


def _plumbing(frame: str) -> bool:
    name, _, source = frame.partition(" (")
    return name.startswith("0x") or source.rstrip(")") in _PLUMBING


def _blocked(frames: list[str]) -> bool:
    return any(frame.split(" (", 1)[0] in _BLOCKING for frame in frames)


def summarize(raw: str, top: int = 25) -> str:
    """Self and inclusive shares of the hottest frames in py-spy's collapsed stacks, over the
    samples of threads that were running (with --native, py-spy also samples threads blocked
    in a wait; those are counted apart). Spinning, e.g. OpenMP waiting for work, is running."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = blocked = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(frame) for frame in stack.split(";")]
        if _blocked(frames):
            blocked += count
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if total == 0:
        return f"no running samples ({blocked} blocked)\n"
    lines = [
        f"{total} running samples at {_RATE} Hz ({blocked} more in blocking waits, excluded)",
        "",
        "self time:",
    ]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    lines += ["", "inclusive time (without interpreter and thread plumbing):"]
    shown = [(f, n) for f, n in inclusive.most_common() if not _plumbing(f)][:top]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in shown]
    return "\n".join(lines) + "\n"
