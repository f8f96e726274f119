//! SSH sessions with russh: key file or ssh-agent, known_hosts checked,
//! `~/.ssh/config` honoured for HostName, Port, User and IdentityFile.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use russh::ChannelMsg;
use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey};

use super::{
    ConnectOptions, Interpreter, MAX_OUTPUT, Output, Session, TransportError, encoded_bootstrap,
};
use crate::inventory::{Host, SshSettings};

/// Environment variable holding the passphrase of an encrypted key file.
pub const PASSPHRASE_ENV: &str = "KWINCTL_SSH_PASSPHRASE";

/// Private keys loaded once per command, shared by every connection. A key
/// is read (and decrypted: an encrypted key's KDF can cost 100 ms of CPU) by
/// one blocking thread while the other connections wait for it, off the
/// async runtime; a key that fails to load fails the same way for everyone.
type Loaded = Result<Arc<PrivateKey>, String>;

#[derive(Clone, Default)]
pub struct KeyCache {
    keys: Arc<Mutex<HashMap<PathBuf, Loaded>>>,
    loading: Arc<Mutex<()>>,
}

impl KeyCache {
    async fn load(&self, path: &Path) -> Loaded {
        if let Some(k) = self.keys.lock().unwrap().get(path) {
            return k.clone();
        }
        let me = self.clone();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || me.load_blocking(&path))
            .await
            .map_err(|e| format!("loading the key failed: {e}"))?
    }

    fn load_blocking(&self, path: &Path) -> Loaded {
        let _one_at_a_time = self.loading.lock().unwrap();
        if let Some(k) = self.keys.lock().unwrap().get(path) {
            return k.clone();
        }
        let pass = std::env::var(PASSPHRASE_ENV).ok();
        let key = russh::keys::load_secret_key(path, pass.as_deref())
            .map(Arc::new)
            .map_err(|e| {
                let hint = if pass.is_none() {
                    format!(" (if it is encrypted, set {PASSPHRASE_ENV} or load it into ssh-agent)")
                } else {
                    String::new()
                };
                format!("cannot load key {}: {e}{hint}", path.display())
            });
        self.keys
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), key.clone());
        key
    }
}

/// Serialises appends to known_hosts files (trust on first use).
static LEARN_LOCK: Mutex<()> = Mutex::new(());

#[derive(Clone)]
struct Checker {
    host: String,
    port: u16,
    known_hosts: PathBuf,
    accept_new: bool,
    verdict: Arc<Mutex<Option<TransportError>>>,
}

fn fingerprint(k: &PublicKey) -> String {
    format!(
        "{} {}",
        k.algorithm().as_str(),
        k.fingerprint(HashAlg::Sha256)
    )
}

impl Checker {
    fn check(&self, key: &PublicKey) -> Result<bool, TransportError> {
        let file = self.known_hosts.display().to_string();
        let known = russh::keys::known_hosts::known_host_keys_path(
            &self.host,
            self.port,
            &self.known_hosts,
        )
        .map_err(|e| TransportError::Setup(format!("cannot read known_hosts {file}: {e}")))?;
        if known.iter().any(|(_, k)| k == key) {
            return Ok(true);
        }
        if let Some((line, expected)) = known
            .iter()
            .find(|(_, k)| k.algorithm() == key.algorithm())
            .or(known.first())
        {
            return Err(TransportError::HostKeyMismatch {
                host: self.host.clone(),
                seen: fingerprint(key),
                expected: fingerprint(expected),
                file,
                line: *line,
            });
        }
        if self.accept_new {
            let _g = LEARN_LOCK.lock().unwrap();
            if let Some(dir) = self.known_hosts.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            russh::keys::known_hosts::learn_known_hosts_path(
                &self.host,
                self.port,
                key,
                &self.known_hosts,
            )
            .map_err(|e| TransportError::Setup(format!("cannot record host key in {file}: {e}")))?;
            return Ok(true);
        }
        Err(TransportError::UnknownHostKey {
            host: self.host.clone(),
            seen: fingerprint(key),
            file,
        })
    }
}

