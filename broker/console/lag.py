"""Lag over time: each group's total lag as the console saw it (sampled whenever a page about groups is
rendered, so only while someone looks), and the SVG chart of it on the group page."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

SAMPLES = 720  # per group: an hour at one look every 5 s
MIN_GAP_S = 1.0  # looks closer together than this (two open pages) add one sample
GROUPS = 1000  # groups remembered; the least recently seen go first


class LagHistory:
    def __init__(self):
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def add(self, group_id: str, lag: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        samples = self._samples.pop(group_id, None) or deque(maxlen=SAMPLES)
        self._samples[group_id] = samples  # (re)inserted last: dicts keep insertion order
        if samples and now - samples[-1][0] < MIN_GAP_S:
            samples[-1] = (samples[-1][0], lag)
        else:
            samples.append((now, lag))
        while len(self._samples) > GROUPS:
            del self._samples[next(iter(self._samples))]

    def samples(self, group_id: str) -> list[tuple[float, int]]:
        return list(self._samples.get(group_id, ()))


@dataclass
class Chart:
    width: int
    height: int
    points: str  # an SVG polyline's points
    max_lag: int
    span_s: int
    samples: int


def chart(samples: list[tuple[float, int]], width: int = 640, height: int = 160) -> Chart:
    """The polyline of lag against time, scaled to the box (lag 0 at the bottom)."""
    if not samples:
        return Chart(width, height, "", 0, 0, 0)
    first, last = samples[0][0], samples[-1][0]
    top = max(lag for _, lag in samples) or 1
    span = (last - first) or 1.0
    points = " ".join(f"{(t - first) / span * width:.1f},{height - lag / top * height:.1f}" for t, lag in samples)
    return Chart(width, height, points, max(lag for _, lag in samples), round(last - first), len(samples))
