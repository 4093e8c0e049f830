"""Summarise a py-spy recording in collapsed-stack form (``-f raw``).

    .venv/bin/python bench/stacks.py OUT [--top 25] [--match sessions_app]

Prints, for the main thread (the event loop) and for the other threads
together: how many samples were idle (the loop waiting in ``select``, a pool
thread waiting for work), then the functions with the most samples of their
own (self) and the matching functions with the most samples under them
(inclusive). The recordings come from ``bench/common.py``'s ``py_spy``
(``bench/storm.py --py-spy OUT``, ``bench/resume.py --py-spy OUT``…).
"""

from __future__ import annotations

import argparse
import collections
import re

# The line number py-spy appends to a frame's name.
LINE = re.compile(r":\d+\)$")
# A sample whose innermost frame is one of these is a thread with nothing to do.
IDLE = re.compile(r"^(select|poll|epoll|_worker|wait|Condition\.wait|EpollSelector\.select)\b")


def summarise(path: str, top: int, match: str) -> None:
    threads: dict[str, tuple[collections.Counter, collections.Counter, list[int]]] = {}
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        # py-spy --threads puts the thread first: 'thread (1234): MainThread'.
        thread = "main" if "MainThread" in frames[0] else "others"
        own, under, counts = threads.setdefault(
            thread, (collections.Counter(), collections.Counter(), [0, 0])
        )
        n = int(count)
        innermost = frames[-1].strip()
        counts[0] += n
        if IDLE.match(innermost):
            counts[1] += n
            continue
        own[innermost] += n
        # Inclusive per function: py-spy names each frame's line, and a
        # function's lines would split its count.
        for frame in {LINE.sub(")", f) for f in frames}:
            if match in frame:
                under[frame.strip()] += n
    for thread, (own, under, (total, idle)) in threads.items():
        print(f"== {thread} thread(s): {total} samples, {idle} idle ({idle / max(total, 1):.0%})")
        print("  self:")
        for name, n in own.most_common(top):
            print(f"  {n:7d} {n / max(total, 1):6.1%} {name[:140]}")
        print(f"  inclusive, frames matching {match!r}:")
        for name, n in under.most_common(top):
            print(f"  {n:7d} {n / max(total, 1):6.1%} {name[:140]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default="sessions_app")
    args = parser.parse_args()
    summarise(args.path, args.top, args.match)


if __name__ == "__main__":
    main()
