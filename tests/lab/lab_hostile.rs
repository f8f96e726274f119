//! Hostile hosts and secrets, on real lab hosts: nothing a host prints
//! reaches the operator's terminal raw (a failed probe's stderr, a failed
//! action's stderr, a note built from a device name, a Windows host's
//! Docker version), in text and in JSON; no secret reaches any output or
//! file in any form; files kwinctl keeps are owner-only even when they were
//! looser; a host printing more than kwinctl reads is told so.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::lab::{Lab, require_root};
use common::{host, kwinctl, kwinctl_env, summary, text, write};

/// Terminal control sequences of every kind: a title (OSC 0), a clipboard
/// write (OSC 52), a screen clear (CSI), an 8-bit CSI, a bell, and a bidi
/// override.
const HOSTILE: &str =
    "\x1b]0;PWNED\x07\x1b[2J\x1b]52;c;ZWNobyBwd25lZA==\x07\u{9b}31m\u{202e}gnp.exe";

/// The bytes of HOSTILE's controls, none of which may reach an output.
const RAW: &[&str] = &["\x1b", "\x07", "\u{9b}", "\u{202e}"];

fn assert_clean(what: &str, out: &str) {
    for r in RAW {
        assert!(
            !out.contains(r),
            "{what}: {:?} reached the output:\n{out}",
            r
        );
    }
}

