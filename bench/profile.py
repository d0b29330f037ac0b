"""py-spy on the broker while a row runs, and a summary of where its time went.

The recording is py-spy's raw (collapsed-stack) format, one
``frame;frame;...;frame count`` line per distinct stack: flamegraph.pl,
inferno and speedscope all read it. ``summarize`` ranks functions by own
time (the frame on top of the stack) and by total time (anywhere on it).
Run ``python -m bench.profile FILE [--duration S]`` to summarize a recording again.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

RATE_HZ = 250
_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")  # "func (path/file.py:123)"


def py_spy() -> str | None:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    return found


class Recording:
    """``with Recording(pid, path):`` samples ``pid`` for the duration of the block."""

    def __init__(self, pid: int, path: Path):
        self.pid = pid
        self.path = path
        self.proc: subprocess.Popen | None = None
        self.seconds = 0.0

    def __enter__(self) -> "Recording":
        binary = py_spy()
        if binary is None:
            raise RuntimeError("py-spy is not installed (make bench installs it)")
        self.log = open(self.path.with_suffix(".log"), "wb")
        self.proc = subprocess.Popen([binary, "record", "--pid", str(self.pid), "--rate", str(RATE_HZ),
                                      "--format", "raw", "--output", str(self.path)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        time.sleep(0.5)  # attached before the client starts
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.monotonic() - self.start
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _function(frame: str) -> str:
    match = _FRAME.match(frame)
    return f"{match[1]} ({match[2]})" if match else frame


def summarize(path: Path, seconds: float | None = None, top: int = 12) -> str:
    """Own and total time per function, in % of the samples (and of wall time when ``seconds`` is known)."""
    own: Counter = Counter()
    total: Counter = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        count = int(match[2])
        functions = [_function(f) for f in match[1].split(";")]
        samples += count
        own[functions[-1]] += count
        for function in set(functions):
            total[function] += count
    if not samples:
        return f"{path.name}: no samples (the broker was idle)"
    out = [f"{path.name}: {samples} samples at {RATE_HZ} Hz"]
    if seconds:
        out[0] += f" over {seconds:.1f} s: the broker's Python thread was busy {samples / (RATE_HZ * seconds):.0%} of the time"
    # frames on every stack (the interpreter's entry, the event loop) say nothing
    total = Counter({f: n for f, n in total.items() if n < samples})
    for title, counts in (("own time", own), ("total time (incl. callees)", total)):
        out.append(f"  top {top} by {title}:")
        out += [f"    {n / samples:6.1%}  {function}" for function, n in counts.most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description="Summarize a py-spy raw recording.")
    parser.add_argument("file", type=Path)
    parser.add_argument("--duration", type=float, help="seconds the recording covered")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    print(summarize(args.file, args.duration, args.top))


if __name__ == "__main__":
    main()
