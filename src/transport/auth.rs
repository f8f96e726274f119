//! Public-key login in OpenSSH's order (sshconnect2.c pubkey_prepare): the
//! agent's keys, those that are also an IdentityFile first marked as such;
//! with `IdentitiesOnly` only those; then the key files not in the agent.
//! An IdentityFile is matched to an agent key by its public half (from
//! `x.pub`, from an OpenSSH key file even when encrypted, or the `.pub`
//! itself), so an encrypted key that is loaded in the agent needs no
//! passphrase, and `IdentityFile x.pub` picks one agent key out of many.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use russh::client::Handle;
use russh::keys::agent::client::AgentClient;
use russh::keys::ssh_key::{HashAlg, PrivateKey, PublicKey};
use russh::keys::{PrivateKeyWithHashAlg, agent::AgentIdentity};

use super::TransportError;
use super::route::{Agent, Endpoint};
use super::trace::Trace;

/// Environment variable holding the passphrase of encrypted key files.
pub const PASSPHRASE_ENV: &str = "KWINCTL_SSH_PASSPHRASE";

/// Private keys loaded once per command, shared by every connection. A key
/// is read (and decrypted: an encrypted key's KDF can cost 100 ms of CPU)
/// once while the other connections wait for it: on the blocking pool
/// beside `up`'s workers, in place on `plan`'s and `verify`'s one thread
/// (`crate::blocking`), which then holds every connection that long, once;
/// a key that fails to load fails the same way for everyone.
type Loaded = Result<Arc<PrivateKey>, String>;

#[derive(Clone, Default)]
pub struct KeyCache {
    keys: Arc<Mutex<HashMap<PathBuf, Loaded>>>,
    loading: Arc<Mutex<()>>,
    /// IdentityFiles' public halves, read once per command: only to
    /// match them to ssh-agent's keys, so only when an agent answers.
    public: Arc<Mutex<HashMap<PathBuf, Option<PublicKey>>>>,
}

impl KeyCache {
    /// [`public_half`] of `path`, read once per command.
    fn public_half(&self, path: &Path) -> Option<PublicKey> {
        if let Some(k) = self.public.lock().unwrap().get(path) {
            return k.clone();
        }
        let k = public_half(path);
        self.public
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), k.clone());
        k
    }

    async fn load(&self, path: &Path) -> Loaded {
        if let Some(k) = self.keys.lock().unwrap().get(path) {
            return k.clone();
        }
        let me = self.clone();
        let path = path.to_path_buf();
        crate::blocking::file_work(move || me.load_blocking(&path))
            .await
            .map_err(|e| format!("loading the key failed: {e}"))?
    }

    fn load_blocking(&self, path: &Path) -> Loaded {
        let _one_at_a_time = self.loading.lock().unwrap();
        if let Some(k) = self.keys.lock().unwrap().get(path) {
            return k.clone();
        }
        let pass = std::env::var(PASSPHRASE_ENV).ok();
        let key = load_private(path, pass.as_deref()).map(Arc::new);
        self.keys
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), key.clone());
        key
    }
}

/// A private key file, with what went wrong in words that say what to do.
pub fn load_private(path: &Path, pass: Option<&str>) -> Result<PrivateKey, String> {
    let shown = path.display();
    let text = crate::localfile::read_to_string(path, crate::localfile::Kind::Identity)
        .map_err(|e| format!("cannot read key {shown}: {e}"))?;
    if text.contains("BEGIN OPENSSH PRIVATE KEY") {
        let key = PrivateKey::from_openssh(&text)
            .map_err(|e| format!("{shown} is not a valid OpenSSH private key: {e}"))?;
        if !key.is_encrypted() {
            return Ok(key);
        }
        return match pass {
            None => Err(format!(
                "{shown} is encrypted and ssh-agent does not hold it: set {PASSPHRASE_ENV} or load it into ssh-agent (ssh-add {shown})"
            )),
            Some(p) => key.decrypt(p).map_err(|_| {
                format!("wrong passphrase for {shown}: {PASSPHRASE_ENV} does not decrypt it")
            }),
        };
    }
    if PublicKey::from_openssh(text.trim()).is_ok() {
        return Err(format!(
            "{shown} holds only a public key and ssh-agent does not hold its private half: load the key into ssh-agent, or point IdentityFile at the private key"
        ));
    }
    russh::keys::decode_secret_key(&text, pass).map_err(|e| {
        if pass.is_some() && text.contains("ENCRYPTED") {
            format!("wrong passphrase for {shown} ({PASSPHRASE_ENV}), or an encryption kwinctl cannot read: {e}")
        } else if text.contains("ENCRYPTED") {
            format!("{shown} is encrypted: set {PASSPHRASE_ENV} or load it into ssh-agent")
        } else {
            format!("cannot load key {shown}: {e}")
        }
    })
}

