//! WinRM sessions with winrm-rs 2.x: HTTPS with certificate validation by
//! default (a CA file or a pinned SHA-256), NTLM with message encryption by
//! default, Basic only over HTTPS or when explicitly allowed. One shell per
//! host per command.
//!
//! Scripts go to PowerShell on stdin behind [`super::BOOTSTRAP`].

use futures::FutureExt;
use futures::future::BoxFuture;
use winrm_rs::{
    AuthMethod, EncryptionMode, Shell, WinrmClient, WinrmConfig, WinrmCredentials, WinrmError,
};

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::trace::Trace;
use super::{ConnectOptions, MAX_OUTPUT, Output, Session, TransportError, encoded_bootstrap};
use crate::inventory::{Host, WinRmAuth, WinRmSettings};

const POWERSHELL: &str = r"%SystemRoot%\System32\WindowsPowerShell\v1.0\powershell.exe";

/// powershell.exe's arguments for an `-EncodedCommand` (the script
/// bootstrap and a file transfer's receiving script alike).
fn powershell_args(encoded: &str) -> [&str; 6] {
    [
        "-NoProfile",
        "-NonInteractive",
        "-ExecutionPolicy",
        "Bypass",
        "-EncodedCommand",
        encoded,
    ]
}
/// Script bytes per WinRS Send request (well inside the default 150 KiB envelope).
const SEND_CHUNK: usize = 64 * 1024;

pub(crate) mod stream;

pub struct WinRmSession {
    host: String,
    shell: Option<Shell<'static>>,
    steps: Steps,
    /// The SOCKS5 tunnel through a bastion, while the session lasts.
    _tunnel: Option<super::jump::Tunnel>,
}

/// A WinRM host's trace: each SOAP request as winrm-rs sends it (its
/// `before_send_with` hook, which sees every attempt), and each call's
/// answer with the HTTP exchanges it waited for.
#[derive(Clone)]
struct Steps {
    trace: Trace,
    /// SOAP requests sent so far (the hook counts them).
    sent: Arc<AtomicU32>,
    /// Exchanges that open the connection, paid by the first request: TCP;
    /// TLS (1.3: one); Kerberos: [`super::kerberos::setup_exchanges`];
    /// NTLM sealed over HTTP: a Type 1 and an empty Type 3
    /// before the first sealed request (winrm-rs 2.0 transport.rs
    /// open_authenticated_conn: "a handshake on it that carries no body
    /// (NTLM: empty Type 3)"; the simulator logs a 401 and a 200 before the
    /// Create, all on one TCP connection). Basic sends its credentials with
    /// each request.
    setup: u32,
    /// Exchanges per SOAP request: one; NTLM over HTTPS two (winrm-rs
    /// send_ntlm_over_tls: "a handshake per request whose Type 3 carries
    /// the body").
    per_request: u32,
}

impl Steps {
    fn new(trace: &Trace, w: &WinRmSettings) -> Steps {
        Steps {
            trace: trace.clone(),
            sent: Arc::new(AtomicU32::new(0)),
            setup: 1
                + u32::from(w.tls)
                + 2 * u32::from(w.auth == WinRmAuth::Ntlm && !w.tls)
                + super::kerberos::setup_exchanges(w),
            per_request: 1 + u32::from(w.auth == WinRmAuth::Ntlm && w.tls),
        }
    }

