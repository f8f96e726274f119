#!/usr/bin/env python3
"""Check bench/delayproxy.py: one request/reply through it at RTT 100 ms
takes one round trip (>= 100 ms), at RTT 0 much less, and the bytes arrive
unchanged; --count-file counts the connection. Local only (127.0.0.1); run: python3 bench/delayproxy_check.py"""

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.CancelledError):
        pass
    writer.close()


async def one_rtt(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.monotonic()
    writer.write(b"ping\n")
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 5)
    took = time.monotonic() - start
    writer.close()
    assert line == b"ping\n", line
    return took


async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    eport = server.sockets[0].getsockname()[1]
    for rtt, low, high in ((100, 0.100, 0.400), (0, 0.0, 0.050)):
        pport = free_port()
        counted = os.path.join(tempfile.mkdtemp(), "count")
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "delayproxy.py"), "--rtt-ms", str(rtt),
             "--count-file", counted, f"127.0.0.1:{pport}=127.0.0.1:{eport}"],
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout.readline() == b"delayproxy: ready\n"
            took = await one_rtt(pport)
            print(f"rtt {rtt} ms: one request/reply took {took * 1000:.1f} ms")
            assert low <= took <= high, (rtt, took)
            # the count file says how many connections went through
            assert open(counted).read() == "1\n", open(counted).read()
        finally:
            proc.kill()
            proc.wait()
    server.close()
    print("delayproxy_check: ok")


asyncio.run(main())
