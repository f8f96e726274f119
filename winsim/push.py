"""Files pushed from the operator's machine (kwinctl's src/transfer/): the
host's receiving side. A push_receive script appends the bytes that come
on its stdin (over SSH and over WinRM alike) to `<sha256>.part`, then
hashes the whole and renames it `<sha256>` when the hash is right.
push_status answers what the host holds.

The files live in a folder beside the state file (`<state>.push/`); the
Windows path `C:\\ProgramData\\kwinctl\\push\\<sha256>` maps to
`<state>.push/<sha256>`. Every piece written is logged to
`<state>.push/log.jsonl` (its offset and length, and the most the receiver
held in memory at once): the lab checks from it that no byte was sent
twice and that the host's memory stayed bounded."""

import hashlib
import json
import os
import re
import resource
import time

from .state import ActionError, peek

HEADER = "# kwinctl-sim: "
WIN_DIR = "C:\\ProgramData\\kwinctl\\push"
SHA = re.compile(r"^[0-9a-f]{64}$")


# MaxEnvelopeSizekb of current Windows ([MS-WSMV] 2.2.4.10: "SHOULD be 500
# but MAY be 150"); the knob `max_envelope_kb` sets another
ENVELOPE_KB = 500


def envelope_kb(state_path):
    """The host's MaxEnvelopeSizekb (`Get-Item WSMan:\\localhost\\MaxEnvelopeSizekb`)."""
    d = peek(state_path) or {}
    return int(d.get("max_envelope_kb") or ENVELOPE_KB)


def folder(state_path):
    d = state_path + ".push"
    os.makedirs(d, exist_ok=True)
    return d


# `$input` or `${input}`, any case, not a longer name: PowerShell's
# automatic variable for a command's pipeline input
DOLLAR_INPUT = re.compile(r"\$(?:input\b|\{input\})", re.IGNORECASE)


def host_reads_stdin(script):
    """Whether powershell.exe's console host itself reads this command's
    stdin: it does, as text lines written to the command's pipeline input,
    exactly when the command uses `$input` (ConsoleHost, `AstSearcher.
    IsUsingDollarInput`; docs/research/push.md, "Raw bytes on a
    PowerShell's stdin"). The script's own reader then races the host's
    for the same pipe."""
    return DOLLAR_INPUT.search(script) is not None


def header_of(script):
    """The push header a script starts with, or None."""
    first = script.lstrip("\ufeff").split("\n", 1)[0]
    if not first.startswith(HEADER):
        return None
    try:
        h = json.loads(first[len(HEADER):])
    except ValueError:
        return None
    if h.get("kind") not in ("push_receive", "push_status"):
        return None
    return h


def local_path(state_path, win_path):
    """The simulator's file for a Windows path under the push folder."""
    prefix = WIN_DIR.lower() + "\\"
    if not win_path.lower().startswith(prefix):
        return None
    name = win_path[len(prefix):].lower()
    if not SHA.match(name):
        return None
    return os.path.join(folder(state_path), name)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def status(state_path, h):
    """push_status: `KWP <sha> done | part LEN SHA | none` per file."""
    d = folder(state_path)
    out = []
    for f in h.get("files", []):
        sha, size = f["sha256"].lower(), int(f["size"])
        if not SHA.match(sha):
            raise ActionError("winsim: bad sha256 %r" % sha)
        done, part = os.path.join(d, sha), os.path.join(d, sha + ".part")
        if os.path.isfile(done) and os.path.getsize(done) == size:
            out.append("KWP %s done\n" % sha)
        elif os.path.isfile(part):
            out.append("KWP %s part %d %s\n" % (sha, os.path.getsize(part), sha256_of(part)))
        else:
            out.append("KWP %s none\n" % sha)
    if h.get("envelope"):
        out.append("KWP-ENVELOPE %d\n" % envelope_kb(state_path))
    return "".join(out)


class Receiver:
    """One push_receive: what its stdin brings, appended as it comes. Holds
    one piece at a time. `script` is the receiving script: when the console
    host reads its stdin itself (host_reads_stdin), the host takes every
    byte as pipeline input and the script's raw reader sees none, as the
    host's reader here always wins the race: the part ends short."""

    def __init__(self, state_path, h, transport, script=""):
        self.sha = h["sha256"].lower()
        if not SHA.match(self.sha):
            raise ActionError("winsim: bad sha256 %r" % self.sha)
        self.size = int(h["size"])
        self.transport = transport
        self.taken_by_host = host_reads_stdin(script)
        d = folder(state_path)
        self.done = os.path.join(d, self.sha)
        self.part = self.done + ".part"
        self.log = os.path.join(d, "log.jsonl")
        offset = int(h["offset"])
        self.error = None
        with open(self.part, "ab"):
            pass
        if os.path.getsize(self.part) < offset:
            self.error = "%s holds %d bytes, fewer than the %d to resume from: run again" % (
                self.part, os.path.getsize(self.part), offset)
        else:
            os.truncate(self.part, offset)
        self.at = offset
        self.fh = open(self.part, "ab") if self.error is None else None
        self.logf = open(self.log, "a") if self.error is None else None
        # Test knob: past this many bytes of the part, each piece waits a
        # moment (a slow link), so that a test can stop the run midway.
        self.slow_from = (peek(state_path) or {}).get("push_slow_from")

    def _log(self, length, held, **more):
        self.logf.write(json.dumps(dict({"sha256": self.sha, "offset": self.at, "length": length,
                                         "held": held, "transport": self.transport}, **more)) + "\n")
        self.logf.flush()

    def feed(self, data):
        if self.error is not None or self.taken_by_host or not data:
            return
        if self.slow_from is not None and self.at >= int(self.slow_from):
            time.sleep(0.2)
        self.fh.write(data)
        self.fh.flush()
        self._log(len(data), len(data))
        self.at += len(data)

    def finish(self):
        """End of stdin: (stdout, stderr, exit code) as the script answers."""
        if self.fh:
            self.fh.close()
        if self.logf:
            # the receiving process's peak RSS (over SSH a process of its
            # own; over WinRM the whole server's, since it started)
            self._log(0, 0, rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            self.logf.close()
        if self.error is not None:
            return "", self.error + "\n", 1
        size = os.path.getsize(self.part)
        if size != self.size:
            return "KWP %s short %d\n" % (self.sha, size), "", 3
        got = sha256_of(self.part)
        if got != self.sha:
            os.remove(self.part)
            return "KWP %s bad %s\n" % (self.sha, got), "", 4
        os.replace(self.part, self.done)
        return "KWP %s ok\n" % self.sha, "", 0


def staged_content(state_path, win_path):
    """The bytes a placing action copies from the push folder (Copy-Item):
    the file must be there."""
    p = local_path(state_path, win_path)
    if p is None or not os.path.isfile(p):
        raise ActionError("Copy-Item : Cannot find path '%s' because it does not exist." % win_path)
    with open(p, "rb") as f:
        return f.read()


def held(state_path):
    """Whether the push folder holds anything (pushed copies, parts); the
    simulator's own log beside them does not count."""
    return any(n != "log.jsonl" for n in os.listdir(folder(state_path)))


def remove_all(state_path):
    """`Remove-Item -Recurse` of the push folder: every copy and part
    (the simulator's log stays)."""
    d = folder(state_path)
    for n in os.listdir(d):
        if n != "log.jsonl":
            os.remove(os.path.join(d, n))


def drop_staged(state_path, win_path):
    p = local_path(state_path, win_path)
    if p and os.path.isfile(p):
        os.remove(p)
