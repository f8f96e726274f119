//! SSH sessions with russh: the endpoint OpenSSH resolved (`route`), host
//! keys checked as OpenSSH checks them (`known_hosts`), keys offered in
//! OpenSSH's order (`auth`), jump hosts over `direct-tcpip` channels of one
//! shared connection each (`jump`), no external process.

use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use russh::ChannelMsg;
use russh::client::{self, Handle};

use super::known_hosts;
use super::route::Endpoint;
use super::trace::Trace;
use super::{ConnectOptions, Interpreter, MAX_OUTPUT, Output, Session, TransportError};
use crate::inventory::{Host, SshSettings};

pub use super::auth::PASSPHRASE_ENV;

/// A logged-in SSH connection.
pub type Conn = Handle<Checker>;

/// The read buffer in front of a host's TCP stream: the handshake's and a
/// probe's packets fit, with what follows them; a longer packet goes
/// through it in pieces.
const READ_BUFFER: usize = 16 << 10;

/// Open and log in to `ep`, through its jump hosts (whose connections are
/// shared through `opts`' pool); each step is marked in `trace`, its name
/// after `who` (empty for the host itself, `bastion NAME ` for a jump).
pub fn open<'a>(
    ep: &'a Arc<Endpoint>,
    opts: &'a ConnectOptions,
    trace: &'a Trace,
    who: &'a str,
) -> BoxFuture<'a, Result<Conn, TransportError>> {
    Box::pin(async move {
        let addr = format!("{}:{}", ep.host, ep.port);
        let connect_err = |msg: String| TransportError::Connect {
            addr: addr.clone(),
            msg,
        };
        let bound = ep
            .connect_timeout
            .map_or(opts.connect_timeout, |t| t.min(opts.connect_timeout));
        // the run's known_hosts cache: read once, looked up in memory
        let known = opts
            .known_hosts
            .snapshot(known_hosts::files(ep))
            .await?
            .lookup(&ep.known_hosts_name());
        let config = Arc::new(client::Config {
            nodelay: true,
            inactivity_timeout: None,
            preferred: cipher::order(known_hosts::preferred(&known, ep)),
            ..Default::default()
        });
        let verdict = Arc::new(Mutex::new(None));
        let checker = Checker {
            ep: ep.clone(),
            accept_new: opts.accept_new_host_keys,
            known_hosts: opts.known_hosts.clone(),
            verdict: verdict.clone(),
        };
        let handshake = |e: russh::Error| {
            verdict
                .lock()
                .unwrap()
                .take()
                .unwrap_or_else(|| connect_err(format!("SSH handshake failed: {e}")))
        };
        let connect = async {
            match &ep.via {
                None => {
                    // AddressFamily: only the addresses OpenSSH would try
                    let all = tokio::net::lookup_host((ep.host.as_str(), ep.port))
                        .await
                        .map_err(|e| connect_err(e.to_string()))?;
                    let addrs = ep.family.pick(all);
                    if addrs.is_empty() {
                        return Err(connect_err(format!(
                            "it has no {} address (ssh config AddressFamily {})",
                            ep.family.name(),
                            ep.family.name()
                        )));
                    }
                    let tcp = tokio::net::TcpStream::connect(&addrs[..])
                        .await
                        .map_err(|e| connect_err(e.to_string()))?;
                    let _ = tcp.set_nodelay(true);
                    // SYN, SYN-ACK: one exchange on a real link (through a
                    // local delay proxy it is local).
                    trace.mark(&format!("{who}tcp connected"), ep.host_port(), 1);
                    // russh reads each packet with two exact reads (its
                    // length, then the rest) straight from the stream it
                    // is given, each a recvfrom, often an EAGAIN first
                    // (docs/research/russh.md#rs-read). A read buffer takes
                    // what has arrived in one call; writes pass through.
                    let tcp = tokio::io::BufReader::with_capacity(READ_BUFFER, tcp);
                    client::connect_stream(config, tcp, checker)
                        .await
                        .map_err(handshake)
                }
                Some(v) => {
                    let jump = opts.jumps.get(v, opts, trace).await?;
                    let ch = jump
                        .channel_open_direct_tcpip(ep.host.as_str(), ep.port as u32, "127.0.0.1", 0)
                        .await
                        .map_err(|e| TransportError::Jump {
                            jump: v.addr(),
                            error: Box::new(connect_err(format!(
                                "the jump host could not open a channel to it: {e}"
                            ))),
                        })?;
                    // CHANNEL_OPEN direct-tcpip, then its confirmation; the
                    // jump host's own TCP connect happens in between.
                    trace.mark(
                        &format!("{who}direct-tcpip channel open"),
                        format!("{} via {}", ep.host_port(), v.name),
                        1,
                    );
                    client::connect_stream(config, ch.into_stream(), checker)
                        .await
                        .map_err(handshake)
                }
            }
        };
        let mut handle = match tokio::time::timeout(bound, connect).await {
            Ok(r) => r?,
            Err(_) => return Err(connect_err(format!("no answer within {bound:?}"))),
        };
        // russh 0.65 client::connect_stream sends its identification, reads
        // the server's, then sends KEXINIT; OpenSSH's sshd sends its KEXINIT
        // only after reading the client's identification
        // (kex_exchange_identification, then do_ssh2_kex): one exchange.
        // ECDH_INIT, then ECDH_REPLY + NEWKEYS: one more. connect_stream
        // returns when the key exchange is done (its kex_done signal), the
        // host key checked by `Checker`.
        trace.mark(&format!("{who}key exchange done"), "host key checked", 2);
        tokio::time::timeout(
            opts.connect_timeout,
            super::auth::login(&mut handle, ep, &opts.key_cache, trace, who),
        )
        .await
        .map_err(|_| TransportError::Auth {
            user: ep.user.clone(),
            host: ep.host_port(),
            msg: format!("no answer within {:?}", opts.connect_timeout),
        })??;
        Ok(handle)
    })
}