/// The public half of an IdentityFile, as OpenSSH finds it: the file's own
/// `.pub`, the public key inside an OpenSSH private key (readable when
/// encrypted), or the file itself when it is a public key.
fn public_half(path: &Path) -> Option<PublicKey> {
    let mut pubp = path.as_os_str().to_owned();
    pubp.push(".pub");
    for p in [PathBuf::from(pubp), path.to_path_buf()] {
        let Ok(text) = crate::localfile::read_to_string(&p, crate::localfile::Kind::Identity)
        else {
            continue;
        };
        if let Ok(k) = PublicKey::from_openssh(text.trim()) {
            return Some(k);
        }
        if let Ok(k) = PrivateKey::from_openssh(&text) {
            return Some(k.public_key().clone());
        }
    }
    None
}

/// One key to offer.
enum Candidate {
    Agent(PublicKey, String),
    File(PathBuf),
}

async fn agent_of(ep: &Endpoint) -> Option<Result<AgentClient<tokio::net::UnixStream>, String>> {
    let path = match &ep.agent {
        Agent::None => return None,
        Agent::Env => PathBuf::from(std::env::var_os("SSH_AUTH_SOCK")?),
        Agent::Socket(p) => p.clone(),
    };
    Some(
        AgentClient::connect_uds(&path)
            .await
            .map_err(|e| format!("ssh-agent at {} unreachable: {e}", path.display())),
    )
}

/// The request/reply exchanges of one publickey try with russh 0.65: the
/// first try also asks for the ssh-userauth service and waits for its
/// acceptance (client::encrypted write_auth_request_if_needed); each key
/// goes first as a query without a signature ("This is a probe" in
/// encrypted.rs write_auth_request), and only after the server's PK_OK with
/// its signature. A refused key costs the query; an accepted one both.
fn auth_exchanges(first: bool, accepted: bool) -> u32 {
    u32::from(first) + if accepted { 2 } else { 1 }
}

