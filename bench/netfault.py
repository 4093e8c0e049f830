"""A TCP proxy of the chaos suite's own that breaks the network to a service:
latency, loss, a cut and an outage, in a process apart from the clients it
disturbs (its timing must not depend on theirs).

Why in user space: the suite wanted ``tc netem`` in a network namespace it
builds itself, but this machine's kernel has no ``sch_netem`` and loads no
modules (``tc qdisc add … netem`` answers "Specified qdisc kind is unknown").
So the faults are made where TCP meets the application, and each is what the
application would see of the kernel's:

- ``delay MS JITTER``: every chunk is delivered MS (± JITTER) ms after it
  was read, in each direction, in order;
- ``loss P STALL``: a chunk is "lost" with probability P, and it and every
  chunk after it on that connection wait STALL ms more: TCP's retransmission
  (at least its 200 ms RTO) and its head-of-line blocking, which is what a
  lost segment costs an application;
- ``cut``: every open connection is reset, as a restarted server's are;
- ``down``: ``cut``, and the port refuses connections until ``up``.

Usage (the suite starts it: ``chaos_database.NetFault``)::

    python bench/netfault.py --control PORT NAME=LISTEN:HOST:PORT ...

One command a line on the control port (``NAME delay 5 1``, ``NAME up``,
``NAME stats``); the answer is one line, ``ok …`` or ``error …``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import socket
import struct
import sys


class Route:
    """One listening port forwarded to one service, with its faults."""

    def __init__(self, name: str, listen: int, host: str, port: int) -> None:
        self.name, self.listen, self.host, self.port = name, listen, host, port
        self.delay = self.jitter = 0.0
        self.loss, self.stall = 0.0, 0.0
        self.server: asyncio.Server | None = None
        self.conns: set[asyncio.StreamWriter] = set()
        self.rng = random.Random(7)
        self.counts = {"connections": 0, "chunks": 0, "lost": 0}

    async def up(self) -> None:
        if self.server is None:
            self.server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.listen, reuse_address=True
            )

    async def down(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        self.cut()

    def cut(self) -> None:
        for writer in list(self.conns):
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                # SO_LINGER 0: the close is a reset, as a dead server's is.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self.conns.clear()

    async def _serve(self, reader, writer) -> None:
        self.counts["connections"] += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        self.conns |= {writer, up_writer}
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self.conns.discard(w)
                w.transport.abort()

    async def _pump(self, reader, writer) -> None:
        """Copy one direction, each chunk held as the faults say, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        last = 0.0

        async def deliver() -> None:
            while True:
                at, data = await queue.get()
                if data is None:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)  # the fault: this chunk's delay
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(65536):
                self.counts["chunks"] += 1
                extra = self.delay + (self.rng.uniform(-1, 1) * self.jitter if self.jitter else 0)
                if self.loss and self.rng.random() < self.loss:
                    self.counts["lost"] += 1
                    extra += self.stall
                last = max(loop.time() + max(extra, 0) / 1000, last)
                queue.put_nowait((last, data))
            queue.put_nowait((last, None))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()

    def stats(self) -> str:
        state = "up" if self.server is not None else "down"
        return f"{state} open={len(self.conns) // 2} " + " ".join(
            f"{k}={v}" for k, v in self.counts.items()
        )


async def command(routes: dict[str, Route], line: str) -> str:
    name, verb, *args = line.split() + [""] * 2
    route = routes.get(name)
    if route is None:
        return f"error no route {name!r}"
    if verb == "delay":
        route.delay, route.jitter = float(args[0]), float(args[1] or 0)
    elif verb == "loss":
        route.loss, route.stall = float(args[0]), float(args[1] or 200)
    elif verb == "clear":
        route.delay = route.jitter = route.loss = 0.0
    elif verb == "cut":
        route.cut()
    elif verb == "down":
        await route.down()
    elif verb == "up":
        await route.up()
    elif verb != "stats":
        return f"error unknown command {verb!r}"
    return f"ok {route.stats()}"


class NetFault:
    """The suite's handle on a netfault process: ``NetFault({"pg": ("127.0.0.1",
    5432)})`` starts one with a free port per route (``port("pg")``), and
    ``send("pg", "down")`` gives a command and returns its answer."""

    def __init__(self, routes: dict[str, tuple[str, int]], log_path) -> None:
        import subprocess

        self.ports = {name: _free_port() for name in routes}
        self.control = _free_port()
        specs = [f"{n}={self.ports[n]}:{h}:{p}" for n, (h, p) in routes.items()]
        self.log = open(log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--control", str(self.control), *specs],
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        if self.proc.stdout.readline() != b"netfault ready\n":
            raise RuntimeError(f"netfault did not start (see {log_path})")
        self.sock = socket.create_connection(("127.0.0.1", self.control), timeout=10)
        self.answers = self.sock.makefile("rb")

    def port(self, name: str) -> int:
        return self.ports[name]

    def send(self, name: str, line: str) -> str:
        self.sock.sendall(f"{name} {line}\n".encode())
        answer = self.answers.readline().decode().strip()
        if not answer.startswith("ok"):
            raise RuntimeError(f"netfault: {name} {line}: {answer}")
        return answer

    def stop(self) -> None:
        self.sock.close()
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("routes", nargs="+", help="NAME=LISTEN:HOST:PORT")
    args = parser.parse_args()
    routes: dict[str, Route] = {}
    for spec in args.routes:
        name, rest = spec.split("=", 1)
        listen, host, port = rest.split(":")
        routes[name] = Route(name, int(listen), host, int(port))
        await routes[name].up()

    async def control(reader, writer) -> None:
        while line := await reader.readline():
            try:
                answer = await command(routes, line.decode().strip())
            except (ValueError, IndexError, OSError) as exc:
                answer = f"error {exc}"
            writer.write(answer.encode() + b"\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(control, "127.0.0.1", args.control)
    print("netfault ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    sys.exit(0)