    /// The hook winrm-rs calls before each request (it always lets it go).
    fn hook(&self) -> impl Fn(&winrm_rs::OutgoingRequest<'_>) -> bool + Send + Sync + 'static {
        let (trace, sent) = (self.trace.clone(), self.sent.clone());
        move |req| {
            sent.fetch_add(1, Ordering::Relaxed);
            let retry = match req.attempt() {
                0 => String::new(),
                n => format!("retry {n}"),
            };
            trace.mark(&format!("request {:?} sent", req.kind()), retry, 0);
            true
        }
    }

    fn count(&self) -> u32 {
        self.sent.load(Ordering::Relaxed)
    }

    /// A call that began when `before` requests had been sent has its
    /// answer: one exchange per request it sent, and the connection's
    /// setup when it sent the very first.
    fn answered(&self, what: &str, before: u32) {
        let now = self.count();
        let setup = if before == 0 && now > 0 {
            self.setup
        } else {
            0
        };
        let detail = if setup > 0 {
            format!("{setup} of them opening the connection")
        } else {
            String::new()
        };
        let waits = (now - before) * self.per_request + setup;
        self.trace.mark(&format!("{what} answered"), detail, waits);
    }
}

/// An error and all its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// A winrm-rs error with its causes. Its Http variant keeps its cause to
/// itself, so reqwest's chain is read directly.
fn text_of(e: &WinrmError) -> String {
    match e {
        WinrmError::Http(re) => format!("WinRM HTTP error: {}", chain(re)),
        _ => chain(e),
    }
}

/// winrm-rs's report of a 401 on a connection it had authenticated (the
/// server no longer holds the NTLM session for it). The request was not
/// resent by winrm-rs, as it cannot know whether it ran.
fn session_lost(e: &WinrmError) -> bool {
    matches!(e, WinrmError::Ntlm(_) | WinrmError::AuthFailed(_))
        && e.to_string().contains("on an authenticated connection")
}

/// Tries of a request that is safe to repeat when the session was lost: the
/// retry goes on a newly authenticated connection, so a second loss in a
/// row is the server's doing and is reported. (winrm-rs 2.0.1 could send a
/// handshake's last leg on another TCP connection, which called for more
/// tries; the vendored fix keeps it on one: docs/vendor.md.)
const SAFE_TRIES: usize = 2;

/// Run `op` (safe to repeat) again while winrm-rs reports a lost session,
/// [`SAFE_TRIES`] times at most.
async fn retry_lost<T, F, Fut>(mut op: F) -> Result<T, WinrmError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, WinrmError>>,
{
    let mut tries = 1;
    loop {
        match op().await {
            Err(e) if session_lost(&e) && tries < SAFE_TRIES => tries += 1,
            r => return r,
        }
    }
}

/// Whether winrm-rs's authentication error says the server answered the
/// NTLM negotiate (which carries no password) with a status other than the
/// 401 challenge: a server error, not a wrong password (winrm-rs 2.0.1
/// src/auth/ntlm.rs: "expected 401 for NTLM negotiate, got {status}").
fn refused_before_credentials(msg: &str) -> bool {
    msg.split_once("expected 401 for NTLM negotiate, got ")
        .is_some_and(|(_, got)| !got.starts_with("401"))
}

/// Turn a winrm-rs error into one that says what to fix.
fn explain(host: &Host, w: &WinRmSettings, e: &WinrmError) -> TransportError {
    let addr = format!("{}:{}", host.reach(), w.port);
    let text = text_of(e);
    if let WinrmError::Http(re) = e
        && re.is_timeout()
    {
        return TransportError::Connect {
            addr,
            msg: format!("no answer within the timeout: {text}"),
        };
    }
    if w.auth == WinRmAuth::Kerberos
        && let Some(k) = super::kerberos::explain(host, w, &text)
    {
        return k;
    }
    let lower = text.to_ascii_lowercase();
    // TLS first: winrm-rs reports a refused pin as an authentication error.
    match e {
        // The connection that carried the NTLM challenge was closed (the
        // vendored fix, docs/vendor.md): an NTLM matter, not a TLS one
        // (its words name the handshake), over HTTP as over HTTPS.
        WinrmError::AuthFailed(m) if m.contains("carried the NTLM challenge") => {
            TransportError::Setup(format!(
                "{}: the WinRM endpoint at {addr}: {text}: something between kwinctl and the \
                 listener (a proxy, a load balancer) closes connections, or the listener is not \
                 Windows's; connect to the listener itself, or use winrm.auth: kerberos",
                host.name
            ))
        }
        _ if lower.contains("certificate")
            || lower.contains("tls")
            || lower.contains("handshake") =>
        {
            // the certificate it presented, to pin (not through a bastion:
            // only the tunnel reaches the listener there)
            let mismatch = lower.contains("not valid for name");
            let seen = if w.tls && w.bastion.is_none() && !mismatch {
                let at = std::net::SocketAddr::new(host.reach().into(), w.port);
                super::presented::cert_sha256(at, std::time::Duration::from_secs(5))
            } else {
                None
            };
            let named = match super::kerberos::url_name(host, w) {
                (n, true) => format!("{n} (winrm.spn's name)"),
                (n, false) => format!("{n} (the host's address)"),
            };
            let msg = match seen {
                // a certificate the CA vouches for, of another name
                _ if mismatch => format!(
                    "TLS: {text}: the listener's certificate does not name {named}, the name kwinctl \
                     connects to: give the listener a certificate for that name, or set winrm.spn to \
                     HTTP/<a name the certificate carries> (Kerberos), or pin the certificate with \
                     winrm.cert_sha256"
                ),
                Some(fp) => format!(
                    "TLS: {text}: the listener presented a certificate with SHA-256 {fp}. If that is the \
                     certificate of the host's WinRM listener (compare it out of band), pin it: add `cert_sha256: \"{fp}\"` under winrm: of host {} (inventory line {}), \
                     or give its CA with winrm.ca_file",
                    host.name, host.pos.line
                ),
                None => format!(
                    "TLS: {text}: give the listener's CA with winrm.ca_file or pin its certificate with winrm.cert_sha256"
                ),
            };
            // a refused certificate stays refused; a handshake cut short
            // (a listener still starting) may not
            if lower.contains("certificate") {
                TransportError::Certificate { addr, msg }
            } else {
                TransportError::Connect { addr, msg }
            }
        }
        // The server answered the first NTLM step with something other
        // than its challenge (winrm-rs says "expected 401 for NTLM
        // negotiate, got 500 ..."): no password was tried yet.
        WinrmError::AuthFailed(m) if refused_before_credentials(m) => {
            TransportError::Setup(format!(
                "{}: the WinRM endpoint at {addr} answered the authentication's first step (before any \
             password was sent) with {text}: it is not a working WinRM listener, or something in \
             front of it (a proxy, a load balancer) answers instead; check the service on the host \
             (winrm enumerate winrm/config/listener) and winrm.port / winrm.tls",
                host.name
            ))
        }
        // A 401 to the NTLM negotiate without a challenge: the host does
        // not take NTLM at all (no password was sent yet).
        WinrmError::AuthFailed(m)
            if w.auth == WinRmAuth::Ntlm && m.contains("missing Negotiate prefix in challenge") =>
        {
            TransportError::Auth {
                user: w.user.clone(),
                host: host.name.clone(),
                msg: format!(
                    "{text}: the host answered NTLM's first message (before any password was sent) \
                     with no challenge: it refuses NTLM, as the domain policy \"Network security: \
                     Restrict NTLM: Incoming NTLM traffic\" does. Use winrm.auth: kerberos (see \
                     docs/windows-kerberos.md)"
                ),
            }
        }
        WinrmError::AuthFailed(_) | WinrmError::Ntlm(_) => TransportError::Auth {
            user: w.user.clone(),
            host: host.name.clone(),
            msg: format!(
                "{text}: check winrm.user and the password (winrm.password_env / password_file), and winrm.auth ({})",
                match w.auth {
                    WinRmAuth::Ntlm => "ntlm",
                    WinRmAuth::Basic => "basic",
                    WinRmAuth::Kerberos => "kerberos",
                }
            ),
        },
        _ if lower.contains("connection refused") || lower.contains("connect") => {
            TransportError::Connect {
                addr,
                msg: format!(
                    "{text}: is a WinRM listener running on port {} ({})? (winrm quickconfig; or set winrm.port / winrm.tls)",
                    w.port,
                    if w.tls { "HTTPS" } else { "HTTP" }
                ),
            }
        }
        _ => TransportError::Lost {
            host: host.name.clone(),
            msg: text,
        },
    }
}

impl WinRmSession {
    pub async fn connect(
        host: &Host,
        w: &WinRmSettings,
        via: Option<std::sync::Arc<super::route::Endpoint>>,
        opts: &ConnectOptions,
        trace: &Trace,
    ) -> Result<WinRmSession, TransportError> {
        let steps = Steps::new(trace, w);
        // Through a bastion: its shared SSH connection, and a local SOCKS5
        // proxy to this host's listener over it.
        // With winrm.spn (Kerberos), winrm-rs connects to that name, which
        // it names the service principal after, through a local proxy that
        // takes it to the address.
        let reach = host.reach().to_string();
        let (name, _) = super::kerberos::url_name(host, w);
        let through = match &via {
            Some(v) => Some(super::jump::Via::Ssh(opts.jumps.get(v, opts, trace).await?)),
            None if name != reach => Some(super::jump::Via::Direct),
            None => None,
        };
        let tunnel = match through {
            Some(t) => Some(super::jump::tunnel(t, name.clone(), reach, w.port).await?),
            None => None,
        };
        // Kerberos needs no password: a ticket, checked first
        let password = if w.auth == WinRmAuth::Kerberos {
            #[cfg(feature = "kerberos")]
            super::kerberos::preflight(host, w).await?;
            String::new()
        } else {
            let source = w.password.clone();
            tokio::task::spawn_blocking(move || source.read())
                .await
                .map_err(|e| {
                    TransportError::Setup(format!("reading the WinRM password failed: {e}"))
                })?
                .map_err(TransportError::Setup)?
        };
        let mut cfg = if w.tls {
            WinrmConfig::https()
        } else {
            WinrmConfig::http()
        };
        cfg.port = Some(w.port);
        if let Some(t) = &tunnel {
            cfg.proxy = Some(winrm_rs::SecretString::from(t.url.clone()));
        }
        cfg.connect_timeout_secs = opts.connect_timeout.as_secs().max(1);
        cfg.auth_method = match w.auth {
            WinRmAuth::Ntlm => AuthMethod::Ntlm,
            WinRmAuth::Basic => AuthMethod::Basic,
            // sealed over HTTP (EncryptionMode::Auto, the default), as
            // Windows requires; over HTTPS bound to the certificate
            #[cfg(feature = "kerberos")]
            WinRmAuth::Kerberos => AuthMethod::Kerberos,
            #[cfg(not(feature = "kerberos"))]
            WinRmAuth::Kerberos => {
                return Err(TransportError::Setup(
                    "winrm.auth kerberos is not built into this kwinctl (built without the \
                     `kerberos` feature): build it with the default features, or use ntlm over https"
                        .into(),
                ));
            }
        };
        if w.auth == WinRmAuth::Basic && !w.tls {
            // The inventory said allow_basic_over_http (validated at load).
            cfg.encryption = EncryptionMode::Never;
        }
        let mut b = WinrmClient::builder(cfg);
        if let Some(ca) = &w.ca_file {
            b = b.add_root_certificates_pem(ca.clone());
        }
        if let Some(pin) = &w.cert_sha256 {
            b = b.pin_server_certificate_sha256(pin);
        }
        let client = b
            .credentials(WinrmCredentials::new(w.user.clone(), password, ""))
            .before_send_with(steps.hook())
            .build()
            .map_err(|e| explain(host, w, &e))?;
        // winrm-rs's Shell borrows its client (`Shell<'a>`), and the session
        // holds the shell for the whole command, so the client must outlive
        // it: it is leaked, one small client per Windows host per command,
        // which a short-lived CLI can afford (an Arc cannot help: the
        // borrow, not ownership, is the constraint).
        let client: &'static WinrmClient = Box::leak(Box::new(client));
        let address = name;
        // Opening a shell is safe to repeat (at worst the server reaps an
        // unused shell).
        let before = steps.count();
        let shell = retry_lost(|| client.open_shell(&address))
            .await
            .map_err(|e| explain(host, w, &e))?;
        steps.answered("shell Create", before);
        Ok(WinRmSession {
            host: host.name.clone(),
            shell: Some(shell),
            steps,
            _tunnel: tunnel,
        })
    }

