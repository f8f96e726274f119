//! A binary of over 100 MB pushed from the operator's machine to a
//! simulated Windows host (`src/transfer/`), over WinRM and over SSH: the
//! run is killed (SIGKILL) midway, the rerun sends only the rest, the host
//! ends with the right file, and a second rerun sends nothing. winsim logs
//! every piece its receiving side wrote (offset, length, what it held).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::lab::{Lab, require_root};
use crate::common::{bin, host, kwinctl, run_bounded, summary, text, write};

/// 110 MiB: the lab's release line first (what winsim's binaries print for
/// --version), then generated filler.
const SIZE: usize = 110 << 20;
/// Past this, winsim's receiving side slows down (its knob), so that the
/// run is surely still sending when it is killed.
const SLOW_FROM: u64 = 24 << 20;

#[derive(Debug, serde::Deserialize)]
struct Piece {
    sha256: String,
    offset: u64,
    length: u64,
    held: u64,
    transport: String,
}

fn pieces(lab: &Lab, sha: &str) -> Vec<Piece> {
    let log = format!("{}.push/log.jsonl", lab.win_state("win1").display());
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Piece>(l).expect("a JSON line"))
        .filter(|p| p.sha256 == sha)
        .collect()
}

fn received(lab: &Lab, sha: &str) -> u64 {
    pieces(lab, sha).iter().map(|p| p.length).sum()
}

fn set_slow(lab: &Lab, from: Option<u64>) {
    let sp = lab.win_state("win1");
    let mut ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    ws["push_slow_from"] = serde_json::json!(from);
    write(&sp, &ws.to_string());
}

