//! The secrets of a run, in one registry, and their redaction: every output
//! (terminal, JSON events, run records, the last-run record, errors) goes
//! through [`redact`], which replaces every form a secret can take there —
//! as it is, JSON-escaped, base64 (as an upload carries a file), and base64
//! of its UTF-16LE form (as `-EncodedCommand` carries text) — with a mask.
//! A file uploaded as a secret (the kubeconfig) is replaced, wherever its
//! base64 appears, by `<secret file PATH, sha256 …>`.
//!
//! The registry is process-wide on purpose: the secrets are the run's, and
//! every writer of output must see all of them without being handed them.

use std::borrow::Cow;
use std::sync::{OnceLock, RwLock};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// What a secret is replaced with.
pub const MASK: &str = "********";

/// Lines of a secret file shorter than this are not masked on their own
/// (`users:` encoded is no secret, and masking it would hide harmless text).
const MIN_LINE: usize = 16;

/// The registered forms, and a matcher of all of them at once.
struct Registry {
    /// (form, replacement), longest form first.
    forms: Vec<(String, String)>,
    /// Finds whether any form occurs in a text, in one pass over it (most
    /// texts hold none: a probe's transcript, a report). Built by the first
    /// [`redact`] after a form is added; `None` while there is no form.
    any: OnceLock<Option<AhoCorasick>>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    forms: Vec::new(),
    any: OnceLock::new(),
});

/// The matcher of every form. Leftmost-first: whether a text holds a form
/// does not depend on the kind, and this one lets the search skip ahead
/// with SIMD (Teddy); a contiguous NFA, as the DFA the builder would pick
/// for a few dozen forms costs more to build (a kubeconfig's lines are
/// long) than the run's searches. Should it not build (it has no reason
/// to), every text is searched form by form instead.
fn matcher(forms: &[(String, String)]) -> Option<AhoCorasick> {
    if forms.is_empty() {
        return None;
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .kind(Some(AhoCorasickKind::ContiguousNFA))
        .build(forms.iter().map(|(f, _)| f))
        .ok()
}

fn add(form: String, replacement: &str) {
    if form.is_empty() {
        return;
    }
    let mut r = REGISTRY.write().unwrap();
    if r.forms.iter().any(|(f, _)| *f == form) {
        return;
    }
    r.forms.push((form, replacement.to_string()));
    // Longest first, so a secret containing another is replaced whole.
    r.forms.sort_by_key(|(f, _)| std::cmp::Reverse(f.len()));
    r.any = OnceLock::new();
}

/// The forms a value takes in kwinctl's outputs.
fn forms(value: &str) -> Vec<String> {
    let json = serde_json::to_string(value).expect("a string serializes");
    let json = json[1..json.len() - 1].to_string();
    let utf16: Vec<u8> = value.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    vec![
        value.to_string(),
        json,
        STANDARD.encode(value.as_bytes()),
        STANDARD.encode(utf16),
    ]
}

/// Register a secret value (a password, a passphrase, a token, a key).
/// Any length counts: a short secret masks every place it appears, however
/// much else that masks (better than showing it).
pub fn register(value: &str) {
    let value = value.trim_end_matches(['\r', '\n']);
    for f in forms(value) {
        add(f, MASK);
    }
}

/// Register a file whose content is secret (it is uploaded inside a
/// script): its base64, wherever it appears, becomes a marker naming the
/// file and its hash, never its bytes.
pub fn register_file(bytes: &[u8], shown_as: &str) {
    let marker = format!(
        "<secret file {shown_as}, sha256 {}>",
        crate::hash::sha256_bytes(bytes)
    );
    add(STANDARD.encode(bytes), &marker);
    if let Ok(text) = std::str::from_utf8(bytes) {
        add(text.to_string(), &marker);
        // a script may carry the file line by line, each line encoded
        for line in text.lines().filter(|l| l.trim().len() >= MIN_LINE) {
            add(STANDARD.encode(line), &marker);
            add(STANDARD.encode(format!("{line}\n")), &marker);
        }
    }
}

/// `s` with every registered secret replaced; borrowed when there is none
/// in it (a large run's summary is megabytes: no needless copy).
pub fn redact(s: &str) -> Cow<'_, str> {
    let r = REGISTRY.read().unwrap();
    // No form in `s`: nothing below would replace anything.
    let any = r.any.get_or_init(|| matcher(&r.forms));
    if any.as_ref().is_some_and(|m| !m.is_match(s)) {
        return Cow::Borrowed(s);
    }
    let mut out = Cow::Borrowed(s);
    for (form, replacement) in r.forms.iter() {
        if out.contains(form.as_str()) {
            out = Cow::Owned(out.replace(form.as_str(), replacement));
        }
    }
    out
}

/// The environment variables a child that needs no secret (`ssh -G`) must
/// not get: the key passphrase, the default WinRM password variable, and
/// any variable whose whole value is a registered secret (an inventory's
/// `winrm.password_env`).
pub fn secret_variables() -> Vec<std::ffi::OsString> {
    std::env::vars_os()
        .filter(|(k, v)| {
            k == "KWINCTL_SSH_PASSPHRASE"
                || k == "KWINCTL_WINRM_PASSWORD"
                || v.to_str().is_some_and(is_secret)
        })
        .map(|(k, _)| k)
        .collect()
}