    async fn exec(&mut self, script: &str) -> Result<Output, TransportError> {
        let lost = |e: WinrmError| TransportError::Lost {
            host: self.host.clone(),
            msg: text_of(&e),
        };
        let shell = self.shell.as_ref().expect("open shell");
        let encoded = encoded_bootstrap();
        let args = powershell_args(&encoded);
        // Starting the command is safe to repeat: it only waits for the
        // script on stdin, and a stray one ends with the shell.
        let steps = &self.steps;
        let before = steps.count();
        let id = retry_lost(|| shell.start_command(POWERSHELL, &args))
            .await
            .map_err(lost)?;
        steps.answered("Command", before);
        let bytes = script.as_bytes();
        let before = steps.count();
        if bytes.is_empty() {
            shell.send_input(&id, b"", true).await.map_err(lost)?;
        }
        for (i, chunk) in bytes.chunks(SEND_CHUNK).enumerate() {
            let last = (i + 1) * SEND_CHUNK >= bytes.len();
            shell.send_input(&id, chunk, last).await.map_err(lost)?;
        }
        steps.answered("Send (stdin)", before);
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut dropped = 0;
        let exit = loop {
            let before = steps.count();
            let r = shell.receive_next(&id).await.map_err(lost)?;
            steps.answered("Receive", before);
            if stdout.len() < MAX_OUTPUT {
                stdout.extend_from_slice(&r.stdout);
            } else {
                dropped += r.stdout.len();
            }
            if stderr.len() < MAX_OUTPUT {
                stderr.extend_from_slice(&r.stderr);
            }
            if r.done {
                break r.exit_code;
            }
        };
        Ok(Output {
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            exit: exit.and_then(|c| u32::try_from(c).ok()),
            dropped,
        })
    }
}

impl Session for WinRmSession {
    fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.exec(script).boxed()
    }

