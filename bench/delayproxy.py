#!/usr/bin/env python3
"""A user-space WAN delay proxy for the benchmark (issue 16).

This kernel has no netem and no iptables, so latency is emulated in user
space: every byte read from one side is written to the other side half the
round-trip time later, in both directions, keeping order. The TCP handshake
between the client and this proxy is local and not delayed (the same for
every tool measured).

    bench/delayproxy.py --rtt-ms 100 [--count-file F] LISTEN_HOST:PORT=TARGET_HOST:PORT [...]

With --count-file, the number of connections accepted so far (all
mappings) is written to F after each one: the benchmark reads it before and
after a run to check that a tool really went through the proxy.

One process can serve many mappings (one per lab host). A client reaches a
host through an ssh_config `Host nK / HostName LISTEN_HOST / Port PORT`
entry, which OpenSSH, kwinctl, pyinfra and Ansible all honour.
"""

import argparse
import asyncio
import os
import sys
import time


async def pump(reader, writer, delay):
    """Copy reader to writer, each chunk delivered `delay` seconds after it
    arrived; chunks stay in order and reading never waits for delivery."""
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass

    task = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            queue.put_nowait((time.monotonic() + delay, data))
    except OSError:
        pass
    queue.put_nowait((time.monotonic() + delay, None))
    try:
        await task
    except OSError:
        pass


ACCEPTED = 0


def count(path):
    global ACCEPTED
    ACCEPTED += 1
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % ACCEPTED)
        os.replace(tmp, path)


async def serve(listen, target, delay, count_file=None):
    thost, tport = target

    async def handle(creader, cwriter):
        count(count_file)
        try:
            sreader, swriter = await asyncio.open_connection(thost, tport)
        except OSError as e:
            print(f"delayproxy: cannot reach {thost}:{tport}: {e}", file=sys.stderr)
            cwriter.close()
            return
        await asyncio.gather(
            pump(creader, swriter, delay), pump(sreader, cwriter, delay)
        )
        for w in (cwriter, swriter):
            w.close()

    return await asyncio.start_server(handle, listen[0], listen[1])


def hostport(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt-ms", type=float, required=True)
    ap.add_argument("--count-file", help="keep the number of accepted connections in this file")
    ap.add_argument("mappings", nargs="+", help="LISTEN_HOST:PORT=TARGET_HOST:PORT")
    args = ap.parse_args()
    delay = args.rtt_ms / 2000.0
    servers = []
    if args.count_file:
        with open(args.count_file, "w") as f:
            f.write("0\n")
    for m in args.mappings:
        listen, _, target = m.partition("=")
        servers.append(await serve(hostport(listen), hostport(target), delay, args.count_file))
    print("delayproxy: ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