/// Whether `value` is, whole, a registered secret (as an environment
/// variable that holds a password is).
pub fn is_secret(value: &str) -> bool {
    let v = value.trim_end_matches(['\r', '\n']);
    !v.is_empty()
        && REGISTRY
            .read()
            .unwrap()
            .forms
            .iter()
            .any(|(f, r)| r == MASK && f == v)
}

/// A secret value kwinctl holds for the run (a bootstrap token's secret):
/// registered for redaction when made, shown as the mask by `Debug`, read
/// only through [`Secret::expose`] where it must go into a script.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Hold `value`, registering it so that no output shows it.
    pub fn new(value: impl Into<String>) -> Secret {
        let value = value.into();
        register(&value);
        Secret(value)
    }
    /// The value itself, for the one place it is sent to.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({MASK})")
    }
}

/// Whether any secret is registered.
pub fn any() -> bool {
    !REGISTRY.read().unwrap().forms.is_empty()
}

/// The secret values a kubeconfig holds: tokens, passwords, client keys
/// (base64 as written, and decoded) of every user, auth providers' secrets
/// too. Read as YAML (a value may be quoted or escaped); a kubeconfig that
/// is not YAML yields nothing here (its whole file is still a secret).
pub fn in_kubeconfig(text: &str) -> Vec<String> {
    const SECRET: &[&str] = &[
        "token",
        "password",
        "client-key-data",
        "id-token",
        "refresh-token",
        "access-token",
        "client-secret",
    ];
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match v.as_str() {
                        Some(s) if SECRET.contains(&k.as_str()) && !s.is_empty() => {
                            out.push(s.to_string());
                            if let Ok(decoded) = STANDARD.decode(s)
                                && let Ok(text) = String::from_utf8(decoded)
                            {
                                out.push(text);
                            }
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_saphyr::from_str::<serde_json::Value>(text)
        && let Some(users) = v.get("users")
    {
        walk(users, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, as the registry is process-wide.
    #[test]
    fn every_form_of_a_secret_is_masked() {
        register(r#"Pp-"SEC\RET-77"#);
        register("ǂ7");
        let json = serde_json::to_string(r#"say Pp-"SEC\RET-77"#).unwrap();
        assert!(!redact(&json).contains("SEC"), "{}", redact(&json));
        assert!(redact("a Pp-\"SEC\\RET-77 b").contains(MASK));
        let b64 = STANDARD.encode(r#"Pp-"SEC\RET-77"#);
        assert_eq!(redact(&format!("[{b64}]")), format!("[{MASK}]"));
        let utf16: Vec<u8> =
            r#"Pp-"SEC\RET-77"#.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        assert!(redact(&STANDARD.encode(utf16)).contains(MASK));
        // a short secret is masked too
        assert_eq!(redact("key ǂ7"), format!("key {MASK}"));
        // a secret file becomes a marker, wherever its base64 is
        let kubeconfig = b"apiVersion: v1\nusers:\n- name: k\n  user:\n    token: TOKEN-SECRET-9\n";
        register_file(kubeconfig, r"C:\k\config");
        for t in in_kubeconfig(std::str::from_utf8(kubeconfig).unwrap()) {
            register(&t);
        }
        let script = format!("FromBase64String('{}')", STANDARD.encode(kubeconfig));
        let out = redact(&script);
        assert!(out.contains(r"<secret file C:\k\config, sha256 "), "{out}");
        assert!(!out.contains(&STANDARD.encode(kubeconfig)));
        assert_eq!(redact("echo TOKEN-SECRET-9"), format!("echo {MASK}"));
        // and a line of it, encoded on its own
        let line = STANDARD.encode("    token: TOKEN-SECRET-9\n");
        let out = redact(&line);
        assert!(
            out.starts_with("<secret file") && !out.contains(&line),
            "{out}"
        );
        assert!(any());
        // a text holding none is given back as it is, not copied
        assert!(matches!(redact("nothing to hide here"), Cow::Borrowed(_)));
        // a secret registered after the others is found too (the matcher
        // of every form is built again)
        register("later-secret-5521");
        assert_eq!(redact("x later-secret-5521"), format!("x {MASK}"));
    }

    #[test]
    fn a_held_secret_is_registered_and_never_debug_printed() {
        let s = Secret::new("zq9x7w3v5u1t0s2r");
        assert_eq!(format!("{s:?}"), format!("Secret({MASK})"));
        assert_eq!(s.expose(), "zq9x7w3v5u1t0s2r");
        assert_eq!(redact("t=zq9x7w3v5u1t0s2r"), format!("t={MASK}"));
    }

    #[test]
    fn kubeconfig_secrets_are_found() {
        let kc = "users:\n- name: a\n  user:\n    token: \"a\\\"bc\"\n    client-key-data: aGVsbG8=\n    client-certificate-data: Y2VydA==\n";
        let s = in_kubeconfig(kc);
        assert!(s.contains(&"a\"bc".to_string()), "{s:?}");
        assert!(s.contains(&"aGVsbG8=".to_string()));
        assert!(s.contains(&"hello".to_string()));
        assert!(
            !s.iter().any(|x| x.contains("Y2VydA")),
            "certificates are public"
        );
    }
}
