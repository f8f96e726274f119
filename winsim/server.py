"""The WinRM server: WS-Management / WinRS (Create, Command, Send, Receive,
Signal, Delete) over HTTP and HTTPS, NTLM and Kerberos with message
encryption (pyspnego, imported when a client uses it; Kerberos through
python-gssapi and the host's keytab, see auth.py) and Basic."""

import base64
import http.server
import os
import re
import socketserver
import ssl
import struct
import sys
import tempfile
import threading
import time
import uuid

from . import blip, push, util
from .auth import REFUSE_NTLM_HEADERS, accept_kerberos, knob, token_kind
from .boot import BootClock
from .host import execute
from .net import apply_firewall
from .state import ConnectionDropped, State
from .util import log

BOUNDARY = b"--Encrypted Boundary"


SPNEGO_PROTOCOL = "application/HTTP-SPNEGO-session-encrypted"


NS_SHELL = "http://schemas.microsoft.com/wbem/wsman/1/windows/shell"


ACTION_CREATE = "http://schemas.xmlsoap.org/ws/2004/09/transfer/Create"


ACTION_DELETE = "http://schemas.xmlsoap.org/ws/2004/09/transfer/Delete"


ACTION_COMMAND = NS_SHELL + "/Command"


ACTION_SEND = NS_SHELL + "/Send"


ACTION_RECEIVE = NS_SHELL + "/Receive"


ACTION_SIGNAL = NS_SHELL + "/Signal"


# What the service answers a request over its MaxEnvelopeSizekb: a
# WS-Management fault with the wsman:EncodingLimit subcode (DSP0226, the
# fault for a message over a size limit), unsealed (the request is not read).
SOAP_TYPE = "application/soap+xml;charset=UTF-8"
ENVELOPE_FAULT = (
    '<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" '
    'xmlns:w="http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd"><s:Body><s:Fault>'
    "<s:Code><s:Value>s:Sender</s:Value><s:Subcode><s:Value>w:EncodingLimit</s:Value></s:Subcode></s:Code>"
    '<s:Reason><s:Text xml:lang="en-US">The request is larger than the service\'s MaxEnvelopeSizekb.</s:Text>'
    "</s:Reason></s:Fault></s:Body></s:Envelope>"
)
SEND_STREAM = re.compile(r"<(?:\w+:)?Stream\b([^>]*)>")
STREAM_COMMAND = re.compile(r'CommandId="([^"]+)"')
STREAM_END = re.compile(r'End="true"')


def soap_action(xml):
    m = re.search(r"<(?:\w+:)?Action[^>]*>([^<]+)</(?:\w+:)?Action>", xml)
    return m.group(1).strip() if m else ""


def selector(xml, name):
    m = re.search(r'<(?:\w+:)?Selector Name="%s"[^>]*>([^<]+)<' % name, xml)
    return m.group(1) if m else None


def message_id(xml):
    m = re.search(r"<(?:\w+:)?MessageID[^>]*>([^<]+)<", xml)
    return m.group(1) if m else "uuid:" + str(uuid.uuid4())


def envelope(action, relates, body):
    return (
        '<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" '
        'xmlns:a="http://schemas.xmlsoap.org/ws/2004/08/addressing" '
        'xmlns:w="http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd" '
        'xmlns:rsp="%s"><s:Header><a:Action>%s</a:Action>'
        "<a:MessageID>uuid:%s</a:MessageID><a:RelatesTo>%s</a:RelatesTo>"
        "<a:To>http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous</a:To>"
        "</s:Header><s:Body>%s</s:Body></s:Envelope>" % (NS_SHELL, action, uuid.uuid4(), relates, body)
    )


