"""A simulated Windows OpenSSH session: what Win32-OpenSSH's sshd does with an
exec request on Windows Server, up to the PowerShell script it runs.

The lab's Windows hosts get a real OpenSSH server (lab/lab.sh `win-ssh`)
whose ForceCommand is `winsim.py ssh-session`: it takes the client's command
(SSH_ORIGINAL_COMMAND) and goes through the same steps as Windows
(docs/research/windows-ssh.md#ws4 to docs/research/windows-ssh.md#ws6):

1. sshd builds the shell's command line from the DefaultShell
   (w32-doexec.c do_exec_windows): cmd.exe (the default) gets
   `"C:\\Windows\\system32\\cmd.exe" /c "<command>"`, the command unescaped;
   powershell.exe (and pwsh.exe, an "other" shell to sshd whose arguments
   it escapes by default) gets argv [shell, "-c", command], quoted as a C
   runtime parses it back. CreateProcess takes at most 32767 characters, its
   terminating NUL included.
2. cmd.exe: at most 8191 characters; `/c "..."` loses its outer quotes when
   the quoted text is not one program; the first word is the program; its
   operators (& | < > ^ %) are refused here (not simulated). PowerShell as
   the DefaultShell: the command text must be one native command invocation
   of words without PowerShell's special characters (not simulated
   otherwise); PowerShell passes the words to the program.
3. powershell.exe parses its parameters (switch prefixes as
   CommandLineParameterParser's MatchSwitch; an unknown one, a missing
   value or an -EncodedCommand that is not base64 of UTF-16LE is refused
   as Windows PowerShell does, which exits 0xFFFD0000); the encoded command is
   the script, or, when it is kwinctl's stdin bootstrap, stdin is.
4. The script runs with `host.execute`, the function the WinRM server runs
   scripts with; stdout and stderr go back unchanged, and so does the exit
   code under cmd.exe; PowerShell (either) as the DefaultShell exits 0 or 1
   by whether powershell.exe succeeded
   (docs/research/windows-ssh.md#ws9).

Everything refused is said on stderr with a `winsim:` prefix (or what
cmd.exe itself prints) and a non-zero exit code. `--log FILE` appends one
JSON line per session: the command as sshd got it, the command lines each
process got, their lengths and the outcome.
"""

import base64
import binascii
import json
import os
import re
import sys

from . import push
from .k8sbin import split_command_line

CMD = r"C:\Windows\system32\cmd.exe"
POWERSHELL = r"C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe"
# PowerShell 7's default install path
PWSH = r"C:\Program Files\PowerShell\7\pwsh.exe"
SHELLS = {"cmd": CMD, "powershell": POWERSHELL, "pwsh": PWSH}
# CreateProcess: "The maximum length of this string is 32,767 characters,
# including the Unicode terminating null character."
CREATEPROCESS_MAX = 32767 - 1
# cmd.exe: "the maximum length of the string that you can use at the
# command prompt is 8191 characters"
CMD_MAX = 8191
# Windows PowerShell 5.1 exits 0xFFFD0000 on a bad command line
# (ConsoleHost.ExitCodeBadCommandLineParameter; PowerShell 7: 64). A Linux
# exit status has 8 bits: the simulator exits 1 and names the real code.
PS_BAD_PARAMETER = "(powershell.exe exits 0xFFFD0000)"
POLICIES = {"allsigned", "bypass", "default", "remotesigned", "restricted", "undefined", "unrestricted"}
# what kwinctl's bootstrap does (src/transport/mod.rs BOOTSTRAP): the same
# marker the WinRM server recognises (server.py Shells.script_of)
STDIN_MARK = "[Console]::In.ReadToEnd()"


class Refused(Exception):
    """Windows would not run the command: stderr text and exit code."""

    def __init__(self, msg, powershell=False):
        if powershell:
            msg = msg.rstrip("\n") + " " + PS_BAD_PARAMETER + "\n"
        super().__init__(msg)


def quote_arg(a):
    """One argument as the C runtime's parser (CommandLineToArgvW) reads it
    back: quoted when it holds a space or tab or is empty, backslashes
    doubled before a quote."""
    if a and not re.search(r'[ \t"]', a):
        return a
    out, bs = ['"'], 0
    for c in a:
        if c == "\\":
            bs += 1
            continue
        if c == '"':
            out.append("\\" * (2 * bs + 1) + '"')
        else:
            out.append("\\" * bs + c)
        bs = 0
    out.append("\\" * (2 * bs) + '"')
    return "".join(out)


def shell_type(path):
    """sshd's shell type from the DefaultShell's path (do_exec_windows:
    case-sensitive substrings, in this order)."""
    for part, kind in (("system32\\cmd", "cmd"), ("powershell", "powershell"), ("ssh-shellhost", "shellhost"),
                       ("\\bash", "bash"), ("cygwin", "cygwin")):
        if part in path:
            return kind
    return "other"


