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

mod explain;
pub(crate) mod stream;

use explain::{explain, retry_lost, text_of};

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
        Some(super::StreamMode::Sends)
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