class Shells:
    def __init__(self, state_path):
        self.state_path = state_path
        self.lock = threading.Lock()
        self.shells = {}  # shell id -> {command id -> command}

    def handle(self, xml):
        action = soap_action(xml)
        mid = message_id(xml)
        if action == ACTION_CREATE:
            sid = str(uuid.uuid4()).upper()
            with self.lock:
                self.shells[sid] = {}
            body = ("<rsp:Shell><rsp:ShellId>%s</rsp:ShellId><rsp:ResourceUri>%s/cmd</rsp:ResourceUri>"
                    "<rsp:State>Connected</rsp:State></rsp:Shell>" % (sid, NS_SHELL))
            body = '<x:ResourceCreated xmlns:x="http://schemas.xmlsoap.org/ws/2004/09/transfer">' \
                   '<a:Address>x</a:Address><a:ReferenceParameters><w:SelectorSet>' \
                   '<w:Selector Name="ShellId">%s</w:Selector></w:SelectorSet></a:ReferenceParameters>' \
                   '</x:ResourceCreated>%s' % (sid, body)
            return envelope(ACTION_CREATE + "Response", mid, body)
        sid = selector(xml, "ShellId")
        with self.lock:
            shell = self.shells.get(sid)
        if shell is None:
            raise LookupError("unknown shell %s" % sid)
        if action == ACTION_COMMAND:
            cid = str(uuid.uuid4()).upper()
            cmd = re.search(r"<(?:\w+:)?Command>([^<]*)<", xml)
            args = re.findall(r"<(?:\w+:)?Arguments>([^<]*)<", xml)
            shell[cid] = {"command": cmd.group(1) if cmd else "", "args": args, "stdin": b"", "done": False}
            script = self.script_of(shell[cid]) or ""
            receiving = push.header_of(script)
            if receiving is not None and receiving["kind"] == "push_receive":
                # a push: its stdin goes to the file as it comes (push.py)
                shell[cid]["receiver"] = push.Receiver(self.state_path, receiving, "winrm", script)
            return envelope(ACTION_COMMAND + "Response", mid,
                            "<rsp:CommandResponse><rsp:CommandId>%s</rsp:CommandId></rsp:CommandResponse>" % cid)
        if action == ACTION_SEND:
            # the Stream's start tag, then its text up to the next tag: the
            # text (a push's bytes) is scanned once
            m = SEND_STREAM.search(xml)
            cid = STREAM_COMMAND.search(m.group(1)) if m else None
            if not cid or cid.group(1).upper() not in shell:
                raise LookupError("send to an unknown command")
            end = STREAM_END.search(m.group(1)) is not None
            # (pybase64: SIMD base64, what a native host's decoding costs
            # rather than CPython's byte loop, 8 times slower; imported here,
            # as pyspnego is, so that `kinds` runs without the packages)
            import pybase64
            data = pybase64.b64decode(xml[m.end():xml.find("<", m.end())])
            c = shell[cid.group(1).upper()]
            if "receiver" in c:
                c["receiver"].feed(data)
                if end:
                    c["result"] = c["receiver"].finish()
            else:
                c["stdin"] += data
            c["eof"] = end
            return envelope(ACTION_SEND + "Response", mid, "<rsp:SendResponse/>")
        if action == ACTION_RECEIVE:
            m = re.search(r'<(?:\w+:)?DesiredStream[^>]*CommandId="([^"]+)"', xml)
            cid = m.group(1).upper() if m else None
            c = shell.get(cid)
            if c is None:
                raise LookupError("receive from an unknown command")
            stdout, stderr, code = self.run(c)
            body = "<rsp:ReceiveResponse>"
            for name, data in (("stdout", stdout), ("stderr", stderr)):
                if data:
                    body += '<rsp:Stream Name="%s" CommandId="%s">%s</rsp:Stream>' % (
                        name, cid, base64.b64encode(data.encode()).decode())
            body += ('<rsp:CommandState CommandId="%s" State="%s/CommandState/Done">'
                     "<rsp:ExitCode>%d</rsp:ExitCode></rsp:CommandState></rsp:ReceiveResponse>" % (cid, NS_SHELL, code))
            return envelope(ACTION_RECEIVE + "Response", mid, body)
        if action == ACTION_SIGNAL:
            return envelope(ACTION_SIGNAL + "Response", mid, "<rsp:SignalResponse/>")
        if action == ACTION_DELETE:
            with self.lock:
                self.shells.pop(sid, None)
            return envelope(ACTION_DELETE + "Response", mid, "")
        raise LookupError("unsupported action %s" % action)

    def run(self, c):
        if c.get("result") == "dropped":
            raise ConnectionDropped()
        if c.get("result"):
            return c["result"]
        script = self.script_of(c)
        if script is None:
            res = ("", "winsim: unknown command: only PowerShell scripts are simulated\n", 1)
        else:
            try:
                res = execute(script, self.state_path)
            except ConnectionDropped:
                c["result"] = "dropped"
                raise
        c["result"] = res
        return res

    @staticmethod
    def script_of(c):
        args = c["args"]
        if "powershell" not in c["command"].lower():
            return None
        if "-EncodedCommand" in args:
            enc = args[args.index("-EncodedCommand") + 1]
            text = base64.b64decode(enc).decode("utf-16-le")
            # kwinctl's bootstrap reads the real script from stdin.
            if "[Console]::In.ReadToEnd()" in text:
                return c["stdin"].decode("utf-8", "replace")
            return text
        return None