impl client::Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            *self.verdict.lock().unwrap() = Some(TransportError::Setup(format!(
                "{} presented a host certificate; kwinctl checks plain host keys against known_hosts",
                self.host
            )));
            return Ok(false);
        };
        // known_hosts is read (and, with --accept-new-host-keys, written)
        // on a blocking thread, not on the runtime's.
        let (me, key) = (self.clone(), key.clone());
        let checked = tokio::task::spawn_blocking(move || me.check(&key))
            .await
            .unwrap_or_else(|e| {
                Err(TransportError::Setup(format!(
                    "checking the host key failed: {e}"
                )))
            });
        match checked {
            Ok(ok) => Ok(ok),
            Err(e) => {
                *self.verdict.lock().unwrap() = Some(e);
                Ok(false)
            }
        }
    }
}

pub struct SshSession {
    handle: Handle<Checker>,
    host: String,
    /// What runs the script that is written to stdin.
    command: String,
}

/// The remote command that reads a script from stdin: POSIX sh (under
/// `sudo -n` when not root), or PowerShell (OpenSSH on Windows Server) with
/// the same stdin bootstrap as WinRM.
pub fn remote_command(interpreter: Interpreter, user: &str) -> String {
    match interpreter {
        Interpreter::Sh if user == "root" => "/bin/sh -s".into(),
        Interpreter::Sh => "sudo -n /bin/sh -s".into(),
        Interpreter::PowerShell => format!(
            "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -EncodedCommand {}",
            encoded_bootstrap()
        ),
    }
}

/// Where and how to connect, after `~/.ssh/config`.
struct Target {
    addr: String,
    port: u16,
    user: String,
    identities: Vec<PathBuf>,
}

fn target(host: &Host, s: &SshSettings, opts: &ConnectOptions) -> Target {
    let params = opts
        .ssh_config
        .as_ref()
        .map(|c| c.query(&host.name))
        .filter(|p| {
            p.host_name.is_some()
                || p.user.is_some()
                || p.port.is_some()
                || p.identity_file.is_some()
        });
    let addr = params
        .as_ref()
        .and_then(|p| p.host_name.clone())
        .unwrap_or_else(|| host.address.to_string());
    let port = s
        .port
        .or(params.as_ref().and_then(|p| p.port))
        .unwrap_or(22);
    let user = s
        .user
        .clone()
        .or(params.as_ref().and_then(|p| p.user.clone()))
        .unwrap_or_else(|| "root".into());
    let identities = match (
        &s.identity,
        params.as_ref().and_then(|p| p.identity_file.clone()),
    ) {
        (Some(i), _) => vec![i.clone()],
        (None, Some(list)) => list,
        (None, None) => Vec::new(),
    };
    Target {
        addr,
        port,
        user,
        identities,
    }
}

fn default_identities() -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME") else {
        return Vec::new();
    };
    ["id_ed25519", "id_ecdsa", "id_rsa"]
        .iter()
        .map(|n| PathBuf::from(&home).join(".ssh").join(n))
        .filter(|p| p.exists())
        .collect()
}

