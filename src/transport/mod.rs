//! How kwinctl reaches a host: one [`Session`] per host per command, one
//! remote call per script.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::inventory::{Connection, Host};

mod auth;
mod jump;
pub mod kerberos;
pub mod known_hosts;
pub mod presented;
pub mod resolve;
pub mod revoked;
pub mod route;
pub mod ssh;
pub mod sshconf;
pub mod trace;
pub mod winrm;

pub use resolve::resolve;
pub use route::{Route, Routes};
pub use sshconf::ConfigSource;
pub use trace::Trace;

/// What runs the scripts a host is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpreter {
    /// POSIX sh, reading the script from stdin.
    Sh,
    /// Windows PowerShell, reading the script from stdin behind
    /// [`BOOTSTRAP`].
    PowerShell,
}

/// Reads the whole script from stdin and runs it as one script block.
/// Scripts do not travel in `-EncodedCommand`: WinRS runs commands through
/// `cmd.exe`, whose 8191-character line limit our scripts exceed. Stdin and
/// stdout are UTF-8 (without a byte order mark) on every transport: WinRM
/// sets the code page itself (winrm-rs creates its shells with
/// `WINRS_CODEPAGE=65001`), OpenSSH does not, and the console's OEM code
/// page would garble adapter names and values outside ASCII in and out.
pub const BOOTSTRAP: &str = "$ErrorActionPreference = 'Stop'; $kwUtf8 = New-Object System.Text.UTF8Encoding $false; [Console]::InputEncoding = $kwUtf8; [Console]::OutputEncoding = $kwUtf8; $kwScript = [Console]::In.ReadToEnd(); & ([scriptblock]::Create($kwScript)); exit $LASTEXITCODE";

/// The bootstrap as `-EncodedCommand` wants it (base64 of UTF-16LE).
pub fn encoded_bootstrap() -> String {
    winrm_rs::encode_powershell_command(BOOTSTRAP)
}

/// What a script printed and how it ended.
#[derive(Debug, Clone, Default)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    /// `None` when the remote side gave no exit status (killed by a signal,
    /// connection lost).
    pub exit: Option<u32>,
    /// How many bytes of stdout or stderr were dropped past [`MAX_OUTPUT`]
    /// (over SSH kwinctl then stops reading and closes the channel, so a
    /// host whose output never ends does not hold the run; over WinRM the
    /// rest is read and thrown away).
    pub dropped: usize,
}

/// The most a script's stdout or stderr may print: a runaway or hostile host
/// cannot exhaust the operator's memory.
pub const MAX_OUTPUT: usize = 16 << 20;

#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    #[error("cannot connect to {addr}: {msg}")]
    Connect { addr: String, msg: String },
    /// The listener's TLS certificate was refused: not transient, so not
    /// retried (as a host key mismatch is not).
    #[error("cannot connect to {addr}: {msg}")]
    Certificate { addr: String, msg: String },
    #[error(
        "HOST KEY MISMATCH for {host}: the server presented {seen}, but {file} line {line} expects {expected}. \
         If the host was reinstalled, remove the old entry (ssh-keygen -R {host} -f {file}) and reconnect; \
         otherwise someone may be intercepting the connection"
    )]
    HostKeyMismatch {
        host: String,
        seen: String,
        expected: String,
        file: String,
        line: usize,
    },
    #[error(
        "unknown host key for {host} ({seen}): not in {file}. Verify the fingerprint, then add it \
         ({scan}) or rerun with --accept-new-host-keys to trust it on first use"
    )]
    UnknownHostKey {
        host: String,
        seen: String,
        file: String,
        /// The command that records it.
        scan: String,
    },
    #[error("host key of {host} refused: {msg}")]
    HostCert { host: String, msg: String },
    /// A jump host in front of the host failed.
    #[error("bastion {jump}: {error}")]
    Jump {
        jump: String,
        error: Box<TransportError>,
    },
    #[error(
        "sudo on {host} needs a password for {user}: kwinctl runs `sudo -n /bin/sh -s` and never types one. \
         Allow {user} passwordless sudo for /bin/sh (e.g. `{user} ALL=(root) NOPASSWD: /bin/sh` in /etc/sudoers.d/kwinctl), \
         or connect as root (ssh.user: root)"
    )]
    SudoPassword { host: String, user: String },
    #[error("authentication failed for {user}@{host}: {msg}")]
    Auth {
        user: String,
        host: String,
        msg: String,
    },
    #[error("connection to {host} lost: {msg}")]
    Lost { host: String, msg: String },
    #[error("{0}")]
    Setup(String),
}

impl TransportError {
    /// Whether trying again might help. Host-key and authentication failures
    /// never are.
    pub fn retriable(&self) -> bool {
        match self {
            TransportError::Connect { .. } => true,
            TransportError::Jump { error, .. } => error.retriable(),
            _ => false,
        }
    }
}

