//! Host keys checked as OpenSSH checks them (sshd(8) "SSH_KNOWN_HOSTS FILE
//! FORMAT", ssh_config(5) `UserKnownHostsFile`, `GlobalKnownHostsFile`,
//! `HostKeyAlias`, `StrictHostKeyChecking`, `HashKnownHosts`): every user
//! and global file is read, entries match by pattern (`*`, `?`, `!`) or
//! hashed name, under the name `[host]:port` for ports other than 22 (or the
//! alias); `@cert-authority` lines trust host certificates, `@revoked` lines
//! refuse keys. Lines are parsed by the `ssh-key` crate.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine;
use hmac::{KeyInit, Mac};
use russh::keys::ssh_key::known_hosts::{Entry, HostPatterns, Marker};
use russh::keys::ssh_key::{Algorithm, Certificate, HashAlg, PublicKey, certificate::CertType};

use super::TransportError;
use super::route::{Endpoint, Strict};

mod cache;
pub use cache::{Cache, Snapshot};

/// One known_hosts line that names the host.
#[derive(Debug, Clone)]
pub struct Known {
    pub file: PathBuf,
    pub line: usize,
    pub entry: Entry,
}

/// OpenSSH's wildcard match (`*`, `?`), case-insensitive as for host names.
/// An ASCII pattern without wildcards (a known_hosts line's address, in
/// practice) is compared as it is, without building a matcher: what the
/// matcher does for it (each character equal, ASCII case ignored).
pub fn wildmatch(pattern: &str, s: &str) -> bool {
    if pattern.is_ascii() && s.is_ascii() && !pattern.contains(['*', '?']) {
        return pattern.eq_ignore_ascii_case(s);
    }
    wildmatch::WildMatch::new_case_insensitive(pattern).matches(s)
}

/// Whether a line's host field names `name` (OpenSSH's match_hostname: a
/// negated pattern that matches wins over everything).
pub fn names(patterns: &HostPatterns, name: &str) -> bool {
    match patterns {
        HostPatterns::HashedName { salt, hash } => {
            let Ok(mac) = <hmac::Hmac<sha1::Sha1> as KeyInit>::new_from_slice(salt) else {
                return false;
            };
            mac.chain_update(name.as_bytes()).verify_slice(hash).is_ok()
        }
        HostPatterns::Patterns(ps) => {
            let mut hit = false;
            for p in ps {
                if let Some(neg) = p.strip_prefix('!') {
                    if wildmatch(neg, name) {
                        return false;
                    }
                } else if wildmatch(p, name) {
                    hit = true;
                }
            }
            hit
        }
    }
}

/// Every line of `files` that names `name`; missing files are empty, lines
/// that do not parse are skipped (as OpenSSH does).
pub fn lookup(files: &[PathBuf], name: &str) -> Result<Vec<Known>, TransportError> {
    let mut out = Vec::new();
    for f in files {
        let text = match crate::localfile::read_to_string(f, crate::localfile::Kind::KnownHosts) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(TransportError::Setup(format!(
                    "cannot read known_hosts {}: {e}",
                    f.display()
                )));
            }
        };
        for (i, l) in text.lines().enumerate() {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') || !host_field_names(l, name) {
                continue;
            }
            if let Ok(entry) = l.parse::<Entry>()
                && names(entry.host_patterns(), name)
            {
                out.push(Known {
                    file: f.clone(),
                    line: i + 1,
                    entry,
                });
            }
        }
    }
    Ok(out)
}

/// Whether a line's host field (after its marker, if any) could name
/// `name`: checked before the line's key is decoded, so that a lookup costs
/// a key parse only for the lines of this host, not for every line of the
/// file (every host of a cluster looks its name up in the same file). A
/// field that does not parse is left to the full parse, which skips it.
fn host_field_names(line: &str, name: &str) -> bool {
    let mut fields = line.split_ascii_whitespace();
    let field = match fields.next() {
        Some(m) if m.starts_with('@') => fields.next(),
        f => f,
    };
    match field.map(str::parse::<HostPatterns>) {
        Some(Ok(p)) => names(&p, name),
        _ => true,
    }
}

fn family(a: &Algorithm) -> std::mem::Discriminant<Algorithm> {
    std::mem::discriminant(a)
}

pub fn fingerprint(k: &PublicKey) -> String {
    format!(
        "{} {}",
        k.algorithm().as_str(),
        k.fingerprint(HashAlg::Sha256)
    )
}