impl SshSession {
    pub async fn connect(
        host: &Host,
        s: &SshSettings,
        interpreter: Interpreter,
        opts: &ConnectOptions,
    ) -> Result<SshSession, TransportError> {
        let t = target(host, s, opts);
        let verdict = Arc::new(Mutex::new(None));
        let checker = Checker {
            host: t.addr.clone(),
            port: t.port,
            known_hosts: s.known_hosts.clone(),
            accept_new: opts.accept_new_host_keys,
            verdict: verdict.clone(),
        };
        let config = Arc::new(client::Config {
            nodelay: true,
            inactivity_timeout: None,
            ..Default::default()
        });
        let addr = format!("{}:{}", t.addr, t.port);
        let connect = async {
            let tcp = tokio::net::TcpStream::connect(&addr).await.map_err(|e| {
                TransportError::Connect {
                    addr: addr.clone(),
                    msg: e.to_string(),
                }
            })?;
            let _ = tcp.set_nodelay(true);
            client::connect_stream(config, tcp, checker)
                .await
                .map_err(|e| {
                    verdict
                        .lock()
                        .unwrap()
                        .take()
                        .unwrap_or(TransportError::Connect {
                            addr: addr.clone(),
                            msg: format!("SSH handshake failed: {e}"),
                        })
                })
        };
        let mut handle = match tokio::time::timeout(opts.connect_timeout, connect).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(TransportError::Connect {
                    addr,
                    msg: format!("no answer within {:?}", opts.connect_timeout),
                });
            }
        };
        let auth = tokio::time::timeout(
            opts.connect_timeout,
            authenticate(&mut handle, &t, &host.name, opts),
        )
        .await
        .map_err(|_| TransportError::Auth {
            user: t.user.clone(),
            host: host.name.clone(),
            msg: format!("no answer within {:?}", opts.connect_timeout),
        })?;
        auth?;
        Ok(SshSession {
            handle,
            host: host.name.clone(),
            command: remote_command(interpreter, &t.user),
        })
    }

    async fn exec(&mut self, script: &str) -> Result<Output, TransportError> {
        let lost = |e: russh::Error| TransportError::Lost {
            host: self.host.clone(),
            msg: e.to_string(),
        };
        let mut ch = self.handle.channel_open_session().await.map_err(lost)?;
        ch.exec(true, self.command.as_str()).await.map_err(lost)?;
        ch.data(script.as_bytes()).await.map_err(lost)?;
        ch.eof().await.map_err(lost)?;
        let mut out = Output::default();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut signal = None;
        while let Some(msg) = ch.wait().await {
            match msg {
                ChannelMsg::Data { data } if stdout.len() < MAX_OUTPUT => {
                    stdout.extend_from_slice(&data);
                }
                ChannelMsg::Data { data } => out.dropped += data.len(),
                ChannelMsg::ExtendedData { data, .. } if stderr.len() < MAX_OUTPUT => {
                    stderr.extend_from_slice(&data);
                }
                ChannelMsg::ExitStatus { exit_status } => out.exit = Some(exit_status),
                ChannelMsg::ExitSignal {
                    signal_name,
                    error_message,
                    ..
                } => signal = Some(format!("{signal_name:?} {error_message}")),
                _ => {}
            }
        }
        out.stdout = String::from_utf8_lossy(&stdout).into_owned();
        out.stderr = String::from_utf8_lossy(&stderr).into_owned();
        if let Some(sig) = signal {
            out.stderr.push_str(&format!("\nkilled by signal {sig}"));
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

async fn authenticate(
    handle: &mut Handle<Checker>,
    t: &Target,
    name: &str,
    opts: &ConnectOptions,
) -> Result<(), TransportError> {
    let fail = |msg: String| TransportError::Auth {
        user: t.user.clone(),
        host: name.to_string(),
        msg,
    };
    let lost = |e: russh::Error| TransportError::Lost {
        host: name.to_string(),
        msg: e.to_string(),
    };
    let rsa_hash = handle
        .best_supported_rsa_hash()
        .await
        .map_err(lost)?
        .flatten();
    let mut tried = Vec::new();
    // One key file: accepted or not.
    let offer = async |handle: &mut Handle<Checker>, key: Arc<PrivateKey>| {
        handle
            .authenticate_publickey(&t.user, PrivateKeyWithHashAlg::new(key, rsa_hash))
            .await
            .map(|r| r.success())
            .map_err(lost)
    };
    // Explicit keys first (inventory, then ssh config).
    for path in &t.identities {
        let key = opts.key_cache.load(path).await.map_err(fail)?;
        if offer(handle, key).await? {
            return Ok(());
        }
        tried.push(path.display().to_string());
    }
    // Then the agent.
    if t.identities.is_empty() && std::env::var_os("SSH_AUTH_SOCK").is_some() {
        match russh::keys::agent::client::AgentClient::connect_env().await {
            Ok(mut agent) => {
                let ids = agent.request_identities().await.unwrap_or_default();
                for id in ids {
                    let russh::keys::agent::AgentIdentity::PublicKey { key, .. } = id else {
                        continue;
                    };
                    let r = handle
                        .authenticate_publickey_with(&t.user, key, rsa_hash, &mut agent)
                        .await;
                    if matches!(r, Ok(ref a) if a.success()) {
                        return Ok(());
                    }
                }
                tried.push("ssh-agent".into());
            }
            Err(e) => tried.push(format!("ssh-agent (unreachable: {e})")),
        }
    }
    // Then the usual default key files.
    if t.identities.is_empty() {
        for path in default_identities() {
            let Ok(key) = opts.key_cache.load(&path).await else {
                continue;
            };
            if offer(handle, key).await? {
                return Ok(());
            }
            tried.push(path.display().to_string());
        }
    }
    Err(fail(if tried.is_empty() {
        "no key to offer: set ssh.identity in the inventory or start ssh-agent".into()
    } else {
        format!(
            "the server refused every key offered ({}); check the user and authorized_keys",
            tried.join(", ")
        )
    }))
}

impl Session for SshSession {
    fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.exec(script).boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move {
            let _ = self
                .handle
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
