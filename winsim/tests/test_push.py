"""The receiving side of a push (push.py): pieces appended as they come,
a resume from what the host holds, the hash checked before the rename, and
the memory the receiver holds bounded by one piece."""

import hashlib
import json
import os

from winsim import host, push


def _log(state):
    with open(state + ".push/log.jsonl") as f:
        return [json.loads(line) for line in f]


def test_a_resume_starts_where_the_host_stopped(tmp_path):
    state = str(tmp_path / "state.json")
    data = os.urandom(300_000)
    sha = hashlib.sha256(data).hexdigest()
    h = {"kind": "push_receive", "sha256": sha, "size": len(data), "offset": 0}
    r = push.Receiver(state, h, "winrm")
    # the first run dies after two pieces (one Send request each)
    piece = 46_080
    for i in range(2):
        r.feed(data[i * piece:(i + 1) * piece])
    status = push.status(state, {"files": [{"sha256": sha, "size": len(data)}]})
    held = 2 * piece
    assert status == "KWP %s part %d %s\n" % (sha, held, hashlib.sha256(data[:held]).hexdigest())
    r2 = push.Receiver(state, dict(h, offset=held), "winrm")
    for i in range(held, len(data), piece):
        r2.feed(data[i:i + piece])
    assert r2.finish() == ("KWP %s ok\n" % sha, "", 0)
    with open(state + ".push/" + sha, "rb") as f:
        assert f.read() == data
    log = _log(state)
    offsets = [(e["offset"], e["length"]) for e in log]
    # every byte once, in order
    assert sum(n for _, n in offsets) == len(data)
    assert all(a + n == b for (a, n), (b, _) in zip(offsets, offsets[1:], strict=False))
    # one piece at most
    assert max(e["held"] for e in log) == piece
    assert host.execute("# kwinctl-sim: " + json.dumps({"kind": "push_status", "files": [
        {"sha256": sha, "size": len(data)}]}) + "\n", state)[0] == "KWP %s done\n" % sha


def test_a_wrong_hash_drops_the_part(tmp_path):
    state = str(tmp_path / "state.json")
    sha = "0" * 64
    r = push.Receiver(state, {"kind": "push_receive", "sha256": sha, "size": 3, "offset": 0}, "ssh")
    r.feed(b"abc")
    out, _, code = r.finish()
    assert code == 4 and out.startswith("KWP %s bad " % sha)
    assert not os.path.exists(state + ".push/" + sha + ".part")


def test_a_resume_past_what_the_host_holds_is_refused(tmp_path):
    state = str(tmp_path / "state.json")
    sha = "1" * 64
    r = push.Receiver(state, {"kind": "push_receive", "sha256": sha, "size": 9, "offset": 5}, "ssh")
    r.feed(b"more")
    out, err, code = r.finish()
    assert code == 1 and "fewer than the 5 to resume from" in err


def test_remove_folder_empties_the_push_folder_but_keeps_winsims_log(tmp_path):
    state = str(tmp_path / "state.json")
    data = os.urandom(1000)
    sha = hashlib.sha256(data).hexdigest()
    h = {"kind": "push_receive", "sha256": sha, "size": len(data), "offset": 0}
    r = push.Receiver(state, h, "ssh")
    r.feed(data[:400])
    assert push.held(state)
    from winsim.actions.common import act_remove_folder
    act_remove_folder({"files": {}, "file_versions": {}}, {"path": push.WIN_DIR, "_state_path": state})
    assert not push.held(state)
    assert os.listdir(state + ".push") == ["log.jsonl"]


def test_the_status_tells_the_envelope_when_asked(tmp_path):
    """Over WinRM the ask also reads MaxEnvelopeSizekb (500 by default, the
    knob `max_envelope_kb` sets another); over SSH it is not asked."""
    state = str(tmp_path / "state.json")
    files = [{"sha256": "1" * 64, "size": 3}]
    assert "KWP-ENVELOPE" not in push.status(state, {"files": files})
    assert push.status(state, {"files": files, "envelope": True}).endswith("KWP-ENVELOPE 500\n")
    with open(state, "w") as f:
        json.dump({"max_envelope_kb": 150}, f)
    assert push.status(state, {"files": files, "envelope": True}).endswith("KWP-ENVELOPE 150\n")


def test_peek_sees_every_write(tmp_path):
    """The state read without its lock is parsed again whenever the file
    changed, also when rewritten in place with the same size at once."""
    from winsim.state import peek
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"lose_sessions": 1}))
    assert peek(str(state)) == {"lose_sessions": 1}
    state.write_text(json.dumps({"lose_sessions": 2}))
    assert peek(str(state)) == {"lose_sessions": 2}
    os.utime(state, ns=(1, 1))  # settled: cached from now on
    assert peek(str(state)) == {"lose_sessions": 2}
    assert peek(str(state)) is peek(str(state))
    state.write_text(json.dumps({"lose_sessions": 3}))
    assert peek(str(state)) == {"lose_sessions": 3}
    os.remove(state)
    assert peek(str(state)) is None


def test_a_script_naming_input_loses_stdin_to_the_host(tmp_path):
    """powershell.exe's console host reads the command's stdin itself, as
    pipeline input, when the command uses $input: the script's raw reader
    then gets nothing and the part ends short."""
    assert push.host_reads_stdin("process { $b = $Input }")
    assert push.host_reads_stdin("${INPUT} | Out-Null")
    assert not push.host_reads_stdin("$in = [Console]::OpenStandardInput()")
    assert not push.host_reads_stdin("$inputFile = 1")
    state = str(tmp_path / "state.json")
    data = b"every byte \x00\x1a\r\n\xff"
    sha = hashlib.sha256(data).hexdigest()
    h = {"kind": "push_receive", "sha256": sha, "size": len(data), "offset": 0}
    r = push.Receiver(state, h, "winrm", "$x = $input\n")
    r.feed(data)
    assert r.finish() == ("KWP %s short 0\n" % sha, "", 3)
    r = push.Receiver(state, h, "winrm", "$in = [Console]::OpenStandardInput()\n")
    r.feed(data)
    assert r.finish() == ("KWP %s ok\n" % sha, "", 0)
