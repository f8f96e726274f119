//! `windows.binaries_source: push`: a `url:` binary is downloaded once to
//! the operator's machine (a local HTTPS server, its CA trusted through
//! `KWINCTL_CA_FILE`), checked against its sha256, kept in the cache
//! (`KWINCTL_CACHE_DIR`) and pushed: the script copies it from where the
//! push leaves it. A second command takes it from the cache; a download
//! whose hash is wrong is bad input, and nothing is kept.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{bin, run_bounded, text};
use crate::https_fixture::serve;

fn render(inv: &std::path::Path, cache: &std::path::Path, ca: &std::path::Path) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(["render", "-i", inv.to_str().unwrap(), "--host", "Win01"])
        .env("KWINCTL_CACHE_DIR", cache)
        .env("KWINCTL_CA_FILE", ca);
    for v in ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        cmd.env_remove(v);
    }
    run_bounded(cmd, Duration::from_secs(120))
}

fn inventory(dir: &std::path::Path, url: &str, sha: &str) -> std::path::PathBuf {
    let inv = dir.join("inv.yaml");
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inventories/seed-1.5-transparent.yaml"
    ))
    .unwrap()
    .replace(
        "  kubeconfig: example.kubeconfig",
        concat!(
            "  kubeconfig: ",
            env!("CARGO_MANIFEST_DIR"),
            "/inventories/example.kubeconfig"
        ),
    )
    .replace(
        "    address: 10.0.0.11\n",
        &format!(
            "    address: 10.0.0.11\n    windows: {{ binaries_source: push, binaries: {{ kubelet: {{ url: \"{url}\", sha256: {sha} }} }} }}\n"
        ),
    );
    std::fs::write(&inv, yaml).unwrap();
    inv
}

#[test]
fn a_url_binary_is_downloaded_once_checked_cached_and_pushed() {
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let sha = kwinctl::hash::sha256_bytes(&body);
    let server = serve(BTreeMap::from([(
        "/v1/kubelet.exe".to_string(),
        (200, body.clone()),
    )]));
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let url = format!("{}/v1/kubelet.exe", server.base());
    let inv = inventory(dir.path(), &url, &sha);
    for _ in 0..2 {
        let o = render(&inv, &cache, &server.ca);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(
            script.contains(&format!(
                r"Copy-Item -Force -LiteralPath 'C:\ProgramData\kwinctl\push\{sha}' -Destination $tmp"
            )),
            "{}",
            &script[..script.len().min(2000)]
        );
        assert!(!script.contains(&url), "the node is not sent to the URL");
    }
    assert_eq!(std::fs::read(cache.join(&sha)).unwrap(), body);
    // downloaded once: the second command took it from the cache
    assert_eq!(server.hits.lock().unwrap().len(), 1);

    // a download whose hash is not the inventory's is refused, not kept
    let wrong = "0".repeat(64);
    let inv = inventory(dir.path(), &url, &wrong);
    let o = render(&inv, &cache, &server.ca);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "the download's SHA-256 is {sha}, the inventory says {wrong}"
        )),
        "{err}"
    );
    assert!(!cache.join(&wrong).exists() && !cache.join(format!("{wrong}.part")).exists());
}