/// The host key algorithms to offer, as OpenSSH orders them: only those
/// `HostKeyAlgorithms` allows; unless that was set in the config, the kinds
/// of keys already known for the host first, and certificates first when a
/// `@cert-authority` line names the host.
pub fn preferred(known: &[Known], e: &Endpoint) -> russh::Preferred {
    let mut p = russh::Preferred::default();
    let allowed = |name: &str| {
        e.host_key_algorithms
            .as_ref()
            .is_none_or(|l| l.iter().any(|a| a == name))
    };
    let mut keys: Vec<Algorithm> = p
        .key
        .iter()
        .filter(|a| allowed(a.as_str()))
        .cloned()
        .collect();
    if let Some(order) = e
        .host_key_algorithms
        .as_ref()
        .filter(|_| e.host_key_algorithms_set)
    {
        // the operator's own order (OpenSSH reorders only its default)
        keys.sort_by_key(|a| order.iter().position(|o| o == a.as_str()));
    } else {
        let plain: Vec<&Known> = known
            .iter()
            .filter(|k| k.entry.marker().is_none())
            .collect();
        keys.sort_by_key(|a| {
            !plain
                .iter()
                .any(|k| family(&k.entry.public_key().algorithm()) == family(a))
        });
    }
    if known
        .iter()
        .any(|k| k.entry.marker() == Some(&Marker::CertAuthority))
    {
        let certs: Vec<Algorithm> = keys
            .iter()
            .filter(|a| allowed(&a.to_certificate_type()))
            .cloned()
            .collect();
        p.host_key_certificates = certs.into();
    }
    p.key = keys.into();
    p
}