def shell_command_line(shell, command):
    """The command line Win32-OpenSSH's sshd starts for an exec request."""
    path = SHELLS[shell]
    kind = shell_type(path)
    if kind == "cmd":
        # cmd.exe (as ssh-shellhost, not simulated): no escaping, the
        # command in quotes
        line = '"%s" /c "%s"' % (path, command)
    elif kind in ("powershell", "other"):
        # argv [shell, "-c", command], the shell's path already quoted: for
        # PowerShell, and for an "other" shell such as pwsh.exe while
        # DefaultShellEscapeArguments is not 0 (its default)
        # (docs/research/windows-ssh.md#ws9)
        line = '"%s" -c %s' % (path, quote_arg(command))
    else:
        raise Refused("winsim: a DefaultShell of type %s is not simulated\n" % kind)
    check_createprocess(line)
    return line


def check_createprocess(line):
    if len(line) > CREATEPROCESS_MAX:
        raise Refused("winsim: CreateProcess: a command line of %d characters is over the limit of 32767 "
                      "(ERROR_FILENAME_EXCED_RANGE)\n" % len(line))


def program_of(word):
    """Which program a command's first word starts (powershell or None)."""
    name = word.strip('"').replace("/", "\\").rsplit("\\", 1)[-1].lower()
    return "powershell" if name in ("powershell", "powershell.exe") else None


def first_word(text):
    """The first word of a command text and the rest after it (a quoted
    first word keeps its quotes out)."""
    text = text.lstrip(" \t")
    if text.startswith('"'):
        end = text.find('"', 1)
        if end < 0:
            return text[1:], ""
        return text[1:end], text[end + 1:]
    m = re.match(r"[^ \t]*", text)
    return m.group(0), text[m.end():]


def via_cmd(line):
    """cmd.exe's part: its /c text, checked and split into the program and
    the program's own command line."""
    if len(line) > CMD_MAX:
        raise Refused("The command line is too long.\n")
    _, rest = first_word(line)
    rest = rest.lstrip(" \t")
    if not rest.lower().startswith("/c"):
        raise Refused("winsim: cmd.exe without /c is not simulated\n")
    text = rest[2:].lstrip(" \t")
    # `cmd /?`: with /C, quotes are kept only when the quoted text is one
    # program (exactly two quotes, no special characters, whitespace
    # inside, an executable's name); otherwise the first and the last
    # quote go.
    if text.startswith('"'):
        last = text.rfind('"')
        inner = text[1:last] if last > 0 else text[1:]
        one_program = (text.count('"') == 2 and re.search(r"[ \t]", inner) and not re.search(r"[&<>()@^|]", inner)
                       and program_of(inner) is not None)
        if not one_program:
            text = inner + (text[last + 1:] if last > 0 else "")
    # operators count outside quotes; %VAR% is expanded inside them too
    bad = re.findall(r'[&|<>^()]', re.sub(r'"[^"]*"', "", text)) + re.findall("%", text)
    if bad:
        raise Refused("winsim: cmd.exe would interpret %r in the command: not simulated\n" % "".join(sorted(set(bad))))
    word, args = first_word(text)
    if program_of(word) is None:
        raise Refused("'%s' is not recognized as an internal or external command,\n"
                      "operable program or batch file.\n" % word)
    # cmd.exe starts the program with its text as the command line
    check_createprocess(text)
    return split_command_line(args)


def via_powershell(line):
    """Windows PowerShell or PowerShell 7 as the DefaultShell: `-c <command>`
    runs the command text as PowerShell, here one native command invocation
    of plain words."""
    argv = split_command_line(line)
    if len(argv) < 3 or argv[1].lower() not in ("-c", "-command", "/c"):
        raise Refused("winsim: PowerShell as the DefaultShell without -c is not simulated\n")
    text = " ".join(argv[2:])
    if re.search(r"[;|&$`(){}@'\"<>,#\[\]]", text):
        raise Refused("winsim: PowerShell syntax beyond a plain native command is not simulated: %r\n" % text)
    words = text.split()
    if not words or program_of(words[0]) is None:
        raise Refused("%s : The term '%s' is not recognized as the name of a cmdlet, function, script file, "
                      "or operable program.\n" % ((words or [""])[0], (words or [""])[0]))
    # PowerShell starts the native command with its arguments quoted
    check_createprocess(" ".join(quote_arg(w) for w in words))
    return words[1:]


def switch(arg, name, shortest):
    """CommandLineParameterParser.MatchSwitch: `-` or `/`, then a prefix of
    the name at least as long as its shortest unambiguous form."""
    if not arg or arg[0] not in "-/":
        return False
    key = arg[1:].lower()
    return len(key) >= len(shortest) and name.startswith(key)


