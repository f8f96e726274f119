//! `reset` asks first: on a terminal it shows what it would remove and
//! waits for "yes"; without one it needs `--yes`; `plan --reset` previews.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::lab::{Lab, require_root};
use common::{host, kwinctl, summary, text};

/// `kwinctl args` on a pseudo-terminal (util-linux `script`), `answer`
/// typed on it.
fn on_a_terminal(args: &[&str], answer: &str) -> (Option<i32>, String) {
    let cmd = std::iter::once(common::bin())
        .chain(args.iter().map(|a| format!("'{a}'")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux)");
    // typed ahead: the terminal keeps it until kwinctl reads its answer
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(answer.as_bytes());
    // bounded: killed if it has not finished in two minutes
    let pid = child.id().to_string();
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watch.recv_timeout(Duration::from_secs(120)).is_err() {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
    });
    let o = child.wait_with_output().unwrap();
    drop(stdin);
    let _ = done.send(());
    watchdog.join().unwrap();
    (o.status.code(), text(&o))
}

#[test]
fn reset_shows_what_it_removes_and_asks_or_needs_yes() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let has_routes = |h: &str| lab.routes(h).contains("proto 198");
    assert!(has_routes("h2"));

    // no terminal, no --yes: refused before anything is contacted
    let o = kwinctl(&["reset", "-i", &i, "--limit", "h2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("pass --yes"), "{}", text(&o));
    assert!(has_routes("h2"));

    // plan --reset lists what would go, and changes nothing
    let o = kwinctl(&[
        "plan", "--reset", "-i", &i, "--limit", "h2", "--output", "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let h2 = host(&s, "h2");
    assert_eq!(h2["status"], "pending", "{s}");
    let actions: Vec<&str> = h2["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "planned")
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert!(actions.iter().any(|a| a.contains("route")), "{actions:?}");
    assert!(has_routes("h2"));

    // on a terminal: the preview, the question; "no" changes nothing
    let (code, out) = on_a_terminal(&["reset", "-i", &i, "--limit", "h2"], "no\n");
    assert_eq!(code, Some(1), "{out}");
    if std::env::var_os("KWINCTL_SHOW").is_some() {
        eprintln!("{out}");
    }
    assert!(
        out.contains("would ") && out.contains("Type yes to continue"),
        "{out}"
    );
    assert!(
        out.contains("reset cancelled: nothing was changed"),
        "{out}"
    );
    assert!(has_routes("h2"));
    // "yes" removes it
    let (code, out) = on_a_terminal(&["reset", "-i", &i, "--limit", "h2"], "yes\n");
    assert_eq!(code, Some(0), "{out}");
    assert!(!has_routes("h2"), "{}", lab.routes("h2"));
    assert!(has_routes("h1"), "outside --limit: untouched");
}