/// The host key the server presented.
pub enum Presented<'a> {
    Key(&'a PublicKey),
    Cert(&'a Certificate),
}

/// Serialises appends to known_hosts files.
static LEARN_LOCK: Mutex<()> = Mutex::new(());

/// What a host key check concluded: trusted, or to be recorded (with
/// --accept-new-host-keys or StrictHostKeyChecking accept-new / no) by
/// [`learn`], which writes and so runs where blocking is allowed.
#[derive(Debug)]
pub enum Verdict {
    Trusted,
    Learn {
        file: PathBuf,
        name: String,
        key: Box<PublicKey>,
        hash: bool,
    },
}

/// The known_hosts files `e` consults, user files first.
pub fn files(e: &Endpoint) -> Vec<PathBuf> {
    let mut files = e.user_known_hosts.clone();
    files.extend(e.global_known_hosts.iter().cloned());
    files
}

/// `e`'s RevokedHostKeys file, checked first, as OpenSSH's verify_host_key
/// does (reads the file: blocking).
pub fn check_revoked(e: &Endpoint, presented: &Presented) -> Result<(), TransportError> {
    if let Some(f) = &e.revoked_host_keys {
        let (kd, cert) = match presented {
            Presented::Key(k) => (k.key_data(), None),
            Presented::Cert(c) => (c.public_key(), Some(*c)),
        };
        super::revoked::check(f, kd, cert).map_err(|msg| TransportError::HostCert {
            host: e.known_hosts_name(),
            msg: format!("REVOKED HOST KEY: {msg}"),
        })?;
    }
    Ok(())
}

/// Check what `e` presented against the known_hosts lines `find` gives for
/// a name (the lines of [`files`] naming it); with `accept_new` (or
/// StrictHostKeyChecking accept-new / no) a host with no key on record is
/// to be recorded as OpenSSH would record it. RevokedHostKeys is
/// [`check_revoked`]'s.
pub fn judge(
    e: &Endpoint,
    presented: Presented,
    accept_new: bool,
    find: &dyn Fn(&str) -> Vec<Known>,
) -> Result<Verdict, TransportError> {
    let name = e.known_hosts_name();
    let known = find(&name);
    let revoked = |k: &PublicKey| {
        known.iter().find(|x| {
            x.entry.marker() == Some(&Marker::Revoked)
                && x.entry.public_key().key_data() == k.key_data()
        })
    };
    let mut cert_failed = None;
    let key: PublicKey = match presented {
        Presented::Key(k) => k.clone(),
        Presented::Cert(c) => {
            let ca = PublicKey::from(c.signature_key().clone());
            let own = PublicKey::from(c.public_key().clone());
            for k in [&ca, &own] {
                if let Some(r) = revoked(k) {
                    return Err(revoked_err(&name, k, r));
                }
            }
            let trusted = known.iter().any(|x| {
                x.entry.marker() == Some(&Marker::CertAuthority)
                    && x.entry.public_key().key_data() == ca.key_data()
            });
            if trusted {
                match cert_ok(e, c, &ca) {
                    Ok(()) => return Ok(Verdict::Trusted),
                    // OpenSSH retries with the certificate's plain key; a
                    // plain key on record may still let it in, nothing else
                    Err(msg) => cert_failed = Some(msg),
                }
            }
            // No authority on record for it: the certificate's key is
            // checked as a plain key (as OpenSSH does).
            own
        }
    };
    if let Some(r) = revoked(&key) {
        return Err(revoked_err(&name, &key, r));
    }
    let plain: Vec<&Known> = known
        .iter()
        .filter(|k| k.entry.marker().is_none())
        .collect();
    if plain
        .iter()
        .any(|k| k.entry.public_key().key_data() == key.key_data())
    {
        return Ok(Verdict::Trusted);
    }
    if let Some(k) = plain
        .iter()
        .find(|k| family(&k.entry.public_key().algorithm()) == family(&key.algorithm()))
        .or(plain.first())
    {
        return Err(TransportError::HostKeyMismatch {
            host: name,
            seen: fingerprint(&key),
            expected: fingerprint(k.entry.public_key()),
            file: k.file.display().to_string(),
            line: k.line,
        });
    }
    // Nothing on record under `[host]:port`: OpenSSH looks again under the
    // bare host name, only to accept a key listed there (sshconnect.c
    // check_host_key, "checking without port identifier").
    if e.host_key_alias.is_none() && e.port != 22 {
        let bare = find(&e.host);
        let listed = |k: &&Known| {
            k.entry.marker().is_none() && k.entry.public_key().key_data() == key.key_data()
        };
        let revoked_bare = bare.iter().any(|k| {
            k.entry.marker() == Some(&Marker::Revoked)
                && k.entry.public_key().key_data() == key.key_data()
        });
        if !revoked_bare && bare.iter().any(|k| listed(&k)) {
            return Ok(Verdict::Trusted);
        }
    }
    if let Some(msg) = cert_failed {
        return Err(TransportError::HostCert { host: name, msg });
    }
    let file = e.user_known_hosts.first().cloned();
    if accept_new || matches!(e.strict, Strict::AcceptNew | Strict::No) {
        let Some(file) = file else {
            return Err(TransportError::Setup(format!(
                "cannot record the host key of {name}: UserKnownHostsFile is none"
            )));
        };
        return Ok(Verdict::Learn {
            file,
            name,
            key: Box::new(key),
            hash: e.hash_known_hosts,
        });
    }
    let file = file
        .map(|f| f.display().to_string())
        .unwrap_or_else(|| "a known_hosts file".into());
    let scan = if e.host_key_alias.is_some() {
        format!(
            "ssh-keyscan -p {} {} | sed 's/^[^ ]*/{name}/' >> {file}",
            e.port, e.host
        )
    } else if e.port == 22 {
        format!("ssh-keyscan {} >> {file}", e.host)
    } else {
        format!("ssh-keyscan -p {} {} >> {file}", e.port, e.host)
    };
    Err(TransportError::UnknownHostKey {
        host: name,
        seen: fingerprint(&key),
        file,
        scan,
    })
}

fn revoked_err(name: &str, k: &PublicKey, r: &Known) -> TransportError {
    TransportError::HostCert {
        host: name.to_string(),
        msg: format!(
            "the key {} is marked @revoked in {} line {}: refusing it",
            fingerprint(k),
            r.file.display(),
            r.line
        ),
    }
}

/// A host certificate signed by a trusted authority, as OpenSSH's
/// sshkey_cert_check_host checks it: a host certificate, valid now, naming
/// this host among its principals (exactly, no patterns), no critical
/// options, signed with an algorithm `CASignatureAlgorithms` allows. One
/// stricter than OpenSSH 9.2: a certificate without principals is refused
/// (OpenSSH 9.2 takes it for any host; see docs/ssh-trust.md).
fn cert_ok(e: &Endpoint, c: &Certificate, ca: &PublicKey) -> Result<(), String> {
    if c.cert_type() != CertType::Host {
        return Err("the server presented a user certificate as its host key".into());
    }
    c.validate([&ca.fingerprint(HashAlg::Sha256)])
        .map_err(|err| format!("its host certificate is not valid now or not signed by the authority on record ({err})"))?;
    let want = e.principal_name();
    let ps = c.valid_principals();
    if ps.is_empty() {
        return Err(
            "its host certificate lists no principals (valid for any host): kwinctl refuses a certificate without principals"
                .into(),
        );
    }
    if !ps.iter().any(|p| p == want) {
        return Err(format!(
            "its host certificate names {} but not {want}",
            ps.join(", ")
        ));
    }
    if !c.critical_options().is_empty() {
        let names: Vec<&str> = c.critical_options().keys().map(String::as_str).collect();
        return Err(format!(
            "its host certificate has critical options ({}), which no host certificate may carry",
            names.join(", ")
        ));
    }
    let sig = c.signature().algorithm();
    if let Some(allowed) = &e.ca_signature_algorithms
        && !allowed.iter().any(|a| a == sig.as_str())
    {
        return Err(format!(
            "its host certificate is signed with {}, which CASignatureAlgorithms does not allow ({})",
            sig.as_str(),
            allowed.join(",")
        ));
    }
    Ok(())
}

/// Append `name key` (hashed as `|1|salt|hmac` when asked) to `file`, as
/// OpenSSH's add_host_to_hostfile writes it.
pub fn learn(file: &Path, name: &str, key: &PublicKey, hash: bool) -> Result<(), TransportError> {
    let fail = |e: String| {
        TransportError::Setup(format!(
            "cannot record the host key of {name} in {}: {e}",
            file.display()
        ))
    };
    let host = if hash {
        let mut salt = [0u8; 20];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut salt))
            .map_err(|e| fail(e.to_string()))?;
        let mac = <hmac::Hmac<sha1::Sha1> as KeyInit>::new_from_slice(&salt)
            .map_err(|e| fail(e.to_string()))?
            .chain_update(name.as_bytes())
            .finalize()
            .into_bytes();
        let b64 = base64::engine::general_purpose::STANDARD;
        format!("|1|{}|{}", b64.encode(salt), b64.encode(mac))
    } else {
        name.to_string()
    };
    let mut key = key.clone();
    key.set_comment("");
    let line = format!(
        "{host} {}\n",
        key.to_openssh()
            .map_err(|e| fail(e.to_string()))?
            .trim_end()
    );
    let _g = LEARN_LOCK.lock().unwrap();
    if let Some(d) = file.parent() {
        std::fs::create_dir_all(d).map_err(|e| fail(e.to_string()))?;
    }
    let ends_clean = crate::localfile::read(file, crate::localfile::Kind::KnownHosts)
        .map(|b| b.is_empty() || b.ends_with(b"\n"))
        .unwrap_or(true);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| fail(e.to_string()))?;
    let text = if ends_clean {
        line
    } else {
        format!("\n{line}")
    };
    f.write_all(text.as_bytes())
        .map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_as_openssh_matches_them() {
        let p = |s: &str| HostPatterns::Patterns(s.split(',').map(str::to_string).collect());
        assert!(names(&p("10.0.0.*,!10.0.0.5"), "10.0.0.4"));
        assert!(!names(&p("10.0.0.*,!10.0.0.5"), "10.0.0.5"));
        assert!(names(&p("[web?]:2222"), "[web1]:2222"));
        assert!(!names(&p("web1"), "[web1]:2222"));
        assert!(names(&p("WEB1"), "web1"));
        assert!(wildmatch("*", ""));
        assert!(!wildmatch("a*b", "acbd"));
        // without wildcards: what the matcher says, ASCII or not
        for (p, s) in [
            ("10.0.0.1", "10.0.0.1"),
            ("10.0.0.1", "10.0.0.10"),
            ("Web1", "wEB1"),
            ("[web1]:22", "[WEB1]:22"),
            ("", ""),
            ("a", ""),
            ("\u{212a}ey", "key"),
            ("ÉTÉ", "été"),
        ] {
            let m = wildmatch::WildMatch::new_case_insensitive(p).matches(s);
            assert_eq!(wildmatch(p, s), m, "{p:?} {s:?}");
        }
    }

    #[test]
    fn hashed_entries_written_and_found() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("kh");
        let key: PublicKey =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkLc8WgqEjTYqi0yBkJYHP0zTk0J6vdBCzDqMwCV4Bo"
                .parse()
                .unwrap();
        learn(&f, "[10.0.0.1]:2222", &key, true).unwrap();
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.starts_with("|1|"), "{text}");
        assert!(!text.contains("10.0.0.1"), "{text}");
        let found = lookup(std::slice::from_ref(&f), "[10.0.0.1]:2222").unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].entry.public_key().key_data(), key.key_data());
        assert!(lookup(&[f], "10.0.0.1").unwrap().is_empty());
    }

    #[test]
    fn only_the_lines_naming_the_host_are_taken_markers_and_all() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("kh");
        let k = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkLc8WgqEjTYqi0yBkJYHP0zTk0J6vdBCzDqMwCV4Bo";
        std::fs::write(
            &f,
            format!(
                "10.0.0.1 {k}\n10.0.0.2 {k}\n@cert-authority 10.0.0.* {k}\n@revoked 10.0.0.9,10.0.0.2 {k}\n\
                 10.0.0.2 not-a-key\n10.0.0.*,!10.0.0.2 {k}\n"
            ),
        )
        .unwrap();
        let lines = |name: &str| -> Vec<usize> {
            lookup(std::slice::from_ref(&f), name)
                .unwrap()
                .iter()
                .map(|k| k.line)
                .collect()
        };
        // (line 5 names it but does not parse: skipped, as OpenSSH does)
        assert_eq!(lines("10.0.0.2"), [2, 3, 4]);
        assert_eq!(lines("10.0.0.1"), [1, 3, 6]);
        assert!(host_field_names("@revoked 10.0.0.9,10.0.0.2 x", "10.0.0.2"));
        assert!(!host_field_names("10.0.0.1 x", "10.0.0.2"));
    }
}