fn all_output(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn nothing_a_host_prints_reaches_the_terminal_raw() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(3, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let esc = HOSTILE.replace('\x1b', "\\033").replace('\x07', "\\007");
    // 1. h1's login prints the sequences to stderr and fails: the probe's
    //    stderr is in the error
    let rc = lab.dir().join("hosts/h1/root/.bashrc");
    let rc_text = std::fs::read_to_string(&rc).unwrap_or_default();
    write(&rc, &format!("printf '{esc}' >&2; exit 3\n{rc_text}"));
    // 2. h2's `ip` fails an action with them
    lab.fake_command(
        "h2",
        "ip",
        &format!(
            "#!/bin/sh\ncase \"$*\" in *replace*|*-batch*) printf 'RTNETLINK: {esc}\\n' >&2; exit 2;; esac\nexec /usr/bin/ip \"$@\"\n"
        ),
    );
    assert!(lab.exec("h2", "ip route flush proto 198").status.success());
    // 3. h3 has a device whose name turns text around, with a route inside
    //    the cluster CIDR that is not kwinctl's: the note names it
    let dev = "x\u{202e}y";
    let st = lab.exec(
        "h3",
        &format!(
            "ip link add '{dev}' type bridge && ip link set '{dev}' up && ip route add 198.19.200.0/24 dev '{dev}' proto static"
        ),
    );
    assert!(st.status.success(), "{}", text(&st));
    // 4. win1 reports a Docker version with them (the note names it)
    let sp = lab.win_state("win1");
    let mut ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    ws["docker_version"] = format!("17.06{HOSTILE}").into();
    write(&sp, &ws.to_string());

    for args in [
        vec!["up", "-i", &i],
        vec!["up", "-i", &i, "--output", "json"],
    ] {
        let o = kwinctl(&args);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let out = all_output(&o);
        assert_clean(&args.join(" "), &out);
        if args.len() == 3 {
            // shown, escaped, where the host said it
            assert!(out.contains("\\x1b]0;PWNED\\x07"), "{out}");
            assert!(out.contains("\\u202e"), "{out}");
        } else {
            let s = summary(&o);
            let e = host(&s, "h1")["error"].as_str().unwrap();
            assert!(e.contains("PWNED"), "{e}");
            // every string of every event, decoded as a script would
            // print it: escaped as the text output escapes it
            let decoded = jq_strings(&o.stdout);
            assert_clean("jq -r on --output json", &decoded);
            assert!(decoded.contains("\\x1b]0;PWNED\\x07"), "{decoded}");
            assert!(decoded.contains("\\x1b]52;c;"), "{decoded}");
            assert!(decoded.contains("\\u202e"), "{decoded}");
        }
    }
    // the runs' summary.json, decoded
    let mut summaries = 0;
    for entry in walk(&lab.dir().join("inventory.kwinctl-runs")) {
        if entry.file_name().is_some_and(|n| n == "summary.json") {
            summaries += 1;
            let decoded = jq_strings(&std::fs::read(&entry).unwrap());
            assert_clean(&entry.display().to_string(), &decoded);
        }
    }
    assert!(summaries >= 2, "no summary.json in the run records");
    // the run records are safe to read on a terminal too
    for entry in walk(&lab.dir().join("inventory.kwinctl-runs")) {
        let t = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        assert_clean(&entry.display().to_string(), &t);
    }
    // verify, too
    let o = kwinctl(&["verify", "-i", &i]);
    assert_clean("verify", &all_output(&o));
}

/// Every string in the JSON documents of `json` (keys too), decoded by
/// `jq -r` as an operator's script would print them.
fn jq_strings(json: &[u8]) -> String {
    use std::io::Write;
    let mut jq = std::process::Command::new("jq")
        .args(["-r", ".. | strings, (objects | keys[])"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jq (scripts/setup.sh installs it)");
    jq.stdin.take().unwrap().write_all(json).unwrap();
    let o = jq.wait_with_output().unwrap();
    assert!(o.status.success(), "jq: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The kubeconfig (with its token and client key) reaches the Windows host
/// but no output and no file of the operator's, in any form; a secret a host
/// echoes, with `"` and `\` in it, is masked everywhere too; files kwinctl
/// keeps are owner-only even when they were looser.
#[test]
fn no_secret_is_kept_or_printed_and_files_are_private() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let i = lab.inv();
    // a token with a quote and a backslash: its JSON form differs
    let token = r#"TOK"EN\SECRET-9b1e7d2a"#;
    let key_pem =
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKEY-SECRET\n-----END EC PRIVATE KEY-----\n";
    let key_b64 = base64_of(key_pem.as_bytes());
    // the lab's kubeconfig (its cluster, placeholder CA) with this user
    let kc = lab.dir().join("kubeconfig");
    let lab_kc = std::fs::read_to_string(&kc).unwrap();
    let users = lab_kc
        .find("users:")
        .expect("the lab's kubeconfig has users");
    let contexts = lab_kc.find("contexts:").expect("and contexts");
    let kubeconfig = format!(
        "{}users:\n- name: nodes\n  user:\n    token: '{token}'\n    client-key-data: {key_b64}\n{}",
        &lab_kc[..users],
        &lab_kc[contexts..]
    );
    write(&kc, &kubeconfig);
    // looser modes left by someone: they are made owner-only
    let lock = lab.dir().join("inventory.kwinctl.lock");
    let runs = lab.dir().join("inventory.kwinctl-runs");
    let last = lab.dir().join("inventory.kwinctl-last-up.json");
    std::fs::write(&lock, "").unwrap();
    std::fs::write(&last, "{}").unwrap();
    std::fs::create_dir(&runs).unwrap();
    for (p, m) in [(&lock, 0o644), (&runs, 0o755), (&last, 0o644)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    // h2 echoes the token on failing
    let secret = token.to_string();
    lab.fake_command(
        "h2",
        "ip",
        &format!(
            "#!/bin/sh\ncase \"$*\" in *replace*|*-batch*) printf '%s\\n' '{}' >&2; exit 2;; esac\nexec /usr/bin/ip \"$@\"\n",
            secret.replace('\'', "'\\''")
        ),
    );
    let mut outputs = String::new();
    for args in [
        vec!["up", "-i", &i],
        vec!["up", "-i", &i, "--output", "json"],
    ] {
        let o = kwinctl_env(&args, &[]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        outputs += &all_output(&o);
    }
    let o = kwinctl(&["render", "-i", &i, "--host", "win1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    outputs += &all_output(&o);
    assert!(
        outputs.contains("<secret file C:\\k\\config, sha256 "),
        "{outputs}"
    );
    // and the kubeconfig did reach win1
    let ws = std::fs::read_to_string(lab.win_state("win1")).unwrap();
    assert!(ws.contains("C:\\\\k\\\\config"), "{ws}");
    let json_secret = serde_json::to_string(&secret).unwrap();
    let forms = [
        key_b64.clone(),
        "KEY-SECRET".to_string(),
        base64_of(kubeconfig.as_bytes()),
        secret.clone(),
        json_secret[1..json_secret.len() - 1].to_string(),
    ];
    let mut places = vec![("output".to_string(), outputs)];
    for f in walk(lab.dir())
        .into_iter()
        .filter(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("inventory.kwinctl")
        })
        .chain(walk(&runs))
    {
        places.push((
            f.display().to_string(),
            String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned(),
        ));
    }
    for (place, content) in &places {
        for form in &forms {
            assert!(!content.contains(form.as_str()), "{place} holds {form:?}");
        }
    }
    for (p, m) in [
        (lock, 0o600),
        (runs, 0o700),
        (last, 0o600),
        (lab.dir().join("inventory.kwinctl-state.json"), 0o600),
    ] {
        let got = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(got, m, "{}", p.display());
    }
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A host whose routing table makes the probe print more than kwinctl reads
/// (16 MiB) is told so, with the size and what to look at — not a
/// misleading "output stops before its end".
#[test]
fn a_host_printing_more_than_kwinctl_reads_is_told_so() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    // 250,000 routes: `ip -j` prints about 20 MB of them
    let gw = lab.ip("h1");
    let batch = lab.dir().join("routes.batch");
    let mut b = String::new();
    for n in 0..250_000u32 {
        b += &format!(
            "route add 10.{}.{}.{}/32 via {gw} proto static\n",
            (n >> 16) & 255,
            (n >> 8) & 255,
            n & 255
        );
    }
    write(&batch, &b);
    let st = lab.exec("h2", &format!("ip -batch {}", batch.display()));
    assert!(st.status.success(), "{}", text(&st));
    let o = kwinctl(&["verify", "-i", &i, "--limit", "h2", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let e = host(&s, "h2")["error"].as_str().unwrap();
    assert!(
        e.contains("more than kwinctl reads (16777216 bytes")
            && e.contains("routing table")
            && e.contains("wc -l"),
        "{e}"
    );
    // a login that never stops printing: cut at the cap, long before
    // --timeout, and blamed on the login, not on the routing table
    let rc = lab.dir().join("hosts/h1/root/.bashrc");
    let rc_text = std::fs::read_to_string(&rc).unwrap_or_default();
    write(&rc, &format!("yes kwinctl-junk\n{rc_text}"));
    let start = std::time::Instant::now();
    let o = kwinctl(&[
        "verify",
        "-i",
        &i,
        "--limit",
        "h1",
        "--timeout",
        "120",
        "--output",
        "json",
    ]);
    let took = start.elapsed();
    write(&rc, &rc_text);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let e = host(&s, "h1")["error"].as_str().unwrap();
    assert!(
        e.contains("more than kwinctl reads")
            && e.contains("before the probe began")
            && !e.contains("routing table"),
        "{e}"
    );
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
}
