"""The simulated Windows OpenSSH session (sshsession.py): the command lines
sshd, cmd.exe and PowerShell build and parse, their limits, and what is
refused. The exec command kwinctl sends is rebuilt here from its parts
(src/transport/ssh.rs remote_command, src/transport/mod.rs BOOTSTRAP); the
lab test lab_winssh checks the real one end to end."""

import base64
import io
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from winsim import host, sshsession
from winsim.k8sbin import split_command_line
from winsim.sshsession import CMD, POWERSHELL, PWSH, Refused, script_for

WINSIM_PY = Path(__file__).resolve().parent.parent / "winsim.py"
BOOTSTRAP = ("$ErrorActionPreference = 'Stop'; $kwScript = [Console]::In.ReadToEnd(); "
             "& ([scriptblock]::Create($kwScript)); exit $LASTEXITCODE")


def enc(text):
    return base64.b64encode(text.encode("utf-16-le")).decode()


def kwinctl_command(encoded=None):
    return ("powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -EncodedCommand "
            + (encoded or enc(BOOTSTRAP)))


def stdin(data=b"# kwinctl-sim: {}\n"):
    return lambda: data


@pytest.mark.parametrize("shell", ["cmd", "powershell", "pwsh"])
def test_the_bootstrap_reads_its_script_from_stdin_under_either_default_shell(shell):
    script, seen = script_for(shell, kwinctl_command(), stdin("héllo\n".encode()))
    assert script == "héllo\n"
    assert seen["script_from"] == "stdin"
    assert seen["powershell_args"] == ["-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass",
                                       "-EncodedCommand", enc(BOOTSTRAP)]


def test_the_shells_command_lines_are_win32_openssh_s():
    _, seen = script_for("cmd", kwinctl_command(), stdin())
    assert seen["shell_line"] == '"%s" /c "%s"' % (CMD, kwinctl_command())
    _, seen = script_for("powershell", kwinctl_command(), stdin())
    assert seen["shell_line"] == '"%s" -c "%s"' % (POWERSHELL, kwinctl_command())
    # and PowerShell reads its -c argument back whole
    assert split_command_line(seen["shell_line"])[1:] == ["-c", kwinctl_command()]
    # PowerShell 7: an "other" shell to sshd (no "powershell" in its path,
    # case-sensitively), whose arguments it escapes by default: the same form
    _, seen = script_for("pwsh", kwinctl_command(), stdin())
    assert seen["shell_line"] == '"%s" -c "%s"' % (PWSH, kwinctl_command())
    assert split_command_line(seen["shell_line"]) == [PWSH, "-c", kwinctl_command()]


@pytest.mark.parametrize("path,kind", [
    (CMD, "cmd"), (POWERSHELL, "powershell"), (PWSH, "other"),
    (r"C:\Windows\System32\CMD.EXE", "other"),
    (r"C:\Program Files\Git\bin\bash.exe", "bash"),
])
def test_the_shell_type_is_sshds_case_sensitive_reading_of_the_path(path, kind):
    assert sshsession.shell_type(path) == kind


def test_an_encoded_command_that_is_not_the_bootstrap_is_the_script():
    read = []
    script, seen = script_for("cmd", kwinctl_command(enc("Write-Output 1")), lambda: read.append(1) or b"")
    assert (script, seen["script_from"], read) == ("Write-Output 1", "-EncodedCommand", [])


@pytest.mark.parametrize("args", [
    "-nop -noni -ep bypass -enc {b}",
    "-NoProfil -NonInter -ex RemoteSigned -ec {b}",
    "/NoProfile /EncodedCommand {b}",
    "-e {b}",
])
def test_switch_prefixes_powershell_accepts(args):
    script, _ = script_for("cmd", "powershell.exe " + args.format(b=enc(BOOTSTRAP)), stdin(b"x"))
    assert script == "x"


@pytest.mark.parametrize("args, what", [
    ("-NoProfile -Foo -EncodedCommand {b}", "'-Foo' is unknown"),
    ("-n -EncodedCommand {b}", "'-n' is unknown"),  # shorter than -nop / -noni / -nol
    ("-ExecutionPolicy Sometimes -EncodedCommand {b}", "Invalid ExecutionPolicy value Sometimes"),
    ("-NoProfile -EncodedCommand", "Missing EncodedCommand parameter argument"),
    ("-NoProfile -Command Get-Date", "'-Command' is unknown"),
    ("-NoProfile", "without -EncodedCommand"),
    ("-EncodedCommand not*base64", "not properly encoded"),
    ("-EncodedCommand QQ==", "not properly encoded"),  # one byte: not UTF-16
])
def test_what_powershell_would_not_accept_is_refused(args, what):
    with pytest.raises(Refused) as e:
        script_for("cmd", "powershell.exe " + args.format(b=enc(BOOTSTRAP)), stdin())
    assert what in str(e.value)
    if "-" in args.split()[0]:
        assert "0xFFFD0000" in str(e.value)


@pytest.mark.parametrize("shell", ["cmd", "powershell", "pwsh"])
def test_another_program_is_not_recognized(shell):
    with pytest.raises(Refused) as e:
        script_for(shell, "/bin/sh -s", stdin())
    assert "'/bin/sh' is not recognized" in str(e.value)