/// A session channel being opened ahead of the call that will use it.
type Spare = tokio::task::JoinHandle<Result<russh::Channel<client::Msg>, russh::Error>>;

mod checker;
mod cipher;
mod command;
mod stream;
pub use checker::Checker;
pub use command::{
    INLINE_MAX, inline_command, remote_command, stream_command, sudo_wants_password,
};

pub struct SshSession {
    handle: Arc<Conn>,
    /// The next call's channel, asked for while this call's script runs:
    /// a call after the first does not wait a round trip for its channel
    /// (OpenSSH's sshd allows MaxSessions 10 channels per connection by
    /// default; this keeps at most two open).
    spare: Option<Spare>,
    /// No channel is opened ahead of the next call (the run's last).
    last: bool,
    trace: Trace,
    host: String,
    user: String,
    /// What runs the script that is written to stdin.
    command: String,
    /// The sessions open on this connection (this one and its side
    /// sessions, [`Session::side`]): the last one closed disconnects.
    sessions: Arc<std::sync::atomic::AtomicUsize>,
}

impl SshSession {
    pub async fn connect(
        host: &Host,
        _s: &SshSettings,
        ep: Arc<Endpoint>,
        interpreter: Interpreter,
        opts: &ConnectOptions,
        trace: &Trace,
    ) -> Result<SshSession, TransportError> {
        let handle = open(&ep, opts, trace, "").await?;
        Ok(SshSession {
            handle: Arc::new(handle),
            spare: None,
            last: false,
            trace: trace.clone(),
            host: host.name.clone(),
            user: ep.user.clone(),
            command: remote_command(interpreter, &ep.user),
            sessions: Arc::new(std::sync::atomic::AtomicUsize::new(1)),
        })
    }