def nt_hash(password):
    from spnego._ntlm_raw.crypto import ntowfv1
    return ntowfv1(password).hex().upper()


def unwrap_body(ctx, body):
    start = body.index(b"application/octet-stream\r\n") + len(b"application/octet-stream\r\n")
    end = body.rindex(BOUNDARY + b"--")
    payload = body[start:end]
    hlen = struct.unpack("<I", payload[:4])[0]
    return ctx.unwrap_winrm(payload[4:4 + hlen], payload[4 + hlen:])


def wrap_body(ctx, plain):
    res = ctx.wrap_winrm(plain)
    body = (BOUNDARY + b"\r\n\tContent-Type: " + SPNEGO_PROTOCOL.encode() + b"\r\n"
            b"\tOriginalContent: type=application/soap+xml;charset=UTF-8;Length=" + str(len(plain)).encode() + b"\r\n"
            + BOUNDARY + b"\r\n\tContent-Type: application/octet-stream\r\n"
            + struct.pack("<I", len(res.header)) + res.header + res.data + BOUNDARY + b"--\r\n")
    ctype = 'multipart/encrypted;protocol="%s";boundary="Encrypted Boundary"' % SPNEGO_PROTOCOL
    return ctype, body


def make_handler(cfg, shells, tls):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: with Nagle's
        # algorithm the body waits for the client's delayed ACK of the
        # headers (40 ms on Linux) on every request, a stall the host
        # itself (HTTP.sys) does not have. Off, as socketserver allows.
        disable_nagle_algorithm = True
        ctx = None  # per connection: the NTLM or Kerberos context
        authed = False

        def log_message(self, fmt, *args):
            log("%s:%s %s" % (self.client_address[0], self.client_address[1], fmt % args))

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def setup(self):
            super().setup()
            self.opened = time.time()

        def do_POST(self):
            if blip.cut(cfg.state, self.opened):
                # the vSwitch blip (blip.py): this connection is gone
                log("vSwitch blip: resetting a connection from %s" % self.client_address[0])
                blip.reset(self.connection)
                self.close_connection = True
                return None
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length) if length else b""
            limit = push.envelope_kb(cfg.state) * 1024
            if length > limit:
                # [MS-WSMV] 2.2.4.10: MaxEnvelopeSizekb also limits the size
                # of the client's requests the service processes
                log("refused a request of %d bytes: over MaxEnvelopeSizekb (%d bytes)" % (length, limit))
                return self.reply(500, ENVELOPE_FAULT.encode(), [("Content-Type", SOAP_TYPE)])
            auth = self.headers.get("Authorization", "")
            ctype = self.headers.get("Content-Type", "")
            if os.environ.get("WINSIM_DEBUG"):
                kind = auth.split(" ", 1)[0]
                tok = base64.b64decode(auth.split(" ", 1)[1])[8:12].hex() if " " in auth else ""
                log("debug: auth=%s tok=%s ctype=%s len=%d authed=%s" % (kind, tok, ctype[:40], len(body), self.authed))
            answer_headers = []
            if auth.startswith("Negotiate ") or auth.startswith("NTLM "):
                token = base64.b64decode(auth.split(" ", 1)[1])
                kind = token_kind(token)
                if kind in ("kerberos", "spnego"):
                    try:
                        self.ctx, out = accept_kerberos(kind, token)
                    except Exception as e:  # no keys, wrong principal, skew, ...
                        # pyspnego may raise from its own clean-up: the
                        # library's error is the one it was handling
                        cause = e.__cause__ or e.__context__
                        log("kerberos: refused: %s: %s%s" % (type(e).__name__, e, " (%s)" % cause if cause else ""))
                        self.ctx, self.authed = None, False
                        return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                    log("kerberos: accepted %s" % (self.ctx.client_principal or "?"))
                    self.authed = True
                    # the AP-REP: mutual authentication, and the answer
                    # that completes the client's context
                    if out:
                        answer_headers = [("WWW-Authenticate", "Negotiate " + base64.b64encode(out).decode())]
                    if not body:
                        return self.reply(200, headers=answer_headers)
                elif knob(cfg.state, "refuse_ntlm"):
                    log("ntlm: refused: the host's policy denies incoming NTLM (Restrict NTLM)")
                    self.ctx, self.authed = None, False
                    return self.reply(401, headers=REFUSE_NTLM_HEADERS)
                else:
                    import spnego
                    if token[8:12] == b"\x01\x00\x00\x00":
                        self.ctx = spnego.server(protocol="ntlm")
                        self.authed = False
                    elif self.ctx is None or self.ctx.complete:
                        # Windows binds an NTLM handshake to its TCP
                        # connection (docs/research/winrm-ntlm.md#ntlm-conn): a
                        # Type 3 on a connection that carried no challenge
                        # is refused, as a wrong password is.
                        log("ntlm: refused: a Type 3 on a connection that carried no challenge")
                        self.ctx, self.authed = None, False
                        return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                    try:
                        out = self.ctx.step(token)
                    except Exception as e:  # wrong password, bad message
                        log("ntlm: refused: %s: %s" % (type(e).__name__, e))
                        self.ctx = None
                        return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                    if not self.ctx.complete:
                        challenge = "Negotiate " + base64.b64encode(out).decode()
                        return self.reply(401, headers=[("WWW-Authenticate", challenge)])
                    self.authed = True
                    if not body:
                        return self.reply(200)
            elif auth.startswith("Basic "):
                if not cfg.allow_basic:
                    return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                user, _, pw = base64.b64decode(auth[6:]).decode("utf-8", "replace").partition(":")
                if user.lower() != cfg.user.lower() or pw != cfg.password:
                    log("basic: refused")
                    return self.reply(401, headers=[("WWW-Authenticate", "Basic realm=\"WSMAN\"")])
                return self.serve(body.decode("utf-8", "replace"), sealed=False)
            if not self.authed:
                return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
            if ctype.startswith("multipart/encrypted"):
                try:
                    plain = unwrap_body(self.ctx, body)
                except Exception as e:
                    log("unseal failed: %s" % type(e).__name__)
                    return self.reply(400)
                xml = plain.decode("utf-8", "replace")
                # Test knob: answer the next N sealed requests that open a
                # shell or start a command (the ones kwinctl may repeat)
                # with 401, as a server that no longer holds the
                # connection's NTLM session.
                lose = int(knob(cfg.state, "lose_sessions", 0) or 0)
                if lose > 0 and soap_action(xml) in (ACTION_CREATE, ACTION_COMMAND):
                    with State(cfg.state) as d:
                        d["lose_sessions"] = max(0, int(d.get("lose_sessions", 0) or 0) - 1)
                    log("lose_sessions: answering 401 to a sealed %s" % soap_action(xml).rsplit("/", 1)[-1])
                    self.ctx, self.authed = None, False
                    return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                return self.serve(xml, sealed=True)
            # NTLM without sealing: only over HTTPS, or when allowed.
            if not (tls or cfg.allow_unencrypted):
                log("refused an unencrypted body over HTTP")
                return self.reply(500)
            return self.serve(body.decode("utf-8", "replace"), sealed=False, headers=answer_headers)

        def serve(self, xml, sealed, headers=()):
            try:
                answer = shells.handle(xml).encode()
                status = 200
            except ConnectionDropped:
                # no answer: the connection goes, as a TCP connection to an
                # address the host no longer has does
                self.close_connection = True
                return None
            except LookupError as e:
                answer = envelope("http://schemas.dmtf.org/wbem/wsman/1/wsman/fault", message_id(xml),
                                  "<s:Fault><s:Reason><s:Text>%s</s:Text></s:Reason></s:Fault>" % e).encode()
                status = 500
            if sealed:
                ctype, data = wrap_body(self.ctx, answer)
                return self.reply(status, data, [("Content-Type", ctype)])
            return self.reply(status, answer, [("Content-Type", "application/soap+xml;charset=UTF-8"), *headers])

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    state_path = None

    def verify_request(self, request, client_address):
        # during the vSwitch blip a new connection is reset at once (blip.py)
        if self.state_path and blip.cut(self.state_path, None):
            log("vSwitch blip: resetting a new connection from %s" % client_address[0])
            blip.reset(request)
            return False
        return True


