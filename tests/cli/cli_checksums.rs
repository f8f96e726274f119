//! The downloads' SHA-256 from the checksum files beside them: `init` writes
//! them (FILL-IN with `--offline`), `checksums` updates an existing
//! inventory after a version bump, keeping its comments; a missing or
//! malformed checksum file, or a server kwinctl cannot verify, is an error
//! naming the URL. The files come from a local HTTPS server laid out as a
//! mirror (BASE/HOST/PATH) whose CA is trusted through `--ca-file`; that
//! the publishers' own URLs are asked without `--from-mirror` is a unit
//! test (src/checksums/mod.rs), since these tests reach no internet.
//! Also: the file `init -o` writes is never group- or world-writable.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{bin, run_bounded, text};
use crate::https_fixture::{Server, serve};

/// kwinctl, with no proxy from the environment in the way.
fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    for v in [
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "HTTP_PROXY",
        "http_proxy",
    ] {
        cmd.env_remove(v);
    }
    run_bounded(cmd, Duration::from_secs(120))
}

fn hex(seed: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(seed.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// init for the default release (the newest kwinctl knows).
const INIT: [&str; 5] = [
    "init",
    "--control-plane",
    "10.0.0.10",
    "--windows",
    "10.0.0.30",
];

fn urls(inv: &str) -> Vec<String> {
    inv.lines()
        .filter_map(|l| l.split("url: \"").nth(1))
        .map(|r| r.split('"').next().unwrap().to_string())
        .collect()
}

/// What each download's checksum file says (its publisher's format), by
/// the path it has on the mirror, and the digest in it.
fn checksum_files(inv: &str, base: &str) -> BTreeMap<String, (String, String)> {
    urls(inv)
        .into_iter()
        .map(|u| {
            let path = u
                .strip_prefix(base)
                .expect("a URL on the mirror")
                .to_string();
            let name = path.rsplit('/').next().unwrap().to_string();
            let sha = hex(&path);
            if path.contains("/containerd/containerd/") {
                (
                    format!("{path}.sha256sum"),
                    (sha.clone(), format!("{sha}  {name}\n")),
                )
            } else if path.contains("/containernetworking/") {
                (
                    format!("{path}.sha256"),
                    (sha.clone(), format!("{sha}  {name}\n")),
                )
            } else {
                (format!("{path}.sha256"), (sha.clone(), format!("{sha}\n")))
            }
        })
        .collect()
}

fn server_for(files: &BTreeMap<String, (String, String)>) -> Server {
    serve(
        files
            .iter()
            .map(|(p, (_, body))| (p.clone(), (200, body.clone().into_bytes())))
            .collect(),
    )
}

/// The mirror paths init writes for the release (port-free).
fn mirror_paths() -> BTreeMap<String, (String, String)> {
    let base = "https://mirror.invalid";
    let mut a = INIT.to_vec();
    a.extend(["--offline", "--mirror", base]);
    let o = run(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let inv = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(urls(&inv).len(), 5, "{inv}");
    checksum_files(&inv, base)
}

#[test]
fn init_writes_the_checksums_from_the_files_beside_the_downloads() {
    let files = mirror_paths();
    let srv = server_for(&files);
    let base = srv.base();
    let ca = srv.ca.to_str().unwrap().to_string();
    // --offline: FILL-IN, and nothing asked
    let mut a = INIT.to_vec();
    a.extend([
        "--offline",
        "--mirror",
        &base,
        "--from-mirror",
        "--ca-file",
        &ca,
    ]);
    let o = run(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let offline = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        offline.matches(", sha256: FILL-IN }").count(),
        5,
        "{offline}"
    );
    assert!(srv.hits.lock().unwrap().is_empty());
    // without it: every value, each under the URL it came from
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster.yaml");
    let mut a = INIT.to_vec();
    a.extend(["--mirror", &base, "--from-mirror", "--ca-file", &ca, "-o"]);
    a.push(out.to_str().unwrap());
    let o = run(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let inv = std::fs::read_to_string(&out).unwrap();
    assert!(!inv.contains(", sha256: FILL-IN"), "{inv}");
    for (path, (sha, _)) in &files {
        let line = inv
            .lines()
            .position(|l| l.contains(&format!("sha256: {sha} }}")))
            .unwrap_or_else(|| panic!("no {sha} for {path}\n{inv}"));
        let above = inv.lines().nth(line - 1).unwrap();
        assert_eq!(above.trim(), format!("# sha256 from {base}{path}"), "{inv}");
    }
    let mut asked = srv.hits.lock().unwrap().clone();
    asked.sort();
    assert_eq!(asked, files.keys().cloned().collect::<Vec<_>>());
    // what init wrote passes check's test of these values
    let o = run(&["check", "-i", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(!t.contains("binaries"), "{t}");
}

#[test]
fn a_missing_or_malformed_checksum_file_or_an_unknown_ca_is_an_error_naming_it() {
    let mut files = mirror_paths();
    let kubelet = files
        .keys()
        .find(|p| p.ends_with("/kubelet.exe.sha256"))
        .unwrap()
        .clone();
    let containerd = files
        .keys()
        .find(|p| p.ends_with(".sha256sum"))
        .unwrap()
        .clone();
    files.remove(&kubelet);
    files.insert(
        containerd.clone(),
        (String::new(), "<html>\x1b[31mNot here</html>\n".into()),
    );
    let srv = server_for(&files);
    let base = srv.base();
    let ca = srv.ca.to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster.yaml");
    let mut a = INIT.to_vec();
    a.extend(["--mirror", &base, "--from-mirror", "--ca-file", &ca, "-o"]);
    a.push(out.to_str().unwrap());
    let o = run(&a);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains(&format!("{base}{kubelet}: HTTP 404")), "{t}");
    assert!(
        t.contains(&format!("{base}{containerd}: ")) && t.contains("is not a SHA-256"),
        "{t}"
    );
    assert!(
        !t.contains('\x1b'),
        "the server's text reaches the terminal escaped: {t}"
    );
    assert!(t.contains("--offline"), "{t}");
    assert!(!out.exists(), "nothing is written on failure");
    // a server whose certificate kwinctl cannot verify is refused
    let mut a = INIT.to_vec();
    a.extend(["--mirror", &base, "--from-mirror"]);
    let o = run(&a);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("{base}/")) && t.contains("certificate"),
        "{t}"
    );
    assert!(t.contains("--ca-file"), "{t}");
}

#[test]
fn checksums_updates_an_inventory_after_a_version_bump_keeping_its_comments() {
    let old = "/m/dl.k8s.io/v1.34.2/bin/windows/amd64/kubelet.exe";
    let new = "/m/dl.k8s.io/v1.34.3/bin/windows/amd64/kubelet.exe";
    let cni = "/m/github.com/containernetworking/plugins/releases/download/v1.6.2/cni-plugins-windows-amd64-v1.6.2.tgz";
    let (s_old, s_new, s_cni) = (hex("old"), hex("new"), hex("cni"));
    let files: BTreeMap<String, (u16, Vec<u8>)> = [
        (format!("{old}.sha256"), format!("{s_old}\n")),
        (format!("{new}.sha256"), format!("{s_new}\n")),
        (
            format!("{cni}.sha256"),
            format!("{s_cni}  cni-plugins-windows-amd64-v1.6.2.tgz\n"),
        ),
    ]
    .into_iter()
    .map(|(p, b)| (p, (200, b.into_bytes())))
    .collect();
    let srv = serve(files);
    let base = srv.base();
    let ca = srv.ca.to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("cluster.yaml");
    let i = inv.to_str().unwrap();
    let before = format!(
        "\
# our cluster
defaults:
  windows:
    binaries:
      # bumped by hand
      kubelet: {{ url: \"{base}{new}\", sha256: {s_old} }}  # was 1.34.2
      cni-plugins:
        url: {base}{cni}
        sha256: FILL-IN
      kube-proxy: {{ path: ./kube-proxy.exe, sha256: FILL-IN }}
      containerd: {{ url: \"https://files.example/containerd.tgz\", sha256: FILL-IN }}
"
    );
    std::fs::write(&inv, &before).unwrap();
    let args = ["checksums", "-i", i, "--from-mirror", "--ca-file", &ca];
    // shown, not written
    let o = run(&args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "-      kubelet: {{ url: \"{base}{new}\", sha256: {s_old} }}"
        )),
        "{t}"
    );
    assert!(
        out.contains(&format!(
            "+      kubelet: {{ url: \"{base}{new}\", sha256: {s_new} }}"
        )),
        "{t}"
    );
    assert!(out.contains(&format!("+        sha256: {s_cni}")), "{t}");
    assert!(t.contains("--write"), "{t}");
    assert!(
        t.contains("https://files.example/containerd.tgz: kwinctl does not know"),
        "{t}"
    );
    assert_eq!(std::fs::read_to_string(&inv).unwrap(), before);
    // written: the values and their sources, the rest as it was
    let mut w = args.to_vec();
    w.push("--write");
    let o = run(&w);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let after = std::fs::read_to_string(&inv).unwrap();
    let want = before
        .replace(
            "      kubelet: {",
            &format!("      # sha256 from {base}{new}.sha256\n      kubelet: {{"),
        )
        .replace(&format!("sha256: {s_old}"), &format!("sha256: {s_new}"))
        .replace(
            "        sha256: FILL-IN",
            &format!("        # sha256 from {base}{cni}.sha256\n        sha256: {s_cni}"),
        );
    assert_eq!(after, want);
    // nothing more to do
    let o = run(&w);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("already"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&inv).unwrap(), after);
    // a failure writes nothing
    std::fs::write(&inv, after.replace("v1.34.3", "v1.34.9")).unwrap();
    let o = run(&w);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("v1.34.9/bin/windows/amd64/kubelet.exe.sha256: HTTP 404"));
    assert_eq!(
        std::fs::read_to_string(&inv).unwrap(),
        after.replace("v1.34.3", "v1.34.9")
    );
}

/// dl.k8s.io and GitHub answer with a redirect to their CDN: followed,
/// and the comment names the URL asked; a redirect to plain http:// is
/// refused.
#[test]
fn redirects_are_followed_over_https_only() {
    let k = "/m/dl.k8s.io/v1.34.2/bin/windows/amd64/kubelet.exe";
    let p = "/m/dl.k8s.io/v1.34.2/bin/windows/amd64/kube-proxy.exe";
    let sha = hex("cdn");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let files: BTreeMap<String, (u16, Vec<u8>)> = [
        (
            format!("{k}.sha256"),
            (302, b"/cdn/kubelet.exe.sha256".to_vec()),
        ),
        (
            "/cdn/kubelet.exe.sha256".into(),
            (200, format!("{sha}\n").into_bytes()),
        ),
        (
            format!("{p}.sha256"),
            (302, format!("http://127.0.0.1:{port}/x").into_bytes()),
        ),
    ]
    .into_iter()
    .collect();
    let srv = serve(files);
    let (base, ca) = (srv.base(), srv.ca.to_str().unwrap().to_string());
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("cluster.yaml");
    let i = inv.to_str().unwrap();
    std::fs::write(
        &inv,
        format!("b:\n  kubelet: {{ url: {base}{k}, sha256: FILL-IN }}\n"),
    )
    .unwrap();
    let o = run(&[
        "checksums",
        "-i",
        i,
        "--from-mirror",
        "--ca-file",
        &ca,
        "--write",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(&inv).unwrap(),
        format!(
            "b:\n  # sha256 from {base}{k}.sha256\n  kubelet: {{ url: {base}{k}, sha256: {sha} }}\n"
        )
    );
    std::fs::write(
        &inv,
        format!("b:\n  kube-proxy: {{ url: {base}{p}, sha256: FILL-IN }}\n"),
    )
    .unwrap();
    let o = run(&[
        "checksums",
        "-i",
        i,
        "--from-mirror",
        "--ca-file",
        &ca,
        "--write",
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("{base}{p}.sha256: ")) && t.contains("a plain http:// URL"),
        "{t}"
    );
}

#[cfg(unix)]
#[test]
fn init_out_is_not_world_writable_under_umask_000() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster.yaml");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 000; exec \"$0\" \"$@\"", &bin()]);
    cmd.args(INIT)
        .args(["--offline", "-o", out.to_str().unwrap()]);
    let o = run_bounded(cmd, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "{mode:o}");
}