    async fn exec(&mut self, script: &str) -> Result<Output, TransportError> {
        let lost = |e: russh::Error| TransportError::Lost {
            host: self.host.clone(),
            msg: e.to_string(),
        };
        let trace = &self.trace;
        // CHANNEL_OPEN, then OPEN_CONFIRMATION: russh's Channel exists only
        // once it is confirmed (client::Handle::channel_open_session). A
        // channel asked for during the previous call is usually there.
        let mut ch = match self.spare.take() {
            Some(spare) => {
                let ready = spare.is_finished();
                let ch = spare
                    .await
                    .map_err(|e| TransportError::Lost {
                        host: self.host.clone(),
                        msg: format!("opening a channel failed: {e}"),
                    })?
                    .map_err(lost)?;
                let (detail, waits) = if ready {
                    ("opened during the previous call", 0)
                } else {
                    ("asked for during the previous call, waited for", 1)
                };
                trace.mark("channel open", detail, waits);
                ch
            }
            None => {
                let ch = self.handle.channel_open_session().await.map_err(lost)?;
                trace.mark("channel open", "", 1);
                ch
            }
        };
        // exec (its reply is not waited for: russh Channel::exec only
        // sends), then EOF; a script that cannot travel in the command goes
        // on stdin once the server opens the channel's window (see
        // `inline_command`).
        match inline_command(&self.command, script) {
            Some(cmd) => {
                ch.exec(true, cmd).await.map_err(lost)?;
                ch.eof().await.map_err(lost)?;
                trace.mark(
                    "exec sent",
                    format!("script in the command ({} bytes), EOF", script.len()),
                    0,
                );
            }
            None => {
                ch.exec(true, self.command.as_str()).await.map_err(lost)?;
                trace.mark("exec sent", "", 0);
                ch.data(script.as_bytes()).await.map_err(lost)?;
                ch.eof().await.map_err(lost)?;
                trace.mark(
                    "stdin sent",
                    format!(
                        "{} bytes of script, EOF, once the window opened",
                        script.len()
                    ),
                    1,
                );
            }
        }
        // The reply to what was just sent: the first output, or the exit
        // status of a script that printed nothing.
        // (Not when this is the run's last call: `verify` makes one call,
        // and the channel would cost both ends an open and a close:
        // docs/research/russh.md#rs-channel.)
        if !std::mem::take(&mut self.last) {
            let next = self.handle.clone();
            self.spare = Some(tokio::spawn(
                async move { next.channel_open_session().await },
            ));
        }
        let mut answered = false;
        let mut answer = |what: &str, detail: String| {
            trace.mark(what, detail, if answered { 0 } else { 1 });
            answered = true;
        };
        let mut out = Output::default();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut signal = None;
        while let Some(msg) = ch.wait().await {
            match &msg {
                ChannelMsg::Data { .. } | ChannelMsg::ExtendedData { .. }
                    if stdout.is_empty() && stderr.is_empty() && out.dropped == 0 =>
                {
                    answer("first output", String::new());
                }
                ChannelMsg::ExitStatus { exit_status } => {
                    answer("exit status", exit_status.to_string());
                }
                ChannelMsg::ExitSignal { .. } => answer("exit signal", String::new()),
                _ => {}
            }
            // Past the cap kwinctl stops reading and closes the channel: a
            // host whose output never ends does not hold the run until
            // --timeout (what was dropped is counted; the caller reports it).
            let mut cut = false;
            match msg {
                ChannelMsg::Data { data } if stdout.len() < MAX_OUTPUT => {
                    stdout.extend_from_slice(&data);
                }
                ChannelMsg::Data { data } => {
                    out.dropped += data.len();
                    cut = true;
                }
                ChannelMsg::ExtendedData { data, .. } if stderr.len() < MAX_OUTPUT => {
                    stderr.extend_from_slice(&data);
                }
                ChannelMsg::ExtendedData { data, .. } => {
                    out.dropped += data.len();
                    cut = true;
                }
                ChannelMsg::ExitStatus { exit_status } => out.exit = Some(exit_status),
                ChannelMsg::ExitSignal {
                    signal_name,
                    error_message,
                    ..
                } => signal = Some(format!("{signal_name:?} {error_message}")),
                _ => {}
            }
            if cut {
                trace.mark(
                    "cut",
                    format!("more than {MAX_OUTPUT} bytes: channel closed"),
                    0,
                );
                let _ = ch.close().await;
                break;
            }
        }
        trace.mark(
            "channel closed",
            format!("{} bytes out, {} bytes err", stdout.len(), stderr.len()),
            0,
        );
        out.stdout = String::from_utf8_lossy(&stdout).into_owned();
        out.stderr = String::from_utf8_lossy(&stderr).into_owned();
        if let Some(sig) = signal {
            out.stderr.push_str(&format!("\nkilled by signal {sig}"));
        }
        if sudo_wants_password(&self.command, &out) {
            return Err(TransportError::SudoPassword {
                host: self.host.clone(),
                user: self.user.clone(),
            });
        }
        if out.exit.is_none() && self.handle.is_closed() {
            return Err(TransportError::Lost {
                host: self.host.clone(),
                msg: "the connection closed before the script finished".into(),
            });
        }
        Ok(out)
    }
}