class TlsServer(Server):
    """The HTTPS listener. As a Windows listener whose certificate is changed
    (`winrm set winrm/config/Listener?... @{CertificateThumbprint=...}`),
    a new connection gets the certificate the files hold now: the context
    is made again when the certificate or the key file changed."""

    def __init__(self, addr, handler, cert, key):
        super().__init__(addr, handler)
        self.cert, self.key = cert, key
        self.ctx, self.stamp = None, None
        self.ctx_lock = threading.Lock()

    def context(self):
        stamp = tuple(os.stat(f).st_mtime_ns for f in (self.cert, self.key))
        with self.ctx_lock:
            if stamp != self.stamp:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(self.cert, self.key)
                self.ctx, self.stamp = ctx, stamp
            return self.ctx

    def get_request(self):
        # The handshake runs in the connection's own thread (at its first
        # read), as HTTP.sys serves handshakes side by side: a client that
        # stalls in its handshake holds up no other connection.
        sock, addr = self.socket.accept()
        return self.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], ssl.SSLError):
            log("TLS handshake with %s failed: %s" % (client_address[0], sys.exc_info()[1]))
        else:
            super().handle_error(request, client_address)


def serve(cfg):
    util.LOG_FILE = cfg.log
    cfg.password = os.environ.get(cfg.password_env)
    if cfg.password is None:
        sys.exit("winsim: %s is not set" % cfg.password_env)
    # The NTLM acceptor's credential store holds the NT hash, not the password.
    store_dir = tempfile.mkdtemp(prefix="winsim-")
    store = os.path.join(store_dir, "ntlm")
    fd = os.open(store, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("%s:1000:%s:%s:[U]:LCT-0\n" % (cfg.user, "0" * 32, nt_hash(cfg.password)))
    os.environ["NTLM_USER_FILE"] = store
    shells = Shells(cfg.state)
    with State(cfg.state) as d:
        apply_firewall(d)
    servers = [Server((cfg.listen, cfg.http_port), make_handler(cfg, shells, False))]
    if cfg.https_port:
        s = TlsServer((cfg.listen, cfg.https_port), make_handler(cfg, shells, True), cfg.cert, cfg.key)
        s.context()  # a bad certificate fails the start, as before
        servers.append(s)
    for s in servers:
        s.state_path = cfg.state
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    # the running boot-task instances' loops (boot.py)
    BootClock(cfg.state).start()
    log("winsim listening on %s (http %s, https %s)" % (cfg.listen, cfg.http_port, cfg.https_port))
    servers[0].serve_forever()