/// Log in to `ep`; every key offered and why it did not work is in the
/// error. Each key offered is marked in `trace` (step names after `who`).
pub async fn login<H: russh::client::Handler>(
    handle: &mut Handle<H>,
    ep: &Endpoint,
    cache: &KeyCache,
    trace: &Trace,
    who: &str,
) -> Result<(), TransportError> {
    let fail = |msg: String| TransportError::Auth {
        user: ep.user.clone(),
        host: ep.host_port(),
        msg,
    };
    let lost = |e: russh::Error| TransportError::Lost {
        host: ep.addr(),
        msg: e.to_string(),
    };
    let rsa_hash = handle
        .best_supported_rsa_hash()
        .await
        .map_err(lost)?
        .flatten();
    let mut notes: Vec<String> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    for p in &ep.identities {
        if p.exists() {
            files.push(p.clone());
        } else if !ep.default_identities {
            notes.push(format!("{} (missing)", p.display()));
        }
    }
    let mut agent = None;
    let mut order: Vec<Candidate> = Vec::new();
    match agent_of(ep).await {
        None => {}
        Some(Err(e)) => notes.push(e),
        Some(Ok(mut a)) => {
            let ids = a.request_identities().await.unwrap_or_default();
            let mut halves: Vec<Option<PublicKey>> =
                files.iter().map(|p| cache.public_half(p)).collect();
            for id in ids {
                let AgentIdentity::PublicKey { key, comment } = id else {
                    continue;
                };
                if let Some(i) = halves
                    .iter()
                    .position(|k| k.as_ref().is_some_and(|k| k.key_data() == key.key_data()))
                {
                    halves.remove(i);
                    let path = files.remove(i);
                    order.push(Candidate::Agent(key, path.display().to_string()));
                } else if !ep.identities_only {
                    let label = if comment.is_empty() {
                        key.fingerprint(HashAlg::Sha256).to_string()
                    } else {
                        comment
                    };
                    order.push(Candidate::Agent(key, label));
                }
            }
            agent = Some(a);
        }
    }
    order.extend(files.into_iter().map(Candidate::File));
    let mut refused = Vec::new();
    let mut first = true;
    let mut mark = |accepted: bool, what: &str| {
        let step = if accepted {
            "auth done"
        } else {
            "auth refused"
        };
        trace.mark(
            &format!("{who}{step}"),
            format!("publickey {what}"),
            auth_exchanges(first, accepted),
        );
        first = false;
    };
    for c in order {
        let ok = match c {
            Candidate::Agent(key, label) => {
                let Some(a) = agent.as_mut() else { continue };
                let r = handle
                    .authenticate_publickey_with(&ep.user, key, rsa_hash, a)
                    .await;
                let shown = format!("{label} (ssh-agent)");
                match r {
                    Ok(r) if r.success() => {
                        mark(true, &shown);
                        return Ok(());
                    }
                    Ok(_) => {
                        mark(false, &shown);
                        refused.push(shown)
                    }
                    Err(e) => notes.push(format!("ssh-agent could not sign with {label}: {e}")),
                }
                false
            }
            Candidate::File(path) => match cache.load(&path).await {
                Err(e) => {
                    notes.push(e);
                    false
                }
                Ok(key) => {
                    let r = handle
                        .authenticate_publickey(&ep.user, PrivateKeyWithHashAlg::new(key, rsa_hash))
                        .await;
                    let shown = path.display().to_string();
                    match r {
                        Ok(r) if r.success() => {
                            mark(true, &shown);
                            return Ok(());
                        }
                        Ok(_) => {
                            mark(false, &shown);
                            refused.push(shown);
                            false
                        }
                        Err(e) => {
                            return Err(fail(format!(
                                "the server closed the connection after refusing {} (its MaxAuthTries?): {e}; \
                                 set IdentitiesOnly yes and IdentityFile to the right key (its .pub is enough when ssh-agent holds it)",
                                refused.join(", ")
                            )));
                        }
                    }
                }
            },
        };
        let _ = ok;
        if handle.is_closed() {
            return Err(fail(format!(
                "the server closed the connection after refusing {} (its MaxAuthTries?): \
                 set IdentitiesOnly yes and IdentityFile to the right key (its .pub is enough when ssh-agent holds it)",
                refused.join(", ")
            )));
        }
    }
    let mut msg = if refused.is_empty() && notes.is_empty() {
        "no key to offer: set ssh.identity in the inventory, IdentityFile in ssh_config, or start ssh-agent".to_string()
    } else if refused.is_empty() {
        "no key could be offered".to_string()
    } else {
        format!(
            "the server refused every key offered ({}); check the user and authorized_keys",
            refused.join(", ")
        )
    };
    if !notes.is_empty() {
        msg.push_str(&format!("; {}", notes.join("; ")));
    }
    Err(fail(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keygen(dir: &Path, name: &str, pass: &str) -> PathBuf {
        let p = dir.join(name);
        let st = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", pass, "-f"])
            .arg(&p)
            .status()
            .expect("ssh-keygen");
        assert!(st.success());
        p
    }

    #[test]
    fn wrong_passphrase_is_named_and_public_half_is_read_without_it() {
        let d = tempfile::tempdir().unwrap();
        let k = keygen(d.path(), "enc", "right horse");
        let e = load_private(&k, Some("wrong")).unwrap_err();
        assert!(e.contains("wrong passphrase"), "{e}");
        let e = load_private(&k, None).unwrap_err();
        assert!(e.contains("is encrypted"), "{e}");
        assert!(load_private(&k, Some("right horse")).is_ok());
        // the public half without the .pub file and without the passphrase
        let pubk = std::fs::read_to_string(k.with_extension("pub")).unwrap();
        std::fs::remove_file(k.with_extension("pub")).unwrap();
        let found = public_half(&k).expect("public half");
        assert_eq!(
            found.to_openssh().unwrap().split(' ').nth(1),
            pubk.split(' ').nth(1)
        );
        // read once per command: the cache answers without the files
        let cache = KeyCache::default();
        let k3 = keygen(d.path(), "cached", "");
        let first = cache.public_half(&k3).expect("public half");
        std::fs::remove_file(k3.with_extension("pub")).unwrap();
        std::fs::remove_file(&k3).unwrap();
        assert_eq!(
            cache.public_half(&k3).map(|k| k.key_data().clone()),
            Some(first.key_data().clone())
        );
        // a .pub given as the identity: no private half
        let k2 = keygen(d.path(), "plain", "");
        let e = load_private(&k2.with_extension("pub"), None).unwrap_err();
        assert!(e.contains("only a public key"), "{e}");
    }
}