def parse_powershell(args):
    """powershell.exe's parameters -> the -EncodedCommand text."""
    encoded = None
    i = 0

    def value(i, what):
        if i + 1 >= len(args):
            raise Refused("Missing %s parameter argument.\n" % what, powershell=True)
        return args[i + 1]

    while i < len(args):
        a = args[i]

        if switch(a, "noprofile", "nop") or switch(a, "noninteractive", "noni") or switch(a, "nologo", "nol"):
            i += 1
        elif switch(a, "executionpolicy", "ex") or switch(a, "ep", "ep"):
            if value(i, "ExecutionPolicy").lower() not in POLICIES:
                raise Refused("Invalid ExecutionPolicy value %s.\n" % args[i + 1], powershell=True)
            i += 2
        elif switch(a, "encodedcommand", "e") or switch(a, "ec", "e"):
            encoded = value(i, "EncodedCommand")
            i += 2
        else:
            raise Refused("winsim: powershell.exe parameter %r is unknown or not simulated\n" % a, powershell=True)
    if encoded is None:
        raise Refused("winsim: powershell.exe without -EncodedCommand is not simulated\n", powershell=True)
    try:
        raw = base64.b64decode(encoded, validate=True)
        if len(raw) % 2:
            raise ValueError("an odd number of bytes")
        return raw.decode("utf-16-le")
    except (binascii.Error, ValueError) as e:
        raise Refused("Cannot process the command because the value specified with -EncodedCommand is not "
                      "properly encoded. The value must be Base64 encoded. (%s)\n" % e, powershell=True) from None


def script_for(shell, command, read_stdin):
    """The script a Windows host would run for this exec request, and the
    command lines on the way: (script, {"shell_line": ..., ...})."""
    seen = {"shell_line": None}
    if re.search(r"[\x00-\x1f]", command):
        # cmd.exe ends a command at a line break, PowerShell a statement;
        # neither takes other control characters as part of a word
        raise Refused("winsim: a control character (%r) in the command is not simulated\n"
                      % re.search(r"[\x00-\x1f]", command).group(0))
    line = shell_command_line(shell, command)
    seen["shell_line"] = line
    args = via_cmd(line) if shell == "cmd" else via_powershell(line)
    seen["powershell_args"] = args
    text = parse_powershell(args)
    if STDIN_MARK in text:
        seen["script_from"] = "stdin"
        return read_stdin().decode("utf-8", "replace"), seen
    seen["script_from"] = "-EncodedCommand"
    return text, seen


def _log(path, entry):
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


def main(a):
    """`winsim.py ssh-session --state FILE [--shell cmd|powershell|pwsh] [--log FILE]`:
    sshd's ForceCommand. Exits with the script's exit code."""
    from . import blip
    from .host import execute
    from .state import ConnectionDropped

    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    entry = {"command": command, "command_length": len(command or ""), "shell": a.shell}
    if command is None:
        _log(a.log, dict(entry, outcome="refused: an interactive shell"))
        sys.stderr.write("winsim: an interactive shell is not simulated: give a command\n")
        return 1
    try:
        script, seen = script_for(a.shell, command, sys.stdin.buffer.read)
    except Refused as e:
        _log(a.log, dict(entry, outcome="refused", message=str(e)))
        sys.stderr.write(str(e))
        sys.stderr.flush()
        return 1
    entry.update(seen, shell_line_length=len(seen["shell_line"]))
    receiving = push.header_of(script)
    try:
        opened = blip.process_start(os.getppid())
    except (OSError, ValueError, IndexError, StopIteration):
        opened = None
    if blip.cut(a.state, opened):
        # the vSwitch blip (blip.py): the session's connection is gone
        _log(a.log, dict(entry, outcome="connection dropped (vSwitch blip)"))
        os.kill(os.getppid(), 9)
        return 255
    try:
        if receiving is not None and receiving["kind"] == "push_receive":
            # a push: stdin goes to the file as it comes (push.py)
            r = push.Receiver(a.state, receiving, "ssh", script)
            # reads of the script's whole buffer (262144 bytes): one write
            # and one log line per buffer, not per SSH packet; the host
            # still holds one buffer at a time
            for piece in iter(lambda: sys.stdin.buffer.read(1 << 18), b""):
                r.feed(piece)
            out, err, code = r.finish()
        else:
            out, err, code = execute(script, a.state)
    except ConnectionDropped:
        # the node's address moved: the connection goes unanswered
        _log(a.log, dict(entry, outcome="connection dropped"))
        os.kill(os.getppid(), 9)
        return 255
    if a.shell in ("powershell", "pwsh"):
        # the DefaultShell's -Command keeps success or failure, not the code
        # (docs/research/windows-ssh.md#ws9)
        entry["script_exit"] = code
        code = 0 if code == 0 else 1
    _log(a.log, dict(entry, outcome="exit %d" % code))
    sys.stdout.buffer.write(out.encode("utf-8"))
    sys.stderr.buffer.write(err.encode("utf-8"))
    sys.stdout.flush()
    sys.stderr.flush()
    return code
