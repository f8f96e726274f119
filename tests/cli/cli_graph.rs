//! `kwinctl graph`: the cluster's nodes and routes as Mermaid or dot,
//! coloured by the last `verify` kept beside the inventory; offline.

use crate::common;

use common::{kwinctl, text};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/seed-1.5-transparent.yaml"
);

#[test]
fn graph_draws_nodes_and_routes_coloured_by_the_last_verify() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("c.yaml");
    std::fs::copy(EXAMPLE, &inv).unwrap();
    std::fs::copy(
        EXAMPLE.replace("seed-1.5-transparent.yaml", "example.kubeconfig"),
        dir.path().join("example.kubeconfig"),
    )
    .unwrap();
    let i = inv.to_str().unwrap();
    // no `up` yet: the blocks are pending
    let o = kwinctl(&["graph", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let m = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(m.matches("pods pending").count(), 3, "{m}");
    // what the state file records after an `up`
    std::fs::write(
        dir.path().join("c.kwinctl-state.json"),
        r#"{"version":2,"cluster":"demo","cluster_id":"0123456789abcdef","cluster_cidr":"192.168.0.0/16",
            "pod_cidrs":{"lin01":"192.168.0.0/24","win01":"192.168.1.0/24","win02":"192.168.2.0/24"}}"#,
    )
    .unwrap();
    // no verify yet: every node and route, grey
    let o = kwinctl(&["graph", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let m = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(m.contains("no verify recorded yet"), "{m}");
    assert!(
        m.contains("n_Lin01[\"<b>Lin01</b><br/>linux 10.0.0.10<br/>pods 192.168.0.0/24\"]"),
        "{m}"
    );
    assert!(m.contains("n_Lin01 -->|192.168.1.0/24| n_Win01"), "{m}");
    assert_eq!(m.matches(" -->|").count(), 6, "{m}");
    // a verify in which Win02 lost its route to Lin01's block
    let run = dir
        .path()
        .join("c.kwinctl-runs/2026-01-01T000000Z-verify-1");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("summary.json"),
        r#"{"command":"verify","hosts":[
          {"host":"Lin01","checks":[{"name":"route 192.168.1.0/24","pass":true},{"name":"route 192.168.2.0/24","pass":true}]},
          {"host":"Win01","checks":[{"name":"route 192.168.0.0/24","pass":true},{"name":"route 192.168.2.0/24","pass":true}]},
          {"host":"Win02","checks":[{"name":"route 192.168.0.0/24","pass":false},{"name":"route 192.168.1.0/24","pass":true}]}]}"#,
    )
    .unwrap();
    let out = dir.path().join("c.dot");
    let o = kwinctl(&[
        "graph",
        "-i",
        i,
        "--format",
        "dot",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let d = std::fs::read_to_string(&out).unwrap();
    assert!(
        d.contains("the last verify (2026-01-01T000000Z-verify-1)"),
        "{d}"
    );
    assert!(
        d.contains("\"n_Win02\" -> \"n_Lin01\" [label=\"192.168.0.0/24\", color=\"#c62828\""),
        "{d}"
    );
    assert!(
        d.contains("\"n_Lin01\" -> \"n_Win01\" [label=\"192.168.1.0/24\", color=\"#2e7d32\""),
        "{d}"
    );
    assert!(d.contains("\"n_Win02\" [label=\"Win02\\nwindows 10.0.0.12\\npods 192.168.2.0/24\", fillcolor=\"#fde2e1\""), "{d}");
    // dot reads it, where graphviz is installed
    if let Ok(o) = std::process::Command::new("dot")
        .args(["-Tsvg", out.to_str().unwrap()])
        .output()
    {
        assert!(o.status.success(), "{}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("<svg"));
    }
}
