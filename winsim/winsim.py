#!/usr/bin/env python3
"""A simulated Windows Server host for kwinctl's tests and lab.

It speaks the real WinRM protocol (WS-Management / WinRS over HTTP and HTTPS,
NTLM with message encryption via pyspnego, and Basic), so kwinctl's real WinRM
client (winrm-rs) talks to it as to Windows. It has no PowerShell: each
block of a script kwinctl sends starts with a header line
`# kwinctl-sim: {json}`, and the simulator carries out that header's Linux
equivalent inside its own network namespace:

  switch / transparent network -> Linux bridges (KubeProxySwitch, HNSTransparent)
  gateway address              -> the address on the HNSTransparent bridge
  persistent routes            -> real routes via eth0, remembered in the state
  RRAS                         -> IPv4 forwarding
  images, files, services      -> records in the state file
  l2bridge: the external vSwitch -> the bridge HNSVSwitch (the card enslaved,
                                  the node address on it); a host endpoint
                                  -> a veth pair on it; HNS networks,
                                  containerd's images -> records

Unknown headers are errors. `reboot` drops what a reboot drops (routes not
persistent, the HNS network when asked to) and restarts auto-start services.

Usage:
  winsim.py serve --listen IP --http-port 5985 [--https-port 5986 --cert C --key K]
                  --user NAME --password-env VAR --state FILE [--allow-basic]
                  [--allow-unencrypted] [--log FILE]
  winsim.py reboot --state FILE [--drop-hns]
  winsim.py detached-run --state FILE --token T          (a detached action's task: host.py)
  winsim.py ssh-session --state FILE [--shell cmd|powershell|pwsh] [--log FILE]
                                       (sshd's ForceCommand: runs SSH_ORIGINAL_COMMAND as Windows would)
  winsim.py gencert --cert C --key K --ca CA --cn NAME   (prints the server cert's SHA-256)
  winsim.py kinds                                        (the action kinds it handles, one a line)
"""

import argparse
import os
import sys

# Run as a file (`python3 winsim/winsim.py ...`): import the package
# `winsim` (this folder) from the folder above, not this file as `winsim`.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
    sys.path[0] = os.path.dirname(_HERE)
else:
    sys.path.insert(0, os.path.dirname(_HERE))

from winsim import certs, host, pods, server, sshsession  # noqa: E402  (after the path above)
from winsim.state import State  # noqa: E402


def _serve(p):
    p.add_argument("--listen", required=True)
    p.add_argument("--http-port", type=int, default=5985)
    p.add_argument("--https-port", type=int, default=0)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--user", default="Administrator")
    p.add_argument("--password-env", default="WINSIM_PASSWORD")
    p.add_argument("--state", required=True)
    p.add_argument("--allow-basic", action="store_true")
    p.add_argument("--allow-unencrypted", action="store_true")
    p.add_argument("--log")
    return server.serve


def _reboot(p):
    p.add_argument("--state", required=True)
    p.add_argument("--drop-hns", action="store_true")
    return lambda a: host.reboot(a.state, a.drop_hns)


def _detached_run(p):
    p.add_argument("--state", required=True)
    p.add_argument("--token", required=True)
    return lambda a: host.run_detached(a.state, a.token)


def _gencert(p):
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--cn", required=True)
    p.add_argument("--ca", required=True, help="where to write the CA certificate")
    return lambda a: certs.gencert(a.cert, a.key, a.cn, a.ca)


def _ssh_session(p):
    p.add_argument("--state", required=True)
    p.add_argument("--shell", choices=sorted(sshsession.SHELLS), default="cmd")
    p.add_argument("--log")
    return sshsession.main


def _kinds(p):
    return lambda a: print("\n".join(sorted(host.handlers())))


def _pod(name):
    def declare(p):
        pods.add_args(p, name)
        return lambda a: pods.cli(a, State)
    return declare


# The subcommands: name -> a function that declares its arguments on its
# parser and returns what runs it (called with the parsed arguments). A new
# subcommand is one entry here.
COMMANDS = {
    "serve": _serve,
    "reboot": _reboot,
    # the scheduled task a detached action runs in (host.py detach_start)
    "detached-run": _detached_run,
    "gencert": _gencert,
    "kinds": _kinds,
    # sshd's ForceCommand on a Windows host reached over SSH (sshsession.py)
    "ssh-session": _ssh_session,
    # a pod started / deleted on the host (winsim/README.md "Pods")
    "pod-start": _pod("pod-start"),
    "pod-delete": _pod("pod-delete"),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    runs = {name: declare(sub.add_parser(name)) for name, declare in COMMANDS.items()}
    a = p.parse_args(argv)
    return runs[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