impl Session for SshSession {
    fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.exec(script).boxed()
    }

    fn stream_mode(&self) -> Option<super::StreamMode> {
        Some(super::StreamMode::Raw)
    }

    fn stream<'a>(
        &'a mut self,
        script: &'a str,
        input: super::StreamInput<'a>,
    ) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.stream_input(script, input).boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move {
            if let Some(spare) = &self.spare {
                spare.abort();
            }
            if self
                .sessions
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
                > 1
            {
                return;
            }
            // russh's Handle::disconnect queues the message; nothing waits
            // for the server.
            let _ = self
                .handle
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
            self.trace.mark("disconnect sent", "", 0);
        }
        .boxed()
    }

    fn last_call_next(&mut self) {
        self.last = true;
    }

    fn trace(&self) -> Option<&Trace> {
        Some(&self.trace)
    }

    /// The side session shares the connection's trace (its calls are the
    /// host's: the cluster lock's), and asks for its first channel at once,
    /// so that its first call waits no round trip for it.
    fn side(&self) -> Option<Box<dyn Session>> {
        self.sessions
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let next = self.handle.clone();
        Some(Box::new(SshSession {
            handle: self.handle.clone(),
            spare: Some(tokio::spawn(
                async move { next.channel_open_session().await },
            )),
            last: false,
            trace: self.trace.clone(),
            host: self.host.clone(),
            user: self.user.clone(),
            command: self.command.clone(),
            sessions: self.sessions.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_scripts_as_root_travel_in_the_command() {
        let c = remote_command(Interpreter::Sh, "root");
        let cmd = inline_command(&c, "echo 'it''s'\nexit 3\n").unwrap();
        assert_eq!(
            cmd,
            r"/bin/sh -c 'echo '\''it'\'''\''s'\''
exit 3
'"
        );
        // the quoting survives a POSIX shell: the script comes back whole
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &format!("printf %s {}", &cmd["/bin/sh -c ".len()..])])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "echo 'it''s'\nexit 3\n"
        );
        assert!(inline_command(&c, &"x".repeat(INLINE_MAX + 1)).is_none());
        assert!(inline_command(&remote_command(Interpreter::Sh, "ops"), "true").is_none());
        assert!(inline_command(&remote_command(Interpreter::PowerShell, "a"), "1").is_none());
    }

    #[test]
    fn remote_commands() {
        assert_eq!(remote_command(Interpreter::Sh, "root"), "/bin/sh -s");
        assert_eq!(remote_command(Interpreter::Sh, "ops"), "sudo -n /bin/sh -s");
        let w = remote_command(Interpreter::PowerShell, "Administrator");
        assert!(
            w.starts_with("powershell.exe -NoProfile -NonInteractive"),
            "{w}"
        );
        let b64 = w.rsplit(' ').next().unwrap();
        let raw = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).unwrap();
        let utf16: Vec<u16> = raw
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let text = String::from_utf16(&utf16).unwrap();
        assert!(text.contains("[Console]::In.ReadToEnd()"), "{text}");
    }

    /// A Windows OpenSSH server runs the command through its DefaultShell:
    /// `"C:\Windows\system32\cmd.exe" /c "<command>"` by default
    /// (docs/research/windows-ssh.md#ws4). The command must mean the same to
    /// cmd.exe and PowerShell (none of their special characters) and stay
    /// far below cmd.exe's 8191 characters (docs/research/windows-ssh.md#ws5),
    /// whatever the script: the script goes on stdin.
    #[test]
    fn the_windows_command_survives_either_default_shell_and_its_limit() {
        let w = remote_command(Interpreter::PowerShell, "Administrator");
        assert!(
            w.chars()
                .all(|c| c.is_ascii_alphanumeric() || " -.+/=".contains(c)),
            "{w}"
        );
        let line = format!(r#""C:\Windows\system32\cmd.exe" /c "{w}""#);
        assert!(line.len() < 8191 / 4, "{} characters", line.len());
    }
}