    fn stream_mode(&self) -> Option<super::StreamMode> {
        Some(super::StreamMode::Base64Lines)
    }

    fn stream<'a>(
        &'a mut self,
        script: &'a str,
        input: super::StreamInput<'a>,
    ) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.stream_input(script, input).boxed()
    }

    fn close(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        async move {
            if let Some(s) = self.shell.take() {
                let before = self.steps.count();
                let _ = s.close().await;
                self.steps.answered("shell Delete", before);
            }
        }
        .boxed()
    }

    fn trace(&self) -> Option<&Trace> {
        Some(&self.steps.trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_error_before_any_password_is_not_called_a_bad_password() {
        let inv = crate::inventory::Inventory::parse(
            std::path::Path::new("i.yaml"),
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
             api_server: http://198.18.1.2:8080\n  kubernetes_version: \"1.16.15\"\n\
             hosts:\n  - name: w1\n    os: windows\n    address: 198.18.1.4\n    \
             winrm:\n      user: Administrator\n      password_env: KW_TEST_PW\n",
        )
        .unwrap();
        let h = &inv.hosts[0];
        let crate::inventory::Connection::WinRm(w) = &h.connection else {
            panic!("winrm host")
        };
        for status in ["500 Internal Server Error", "200 OK"] {
            let e =
                WinrmError::AuthFailed(format!("expected 401 for NTLM negotiate, got {status}"));
            let t = explain(h, w, &e);
            assert!(!matches!(t, TransportError::Auth { .. }), "{t}");
            let t = t.to_string();
            assert!(t.contains(status) && !t.contains("check winrm.user"), "{t}");
        }
        // a refused password is still one
        let e = WinrmError::AuthFailed("NTLM authentication rejected (401)".into());
        assert!(matches!(explain(h, w, &e), TransportError::Auth { .. }));
        // the challenge's connection closed (plain HTTP here): said as
        // such, never as TLS (issue 38)
        let e = WinrmError::AuthFailed(
            "the server closed the connection that carried the NTLM challenge; NTLM binds its \
             handshake to one connection, so it cannot be completed"
                .into(),
        );
        let t = explain(h, w, &e).to_string();
        assert!(!t.contains("TLS") && !t.contains("ca_file"), "{t}");
        assert!(t.contains("closes connections"), "{t}");
        // no challenge at all: the host refuses NTLM (Restrict NTLM)
        let e = WinrmError::AuthFailed("missing Negotiate prefix in challenge".into());
        let t = explain(h, w, &e).to_string();
        assert!(
            t.contains("it refuses NTLM") && t.contains("winrm.auth: kerberos"),
            "{t}"
        );
    }
}