/// A connection to one host.
pub trait Session: Send {
    /// Run one script; stdout, stderr and the exit status come back.
    fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>>;
    /// Close politely.
    fn close(self: Box<Self>) -> BoxFuture<'static, ()>;
    /// Say that the next call is the last this run makes on the session
    /// (`verify`, `plan`: the probe only), so that no channel is opened
    /// ahead of a call that will not come. A call after it still works: it
    /// opens its own channel, one round trip later.
    fn last_call_next(&mut self) {}
    /// Where the connection's protocol steps are marked, if it keeps them.
    fn trace(&self) -> Option<&Trace> {
        None
    }
    /// A second session on the same connection (its own channel), for work
    /// beside this session's calls: the cluster lock's renewal. Closing it
    /// leaves the connection open. `None` when the transport has none.
    fn side(&self) -> Option<Box<dyn Session>> {
        None
    }
    /// How [`Session::stream`] carries bytes to the host, `None` when the
    /// transport cannot stream (a file then cannot be pushed over it).
    fn stream_mode(&self) -> Option<StreamMode> {
        None
    }
    /// Run `script`, a short one in the session's interpreter that travels
    /// in the command line itself, with `input`'s pieces written to its
    /// stdin one after the other as they come (each waits for the channel:
    /// what is held is one piece, whatever the whole's size), then end of
    /// file. The file transfer's channel (`src/transfer/`).
    fn stream<'a>(
        &'a mut self,
        script: &'a str,
        input: StreamInput<'a>,
    ) -> BoxFuture<'a, Result<Output, TransportError>> {
        let _ = (script, input);
        Box::pin(async {
            Err(TransportError::Setup(
                "this transport cannot stream a file to the host".into(),
            ))
        })
    }
}

/// What [`Session::stream`] writes to the remote stdin, piece by piece.
pub type StreamInput<'a> = futures::stream::BoxStream<'a, std::io::Result<Vec<u8>>>;

/// How a transport's stream carries bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamMode {
    /// The bytes as they are on an SSH channel (8-bit clean: RFC 4254 5.2),
    /// in pieces that keep its window full.
    Raw,
    /// The bytes as they are on WinRS stdin, each piece in one Send request
    /// (where they travel in base64, [MS-WSMV] 3.1.4.1.31.1), so each piece
    /// fits the host's envelope (docs/research/push.md).
    Sends,
}

/// The PowerShell command line that runs `script` with stdin left to the
/// script (no bootstrap): `-EncodedCommand`, base64 of UTF-16LE.
pub fn powershell_command_line(script: &str) -> String {
    format!(
        "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -EncodedCommand {}",
        winrm_rs::encode_powershell_command(script)
    )
}

/// Settings shared by every connection of one command.
#[derive(Clone)]
pub struct ConnectOptions {
    pub connect_timeout: Duration,
    pub accept_new_host_keys: bool,
    /// How each host is reached, resolved before the run.
    pub routes: std::sync::Arc<Routes>,
    pub key_cache: auth::KeyCache,
    /// The known_hosts files as read in this run (read again when changed).
    pub known_hosts: known_hosts::Cache,
    /// One connection per jump host, shared by every host behind it.
    pub(crate) jumps: jump::Pool,
}

impl ConnectOptions {
    pub fn new(
        connect_timeout: Duration,
        accept_new_host_keys: bool,
        routes: Routes,
    ) -> ConnectOptions {
        ConnectOptions {
            connect_timeout,
            accept_new_host_keys,
            routes: std::sync::Arc::new(routes),
            key_cache: auth::KeyCache::default(),
            known_hosts: known_hosts::Cache::default(),
            jumps: jump::Pool::default(),
        }
    }
}

/// Open a session to a host over its configured transport; scripts will run
/// under `interpreter`.
pub async fn connect(
    host: &Host,
    interpreter: Interpreter,
    opts: &ConnectOptions,
) -> Result<Box<dyn Session>, TransportError> {
    connect_traced(host, interpreter, opts, &Trace::new()).await
}

/// [`connect`], marking each protocol step in `trace`.
pub async fn connect_traced(
    host: &Host,
    interpreter: Interpreter,
    opts: &ConnectOptions,
    trace: &Trace,
) -> Result<Box<dyn Session>, TransportError> {
    match &host.connection {
        Connection::Ssh(s) => {
            let Some(Route::Ssh(ep)) = opts.routes.get(&host.name) else {
                return Err(TransportError::Setup(format!(
                    "internal: no SSH route was resolved for {}",
                    host.name
                )));
            };
            Ok(Box::new(
                ssh::SshSession::connect(host, s, ep.clone(), interpreter, opts, trace).await?,
            ))
        }
        Connection::WinRm(w) => {
            let via = match opts.routes.get(&host.name) {
                Some(Route::WinRm { via, .. }) => via.clone(),
                _ => None,
            };
            Ok(Box::new(
                winrm::WinRmSession::connect(host, w, via, opts, trace).await?,
            ))
        }
    }
}

#[cfg(test)]
mod bootstrap_tests {
    use super::*;

    /// The bootstrap, as both transports send it, makes stdin and stdout
    /// UTF-8 before it reads the script (docs/research/windows-transparent.md#defect-23: OpenSSH set
    /// no code page), and stays far below cmd.exe's 8191 characters.
    #[test]
    fn the_bootstrap_reads_and_writes_utf8_on_every_transport() {
        let read = BOOTSTRAP.find("[Console]::In.ReadToEnd()").unwrap();
        for set in [
            "[Console]::InputEncoding = $kwUtf8",
            "[Console]::OutputEncoding = $kwUtf8",
        ] {
            let at = BOOTSTRAP.find(set).unwrap_or_else(|| panic!("{set}"));
            assert!(at < read, "{set} after the script is read");
        }
        assert!(BOOTSTRAP.contains("New-Object System.Text.UTF8Encoding $false"));
        use base64::Engine;
        let utf16 = base64::engine::general_purpose::STANDARD
            .decode(encoded_bootstrap())
            .unwrap();
        let text = String::from_utf16(
            &utf16
                .chunks(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(text, BOOTSTRAP);
        assert!(encoded_bootstrap().len() < 2000);
    }
}
