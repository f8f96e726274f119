"""The receiving side of a push (push.py): pieces appended as they come,
a resume from what the host holds, the hash checked before the rename, and
the memory the receiver holds bounded by one piece."""

import base64
import hashlib
import json
import os

from winsim import host, push


def _lines(data, piece):
    for i in range(0, len(data), piece):
        yield base64.b64encode(data[i:i + piece]) + b"\r\n"


def _log(state):
    with open(state + ".push/log.jsonl") as f:
        return [json.loads(line) for line in f]


def test_base64_lines_resume_where_the_host_stopped(tmp_path):
    state = str(tmp_path / "state.json")
    data = os.urandom(300_000)
    sha = hashlib.sha256(data).hexdigest()
    h = {"kind": "push_receive", "sha256": sha, "size": len(data), "offset": 0, "mode": "base64"}
    r = push.Receiver(state, h, "winrm")
    # the first run dies after two pieces and half a line
    lines = list(_lines(data, 46_080))
    for line in lines[:2]:
        r.feed(line[:1000])
        r.feed(line[1000:])
    r.feed(lines[2][:500])
    status = push.status(state, {"files": [{"sha256": sha, "size": len(data)}]})
    held = 2 * 46_080
    assert status == "KWP %s part %d %s\n" % (sha, held, hashlib.sha256(data[:held]).hexdigest())
    r2 = push.Receiver(state, dict(h, offset=held), "winrm")
    for line in _lines(data[held:], 46_080):
        r2.feed(line)
    assert r2.finish() == ("KWP %s ok\n" % sha, "", 0)
    with open(state + ".push/" + sha, "rb") as f:
        assert f.read() == data
    log = _log(state)
    offsets = [(e["offset"], e["length"]) for e in log]
    # every byte once, in order
    assert sum(n for _, n in offsets) == len(data)
    assert all(a + n == b for (a, n), (b, _) in zip(offsets, offsets[1:], strict=False))
    # one line and its piece at most
    assert max(e["held"] for e in log) < 3 * 46_080
    assert host.execute("# kwinctl-sim: " + json.dumps({"kind": "push_status", "files": [
        {"sha256": sha, "size": len(data)}]}) + "\n", state)[0] == "KWP %s done\n" % sha


def test_a_wrong_hash_drops_the_part(tmp_path):
    state = str(tmp_path / "state.json")
    sha = "0" * 64
    r = push.Receiver(state, {"kind": "push_receive", "sha256": sha, "size": 3, "offset": 0, "mode": "raw"}, "ssh")
    r.feed(b"abc")
    out, _, code = r.finish()
    assert code == 4 and out.startswith("KWP %s bad " % sha)
    assert not os.path.exists(state + ".push/" + sha + ".part")


def test_a_resume_past_what_the_host_holds_is_refused(tmp_path):
    state = str(tmp_path / "state.json")
    sha = "1" * 64
    r = push.Receiver(state, {"kind": "push_receive", "sha256": sha, "size": 9, "offset": 5, "mode": "raw"}, "ssh")
    r.feed(b"more")
    out, err, code = r.finish()
    assert code == 1 and "fewer than the 5 to resume from" in err


def test_remove_folder_empties_the_push_folder_but_keeps_winsims_log(tmp_path):
    state = str(tmp_path / "state.json")
    data = os.urandom(1000)
    sha = hashlib.sha256(data).hexdigest()
    h = {"kind": "push_receive", "sha256": sha, "size": len(data), "offset": 0, "mode": "raw"}
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


def test_a_line_that_is_not_base64_fails_as_frombase64string_does(tmp_path):
    state = str(tmp_path / "state.json")
    h = {"kind": "push_receive", "sha256": "2" * 64, "size": 6, "offset": 0, "mode": "base64"}
    r = push.Receiver(state, h, "winrm")
    r.feed(base64.b64encode(b"abc") + b"\r\n")
    r.feed(b"ab!\r\n")
    out, err, code = r.finish()
    assert code == 1 and err.startswith('Exception calling "FromBase64String"'), (out, err)
    # what came before the bad line was written, nothing after it
    assert _log(state)[0]["length"] == 3
