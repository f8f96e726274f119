"""The simulated host's authentication without a KDC: which protocol a
`Negotiate` token speaks, NTLM refused by the host's policy (the state
knob `refuse_ntlm`), and a Kerberos token refused when the host has no
keys for it. The server runs in this process on the loopback address."""

import base64
import http.client
import json
import threading
import types

import pytest

from winsim import auth, server

# An NTLM NEGOTIATE message (MS-NLMP 2.2.1.1): signature, type 1, flags.
NTLM_NEGOTIATE = b"NTLMSSP\x00\x01\x00\x00\x00" + bytes.fromhex("978208e2") + b"\x00" * 16


def initial_token(oid, body=b"\x01\x00rest"):
    """A GSS-API initial context token (RFC 2743 3.1) for `oid`."""
    inner = oid + body
    if len(inner) < 128:
        return b"\x60" + bytes([len(inner)]) + inner
    return b"\x60\x82" + len(inner).to_bytes(2, "big") + inner


def test_token_kinds():
    assert auth.token_kind(NTLM_NEGOTIATE) == "ntlm"
    assert auth.token_kind(initial_token(auth.KRB5_OID)) == "kerberos"
    # a long AP-REQ: the DER length in its long form
    assert auth.token_kind(initial_token(auth.KRB5_OID, b"\x01\x00" + b"x" * 600)) == "kerberos"
    assert auth.token_kind(initial_token(auth.SPNEGO_OID)) == "spnego"
    assert auth.token_kind(b"\xa1\x03\x02\x01\x00") == "spnego"
    for other in (b"", b"\x60", b"garbage", initial_token(bytes.fromhex("06032a0304"))):
        assert auth.token_kind(other) is None


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A WinRM listener of the simulator on 127.0.0.1 (no TLS), its state
    file, and a way to set a knob in it."""
    state = tmp_path / "state.json"
    state.write_text("{}")
    # no keys: as a host outside any domain
    monkeypatch.setenv("KRB5_KTNAME", "FILE:%s" % (tmp_path / "none.keytab"))
    # the NTLM acceptor's credential store, as `serve` writes it
    store = tmp_path / "ntlm"
    store.write_text("Administrator:1000:%s:%s:[U]:LCT-0\n" % ("0" * 32, server.nt_hash("pw")))
    monkeypatch.setenv("NTLM_USER_FILE", str(store))
    cfg = types.SimpleNamespace(state=str(state), allow_basic=False, allow_unencrypted=False,
                                user="Administrator", password="pw")
    srv = server.Server(("127.0.0.1", 0), server.make_handler(cfg, server.Shells(str(state)), False))
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    def knob(name, value):
        state.write_text(json.dumps({name: value}))

    yield srv.server_address[1], knob
    srv.shutdown()
    srv.server_close()


def post(port, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request("POST", "/wsman", body=b"", headers={
        "Authorization": "Negotiate " + base64.b64encode(token).decode(),
        "Content-Type": "application/soap+xml;charset=UTF-8",
    })
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, r.headers.get_all("WWW-Authenticate") or []


def test_ntlm_is_challenged_unless_the_host_refuses_it(host):
    port, knob = host
    status, offers = post(port, NTLM_NEGOTIATE)
    assert status == 401
    # the CHALLENGE message
    assert len(offers) == 1 and offers[0].startswith("Negotiate TlRMTVNTUAACAAAA"), offers
    knob("refuse_ntlm", True)
    status, offers = post(port, NTLM_NEGOTIATE)
    assert status == 401
    # no challenge: only the schemes the host still takes
    assert offers == ["Negotiate", "Kerberos"], offers


def test_a_request_over_the_hosts_envelope_is_refused(host):
    """MaxEnvelopeSizekb limits what a request may carry (the knob
    `max_envelope_kb`; 500 by default): a larger one gets an EncodingLimit
    fault, whatever it holds; one within it goes on to authentication."""
    port, knob = host

    def send(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        c.request("POST", "/wsman", body=b"x" * n, headers={
            "Authorization": "Negotiate " + base64.b64encode(NTLM_NEGOTIATE).decode(),
            "Content-Type": "application/soap+xml;charset=UTF-8",
        })
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    assert send(500 * 1024)[0] == 401
    status, body = send(500 * 1024 + 1)
    assert status == 500 and b"w:EncodingLimit" in body, body
    knob("max_envelope_kb", 32)
    assert send(32 * 1024)[0] == 401
    assert send(32 * 1024 + 1)[0] == 500


def test_a_kerberos_token_without_the_hosts_keys_is_refused(host):
    port, _ = host
    status, offers = post(port, initial_token(auth.KRB5_OID))
    assert status == 401 and offers == ["Negotiate"], offers


def test_replies_are_not_held_back_by_nagles_algorithm(tmp_path):
    """A reply's headers and body are two writes: with Nagle's algorithm
    on, the body waits for the client's delayed ACK (40 ms per request,
    what made a push over WinRM crawl); socketserver turns it off per
    connection when the handler says so."""
    cfg = types.SimpleNamespace(state=str(tmp_path / "state.json"), allow_basic=False,
                                allow_unencrypted=False, user="Administrator", password="pw")
    handler = server.make_handler(cfg, server.Shells(cfg.state), False)
    assert handler.disable_nagle_algorithm is True