@pytest.mark.parametrize("command", [
    kwinctl_command() + " & del C:\\x",
    kwinctl_command() + " > out.txt",
    "powershell.exe -EncodedCommand %FOO%",
    "powershell.exe -EncodedCommand ^A",
    'powershell.exe -EncodedCommand "%FOO%"',  # expanded inside quotes too
])
def test_cmd_operators_are_not_simulated(command):
    with pytest.raises(Refused) as e:
        script_for("cmd", command, stdin())
    assert "cmd.exe would interpret" in str(e.value)


@pytest.mark.parametrize("shell", ["cmd", "powershell"])
def test_a_line_break_in_the_command_is_not_simulated(shell):
    with pytest.raises(Refused) as e:
        script_for(shell, kwinctl_command() + "\nformat C:", stdin())
    assert "control character" in str(e.value)


def test_powershell_syntax_is_not_simulated():
    with pytest.raises(Refused) as e:
        script_for("powershell", kwinctl_command() + "; Remove-Item x", stdin())
    assert "not simulated" in str(e.value)


def padded(total, frame):
    """kwinctl's exec command with a longer -EncodedCommand (the bootstrap
    and padding), of `total - frame` characters: with a `frame`-character
    shell command line around it, `total`. Extra spaces between the
    arguments make up what base64's steps of 4 do not."""
    want = total - frame
    pad = 0
    while len(kwinctl_command(enc(BOOTSTRAP + " " * (pad + 1)))) <= want:
        pad += 1
    command = kwinctl_command(enc(BOOTSTRAP + " " * pad))
    command = command.replace(" -NoProfile", " " * (1 + want - len(command)) + "-NoProfile", 1)
    assert len(command) == want
    return command


def test_cmd_takes_8191_characters_and_no_more():
    frame = len('"%s" /c ""' % CMD)
    ok = padded(8191, frame)
    assert len('"%s" /c "%s"' % (CMD, ok)) == 8191
    assert script_for("cmd", ok, stdin(b"ran"))[0] == "ran"
    over = padded(8192, frame)
    with pytest.raises(Refused) as e:
        script_for("cmd", over, stdin())
    assert str(e.value) == "The command line is too long.\n"
    # PowerShell as the DefaultShell has no such limit: only CreateProcess's
    assert script_for("powershell", over, stdin(b"ran"))[0] == "ran"


def test_createprocess_takes_32767_characters_with_its_nul():
    frame = len('"%s" -c ""' % POWERSHELL)
    ok = padded(32766, frame)
    assert script_for("powershell", ok, stdin(b"ran"))[0] == "ran"
    with pytest.raises(Refused) as e:
        script_for("powershell", padded(32767, frame), stdin())
    assert "over the limit of 32767" in str(e.value)


def test_kwinctls_command_line_is_far_below_the_limits():
    _, seen = script_for("cmd", kwinctl_command(), stdin())
    assert len(seen["shell_line"]) < 2000 < sshsession.CMD_MAX


@pytest.mark.parametrize("arg", ["", "a b", 'say "hi"', "C:\\dir\\", 'back\\"slash', "tab\there", "\\\\"])
def test_quote_arg_reads_back_as_the_same_argument(arg):
    assert split_command_line("prog " + sshsession.quote_arg(arg)) == ["prog", arg]


def test_the_session_runs_the_script_with_execute_and_passes_everything_back(monkeypatch, tmp_path, capfdbinary):
    ran = []

    def fake_execute(script, state):
        ran.append((script, state))
        return "out ✓\n", "err\n", 3

    monkeypatch.setattr(host, "execute", fake_execute)
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", kwinctl_command())
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO("the script ✓\n".encode())))
    log = tmp_path / "ssh.log"
    args = types.SimpleNamespace(state=str(tmp_path / "state.json"), shell="cmd", log=str(log))
    assert sshsession.main(args) == 3
    assert ran == [("the script ✓\n", str(tmp_path / "state.json"))]
    out, err = capfdbinary.readouterr()
    assert (out.decode(), err.decode()) == ("out ✓\n", "err\n")
    entry = json.loads(log.read_text())
    assert entry["command"] == kwinctl_command()
    assert entry["shell_line"] == '"%s" /c "%s"' % (CMD, kwinctl_command())
    assert entry["outcome"] == "exit 3"


@pytest.mark.parametrize("shell,script_exit,exit", [
    ("cmd", 3, 3), ("cmd", 0, 0),
    ("powershell", 3, 1), ("powershell", 1, 1), ("powershell", 0, 0),
    ("pwsh", 3, 1), ("pwsh", 0, 0),
])
def test_powershell_as_the_default_shell_keeps_only_success_or_failure(
        monkeypatch, tmp_path, capfdbinary, shell, script_exit, exit):
    monkeypatch.setattr(host, "execute", lambda script, state: ("", "", script_exit))
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", kwinctl_command())
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(b"the script\n")))
    log = tmp_path / "ssh.log"
    args = types.SimpleNamespace(state=str(tmp_path / "state.json"), shell=shell, log=str(log))
    assert sshsession.main(args) == exit
    entry = json.loads(log.read_text())
    assert entry["outcome"] == "exit %d" % exit
    assert entry.get("script_exit", script_exit) == script_exit


def test_the_subcommand_refuses_a_bad_command_before_reading_stdin(tmp_path):
    env = {"SSH_ORIGINAL_COMMAND": "powershell.exe -EncodedCommand %%%", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, str(WINSIM_PY), "ssh-session", "--state", str(tmp_path / "s.json")],
                       env=env, input=b"", capture_output=True, timeout=60)
    assert r.returncode == 1
    assert b"cmd.exe would interpret" in r.stderr
    assert not (tmp_path / "s.json").exists()