/// `kwinctl up` as the lab runs it.
fn up(inv: &str) -> Command {
    let mut c = Command::new(bin());
    c.args(["up", "-i", inv, "--output", "json"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK");
    c
}

/// A kubelet.exe of `size` bytes in the lab's folder (the lab's release
/// line first, then filler), put in the inventory as a `path:` binary:
/// its SHA-256.
fn local_kubelet(lab: &Lab, size: usize) -> String {
    let local = lab.dir().join("kubelet.exe");
    let mut bytes = b"MZ kwinctl lab fake kubelet.exe\nKubernetes v1.10.13\n".to_vec();
    bytes.extend(
        (bytes.len()..size).map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8 ^ (i >> 12) as u8),
    );
    std::fs::write(&local, &bytes).unwrap();
    let sha = {
        use sha2::Digest;
        sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    drop(bytes);
    let inv_text = std::fs::read_to_string(lab.inventory()).unwrap();
    let start = inv_text.find("        kubelet: {").unwrap();
    let end = start + inv_text[start..].find('\n').unwrap();
    let inv_text = format!(
        "{}        kubelet: {{ path: {} }}{}",
        &inv_text[..start],
        local.display(),
        &inv_text[end..]
    );
    write(lab.inventory(), &inv_text);
    sha
}

fn killed_midway_then_resumed(ssh: bool) {
    let lab = Lab::up_mixed(1, 1);
    if ssh {
        lab.win_ssh("win1", "cmd");
    }
    let sha = local_kubelet(&lab, SIZE);
    let i = lab.inv();

    // 1. the first run, killed with SIGKILL once part of the file arrived
    set_slow(&lab, Some(SLOW_FROM));
    let mut child = up(&i)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while received(&lab, &sha) < SLOW_FROM {
        let done = child.try_wait().unwrap();
        assert!(
            done.is_none(),
            "the run ended ({done:?}) before it was killed"
        );
        assert!(
            t.elapsed() < Duration::from_secs(240),
            "no push within 240 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // what the host's side had in hand is written (over SSH sshd closes its
    // stdin): wait until the part stops growing
    let mut last = u64::MAX;
    let t = Instant::now();
    loop {
        let now = received(&lab, &sha);
        if now == last {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the host kept writing"
        );
        last = now;
        std::thread::sleep(Duration::from_secs(1));
    }
    let first = received(&lab, &sha);
    assert!(
        first >= SLOW_FROM && first < SIZE as u64,
        "{first} bytes arrived before the kill"
    );
    set_slow(&lab, None);
    // the killed run's cluster lock: broken rather than waited for
    let o = kwinctl(&["unlock", "-i", &i, "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 2. the rerun sends the rest only, and the host has the right file
    // (a debug build seals each WinRM request slowly: a longer bound)
    let t = Instant::now();
    let o = run_bounded(up(&i), Duration::from_secs(900));
    eprintln!("the rerun took {:?}", t.elapsed());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let win1 = host(&s, "win1");
    let push = format!(r"push C:\k\kubelet.exe ({SIZE} bytes)");
    assert!(
        win1["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action"].as_str().unwrap().starts_with(&push)),
        "{s}"
    );
    assert!(
        win1["notes"]
            .to_string()
            .contains(&format!("resumed at byte {first}")),
        "{s}"
    );
    let ws = lab.win_state_json("win1");
    assert_eq!(ws["files"][r"C:\k\kubelet.exe"], sha.as_str());
    // every byte arrived once: the pieces tile the file, none overlaps
    let mut p = pieces(&lab, &sha);
    p.sort_by_key(|p| p.offset);
    let mut at = 0;
    for piece in &p {
        assert_eq!(piece.offset, at, "a gap or a byte sent twice: {piece:?}");
        at += piece.length;
    }
    assert_eq!(at, SIZE as u64);
    let transport = if ssh { "ssh" } else { "winrm" };
    assert!(p.iter().all(|p| p.transport == transport), "{p:?}");
    // the host's receiving side held about one piece at a time
    let held = p.iter().map(|p| p.held).max().unwrap();
    assert!(held <= 1 << 20, "the host held {held} bytes at once");
    if !ssh {
        // the Sends were sized to the host's envelope (winsim's default
        // MaxEnvelopeSizekb, 500): pieces of over 256 KB of the file,
        // where the unknown default 150 would give 106 KiB
        let most = p.iter().map(|p| p.length).max().unwrap();
        assert!(most > 256_000, "pieces of at most {most} bytes");
    }

    // 3. a second rerun sends nothing
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    assert_eq!(
        pieces(&lab, &sha).len(),
        p.len(),
        "something was sent again"
    );
}

#[test]
fn a_push_over_winrm_killed_midway_resumes_and_sends_each_byte_once() {
    if !require_root() {
        return;
    }
    killed_midway_then_resumed(false);
}

#[test]
fn a_push_over_ssh_killed_midway_resumes_and_sends_each_byte_once() {
    if !require_root() {
        return;
    }
    killed_midway_then_resumed(true);
}

/// A host whose MaxEnvelopeSizekb is lower than either default (the knob
/// sets 100; kwinctl's scripts travel in Sends of about 90 KB, so this is
/// about the least a host can have for `up`): every Send of the push fits
/// it (winsim refuses a larger request, as the WinRM service does), so the
/// push arrives whole, in smaller pieces.
#[test]
fn a_push_over_winrm_fits_the_hosts_envelope() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    let size = 6 << 20;
    let sha = local_kubelet(&lab, size);
    let sp = lab.win_state("win1");
    let mut ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    ws["max_envelope_kb"] = serde_json::json!(100);
    write(&sp, &ws.to_string());
    let o = run_bounded(up(&lab.inv()), Duration::from_secs(600));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ws = lab.win_state_json("win1");
    assert_eq!(ws["files"][r"C:\k\kubelet.exe"], sha.as_str());
    let p = pieces(&lab, &sha);
    assert_eq!(p.iter().map(|p| p.length).sum::<u64>(), size as u64);
    // 100 KB less 8 KiB of room, 3/4 of it as the Send's base64: at most
    // 70656 bytes of the file per Send, so at least 90 of them
    let most = p.iter().map(|p| p.length).max().unwrap();
    assert!(most <= 70_656, "a piece of {most} bytes");
    assert!(p.len() >= 90, "{} pieces", p.len());
    let log = std::fs::read_to_string(lab.dir().join("hosts/win1/winsim.log")).unwrap();
    assert!(!log.contains("over MaxEnvelopeSizekb"), "{log}");
}
