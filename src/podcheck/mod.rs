//! `kwinctl verify --pods`: what a pod gets on each node of a running
//! cluster, asked of the cluster itself. Through `kubectl` on the control
//! plane (over SSH, as every other step) kwinctl starts one short-lived
//! pod per selected node, pinned to it, waits for them (bounded), and
//! checks from inside each pod: its IP is in the node's pod CIDR, it
//! reaches a pod on a Linux node and one on another Windows node over TCP,
//! and it resolves `kubernetes.default.svc.<domain>`. Then it deletes the
//! pods, also after a failure or Ctrl-C. What is checked and why:
//! docs/windows.md ("Pod IP and DNS").
//!
//! The pods run `agnhost netexec --http-port=8080` (Kubernetes' own e2e
//! test image, which has Windows variants) and the checks run `/agnhost
//! connect` and `nslookup` in them; an image set in the inventory
//! (`cluster.pod_check.images`) must offer the same commands.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use schemars::JsonSchema;
use serde::Serialize;

use crate::inventory::Os;
use crate::transport::Session;

mod budget;
mod manifest;
use budget::{Budget, Ended, exec_rounds, exit_said};
use manifest::*;

/// The image of the test pods when the inventory names none: agnhost, whose
/// manifest list carries Linux and the Windows Server 2019 (1809) and 2022
/// (ltsc2022) builds; a Windows Server 2025 host runs its ltsc2022 entry,
/// as containerd (1.7.20 and later) runs the previous LTSC's images there
/// (docs/research/pods.md#images, docs/research/containerd.md#d9).
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/e2e-test-images/agnhost:2.53";
/// The Windows builds [`DEFAULT_IMAGE`] runs on: its own entries' and 2025's.
pub const DEFAULT_WINDOWS_BUILDS: &[u32] = &[17763, 20348, 26100];
/// The port the test pods listen on (`agnhost netexec --http-port`).
pub const PORT: u16 = 8080;
/// The label every test pod of one run carries.
pub const RUN_LABEL: &str = "kwinctl.io/pod-check";

/// What the inventory says of the test pods.
#[derive(Debug, Clone)]
pub struct Options {
    pub namespace: String,
    /// `linux`, a Windows build number (`"17763"`), or `windows` (a Windows
    /// node without the build label), to an image.
    pub images: BTreeMap<String, String>,
    pub domain: String,
    /// How long the pods may take to start (image pulls included).
    pub start_timeout: Duration,
    /// `--timeout`: the bound of each kubectl call (see `budget`).
    pub call_timeout: Duration,
}

/// A node whose pods are checked, as kwinctl knows it.
#[derive(Debug, Clone)]
pub struct Subject {
    pub host: String,
    /// The Kubernetes node name it registers as (a Windows host's
    /// `Host::node_name`; a Linux host's name).
    pub node: String,
    pub os: Os,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    /// Its pods use the host's DNS by design (the transparent profile).
    pub host_dns: bool,
}

/// One node's result.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NodePods {
    /// The inventory host.
    pub host: String,
    /// Its Kubernetes node, when kubectl lists it.
    pub node: Option<String>,
    pub pod: Option<String>,
    pub pod_ip: Option<String>,
    pub ok: bool,
    pub checks: Vec<PodCheck>,
}

/// One check: `ip`, `dns`, or `to <host>` (TCP to that host's pod).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PodCheck {
    pub name: String,
    /// `None`: not judged (said why in `detail`).
    pub ok: Option<bool>,
    pub detail: String,
}

impl NodePods {
    fn new(host: &str) -> NodePods {
        NodePods {
            host: host.into(),
            node: None,
            pod: None,
            pod_ip: None,
            ok: false,
            checks: Vec::new(),
        }
    }

    fn check(&mut self, name: &str, ok: Option<bool>, detail: impl Into<String>) {
        self.checks.push(PodCheck {
            name: name.into(),
            ok,
            detail: detail.into(),
        });
    }

    /// One line for the operator.
    pub fn line(&self) -> String {
        let parts: Vec<String> = self
            .checks
            .iter()
            .map(|c| match c.ok {
                Some(true) => format!("{} ok", c.name),
                Some(false) => format!("{} FAILED ({})", c.name, c.detail),
                None => format!("{} not judged ({})", c.name, c.detail),
            })
            .collect();
        format!(
            "pods: {}: {} — {}",
            self.host,
            if self.ok { "ok" } else { "FAILED" },
            parts.join(", ")
        )
    }
}

/// Check the pods of `subjects` through the control plane's kubectl,
/// within the budget `budget` describes. `stop()`: SIGINT or SIGTERM came
/// (the call in progress ends at once, the pods are deleted, no more
/// checks run, and the result is an error that says so).
pub async fn check(
    session: &mut dyn Session,
    subjects: &[Subject],
    o: &Options,
    run: &str,
    stop: &(dyn Fn() -> bool + Sync),
    say: &(dyn Fn(&str) + Sync),
) -> Result<Vec<NodePods>, String> {
    let budget = Budget::new(o.call_timeout, o.start_timeout, subjects.len());
    let t = budget.secs();
    let (rc, out, err) = budget
        .run(
            session,
            &format!(
                "{}timeout {t} kubectl get nodes -o json\n",
                crate::kubectl::FOUND
            ),
            "kubectl get nodes",
            budget.call,
            false,
            stop,
        )
        .await
        .map_err(|e| match e {
            Ended::Interrupted => "interrupted before any test pod started".to_string(),
            Ended::Failed(why) => why,
        })?;
    if rc != 0 {
        return Err(format!(
            "kubectl get nodes on the control plane failed (exit {rc}): {}; kwinctl verify --pods needs kubectl there, with a kubeconfig that may list nodes and create, exec into and delete pods",
            exit_said(rc, "kubectl get nodes", t).unwrap_or_else(|| said(&err))
        ));
    }
    let nodes = k8s_nodes(&out)?;
    let mut results: Vec<NodePods> = subjects.iter().map(|s| NodePods::new(&s.host)).collect();
    let mut pods = Vec::new();
    for (s, r) in subjects.iter().zip(results.iter_mut()) {
        let Some(n) = node_of(&nodes, s) else {
            r.check(
                "node",
                Some(false),
                "kubectl lists no node with this address or name",
            );
            continue;
        };
        r.node = Some(n.name.clone());
        match image_for(o, n, s) {
            Ok(image) => {
                let name = pod_name(run, &s.host);
                r.pod = Some(name.clone());
                pods.push((name, n, image, s));
            }
            Err(why) => r.check("image", Some(false), why),
        }
    }
    let cleanup = format!(
        "timeout {t} kubectl delete pods -n {} -l {}={} --wait=false >/dev/null 2>&1 || true\n",
        q(&o.namespace),
        RUN_LABEL,
        run
    );
    if !pods.is_empty() {
        say(&format!(
            "pods: starting {} test pods in namespace {} (label {RUN_LABEL}={run}); an interrupted run leaves them to `kubectl delete pods -n {} -l {RUN_LABEL}={run}`",
            pods.len(),
            o.namespace,
            o.namespace
        ));
        let outcome = run_pods(session, &budget, &pods, o, run, stop, &mut results).await;
        // also after a signal or a timeout, within its own bound
        let deleted = budget
            .run(
                session,
                &cleanup,
                "kubectl delete pods",
                budget.call,
                true,
                stop,
            )
            .await;
        match (outcome, deleted) {
            (Ok(()), _) => {}
            (Err(Ended::Interrupted), Ok(_)) => return Err(Ended::Interrupted.to_string()),
            (Err(Ended::Interrupted), Err(e)) => {
                return Err(format!(
                    "interrupted, and the test pods may be left ({e}): `kubectl delete pods -n {} -l {RUN_LABEL}={run}`",
                    o.namespace
                ));
            }
            (Err(e), _) => return Err(e.to_string()),
        }
    }
    for r in &mut results {
        r.ok = !r.checks.is_empty() && r.checks.iter().all(|c| c.ok != Some(false));
    }
    Ok(results)
}

async fn run_pods(
    session: &mut dyn Session,
    budget: &Budget,
    pods: &[(String, &K8sNode, String, &Subject)],
    o: &Options,
    run: &str,
    stop: &(dyn Fn() -> bool + Sync),
    results: &mut [NodePods],
) -> Result<(), Ended> {
    let secs = budget.secs();
    let apply = format!(
        "timeout {secs} kubectl apply -f - <<'KWINCTL_MANIFEST'\n{}\nKWINCTL_MANIFEST\n",
        manifest(o, run, pods)
    );
    let (rc, _, err) = budget
        .run(session, &apply, "kubectl apply", budget.call, false, stop)
        .await?;
    if rc != 0 {
        return Err(Ended::Failed(format!(
            "kubectl apply of the test pods failed (exit {rc}): {}",
            exit_said(rc, "kubectl apply", secs).unwrap_or_else(|| said(&err))
        )));
    }
    // Wait for every pod to run with an IP, or to fail, within the bound.
    let get = format!(
        "timeout {secs} kubectl get pods -n {} -l {}={} -o json\n",
        q(&o.namespace),
        RUN_LABEL,
        run
    );
    let started = Instant::now();
    let deadline = started + o.start_timeout;
    let mut state: BTreeMap<String, serde_json::Value>;
    loop {
        let (rc, out, err) = budget
            .run(session, &get, "kubectl get pods", budget.call, false, stop)
            .await?;
        if rc != 0 {
            return Err(Ended::Failed(format!(
                "kubectl get pods failed (exit {rc}): {}",
                exit_said(rc, "kubectl get pods", secs).unwrap_or_else(|| said(&err))
            )));
        }
        let v: serde_json::Value = serde_json::from_str(&out)
            .map_err(|e| Ended::Failed(format!("kubectl get pods: not JSON ({e})")))?;
        state = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p.clone(),
                )
            })
            .collect();
        let settled = pods.iter().all(|(name, ..)| {
            state.get(name).is_some_and(|p| {
                let phase = p["status"]["phase"].as_str().unwrap_or_default();
                (phase == "Running" && p["status"]["podIP"].is_string())
                    || phase == "Failed"
                    || phase == "Succeeded"
            })
        });
        if settled || Instant::now() >= deadline {
            break;
        }
        // the pause between polls ends at a signal too
        for _ in 0..20 {
            if stop() {
                return Err(Ended::Interrupted);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let waited = started.elapsed().as_secs();
    // Each pod's IP, against its node's block.
    let mut ips: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    for (name, _, _, s) in pods {
        let r = results
            .iter_mut()
            .find(|r| r.host == s.host)
            .expect("result");
        let p = state.get(name);
        let phase = p
            .and_then(|p| p["status"]["phase"].as_str())
            .unwrap_or("missing");
        let ip = p
            .and_then(|p| p["status"]["podIP"].as_str())
            .and_then(|i| i.parse::<Ipv4Addr>().ok());
        match (phase, ip) {
            ("Running", Some(ip)) => {
                r.pod_ip = Some(ip.to_string());
                if s.pod_cidr.contains(&ip) {
                    r.check("ip", Some(true), format!("{ip} in {}", s.pod_cidr));
                    ips.insert(s.host.clone(), ip);
                } else {
                    r.check(
                        "ip",
                        Some(false),
                        format!("{ip} is outside the node's pod CIDR {}", s.pod_cidr),
                    );
                }
            }
            (phase, _) => {
                let why = p
                    .and_then(|p| p["status"]["message"].as_str())
                    .map(said)
                    .unwrap_or_default();
                let why = if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                };
                r.check(
                    "ip",
                    Some(false),
                    if phase == "Running" {
                        format!("the pod runs without an IP{why}")
                    } else {
                        format!("the pod is {phase} after {waited}s{why}")
                    },
                );
            }
        }
    }
    if stop() {
        return Err(Ended::Interrupted);
    }
    // From each running pod: a Linux pod and a Windows pod on other nodes,
    // and the cluster DNS.
    let running: Vec<&(String, &K8sNode, String, &Subject)> = pods
        .iter()
        .filter(|(_, _, _, s)| ips.contains_key(&s.host))
        .collect();
    let mut calls: Vec<String> = Vec::new();
    let mut what: Vec<(String, String)> = Vec::new(); // (host, check)
    let mut names: BTreeMap<usize, String> = BTreeMap::new(); // id -> name looked up
    for (name, _, _, s) in &running {
        for os in [Os::Linux, Os::Windows] {
            if let Some((_, _, _, t)) = running
                .iter()
                .find(|(_, _, _, t)| t.os == os && t.host != s.host)
            {
                what.push((s.host.clone(), format!("to {}", t.host)));
                calls.push(format!(
                    "timeout {secs} kubectl exec -n {} {} -- /agnhost connect {}:{PORT} --timeout=5s",
                    q(&o.namespace),
                    q(name),
                    ips[&t.host]
                ));
            }
        }
        for (check, lookup) in dns_lookups(s.os, &o.domain) {
            names.insert(what.len(), lookup.clone());
            what.push((s.host.clone(), check.into()));
            calls.push(format!(
                "timeout {secs} kubectl exec -n {} {} -- nslookup {lookup}",
                q(&o.namespace),
                q(name),
            ));
        }
    }
    if calls.is_empty() {
        return Ok(());
    }
    let (_, out, _) = budget
        .run(
            session,
            &exec_script(&calls),
            "kubectl exec",
            budget.call * exec_rounds(calls.len()),
            false,
            stop,
        )
        .await?;
    let mut answered: BTreeMap<usize, (u32, String)> = BTreeMap::new();
    for l in out.lines() {
        let mut w = l.split(' ');
        if w.next() != Some("KWCHECK") {
            continue;
        }
        let (Some(id), Some(rc)) = (
            w.next().and_then(|x| x.parse::<usize>().ok()),
            w.next().and_then(|x| x.parse::<u32>().ok()),
        ) else {
            continue;
        };
        use base64::Engine;
        let text = base64::engine::general_purpose::STANDARD
            .decode(w.next().unwrap_or_default())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        answered.insert(id, (rc, text));
    }
    for (id, (host, check)) in what.iter().enumerate() {
        let s = subjects_of(pods, host);
        let r = results
            .iter_mut()
            .find(|r| &r.host == host)
            .expect("result");
        let lookup = names.get(&id);
        match answered.get(&id) {
            None => r.check(check, Some(false), "no answer from kubectl exec"),
            Some((0, _)) if lookup.is_some() => r.check(
                check,
                Some(true),
                format!("{} resolves", lookup.map(String::as_str).unwrap_or_default()),
            ),
            Some((0, _)) => r.check(check, Some(true), "TCP connect"),
            Some((rc, _)) if exit_said(*rc, "kubectl exec", secs).is_some() => r.check(
                check,
                Some(false),
                exit_said(*rc, "kubectl exec", secs).unwrap_or_default(),
            ),
            Some((rc, text)) if lookup.is_some() && s.is_some_and(|s| s.host_dns) => r.check(
                check,
                None,
                format!(
                    "the transparent profile's pods use the host's DNS, not the cluster's (docs/windows.md, Pod IP and DNS): nslookup exit {rc}: {}",
                    said(text)
                ),
            ),
            Some((rc, text)) => r.check(check, Some(false), format!("exit {rc}: {}", said(text))),
        }
    }
    Ok(())
}

/// The checks' kubectl calls, at most `budget::EXEC_PARALLEL` at once:
/// each answers one line `KWCHECK <id> <exit> <output, base64>`, in a file
/// of its own until all are done (so lines never interleave).
fn exec_script(calls: &[String]) -> String {
    let mut script = String::from("d=$(mktemp -d) || exit 1\n");
    for (id, c) in calls.iter().enumerate() {
        script += &format!(
            "(o=$({c} 2>&1); printf 'KWCHECK {id} %s %s\\n' \"$?\" \"$(printf %s \"$o\" | base64 -w0)\" >\"$d/{id}\") &\n"
        );
        if (id + 1) % budget::EXEC_PARALLEL == 0 {
            script += "wait\n";
        }
    }
    script += "wait\ncat \"$d\"/* 2>/dev/null\nrm -rf \"$d\"\n";
    script
}

fn subjects_of<'a>(
    pods: &[(String, &K8sNode, String, &'a Subject)],
    host: &str,
) -> Option<&'a Subject> {
    pods.iter()
        .find(|(_, _, _, s)| s.host == host)
        .map(|(_, _, _, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = r#"{"items":[
      {"metadata":{"name":"h1","labels":{"kubernetes.io/os":"linux"}},"status":{"addresses":[{"type":"InternalIP","address":"198.18.1.2"}]}},
      {"metadata":{"name":"198.18.1.5","labels":{"kubernetes.io/os":"windows","node.kubernetes.io/windows-build":"10.0.17763"}},"status":{"addresses":[]}},
      {"metadata":{"name":"win2","labels":{"kubernetes.io/os":"windows","node.kubernetes.io/windows-build":"10.0.14393"}},"status":{"addresses":[{"type":"InternalIP","address":"198.18.1.6"}]}}
    ]}"#;

    fn subject(host: &str, os: Os, address: &str) -> Subject {
        Subject {
            host: host.into(),
            node: host.to_ascii_lowercase(),
            os,
            address: address.parse().unwrap(),
            pod_cidr: "198.19.1.0/24".parse().unwrap(),
            host_dns: false,
        }
    }

    fn options() -> Options {
        Options {
            namespace: "default".into(),
            images: BTreeMap::new(),
            domain: "cluster.local".into(),
            start_timeout: Duration::from_secs(60),
            call_timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn nodes_are_found_by_address_then_name_and_get_an_image_of_their_build() {
        let nodes = k8s_nodes(NODES).unwrap();
        let h1 = subject("H1", Os::Linux, "198.18.1.9");
        assert_eq!(node_of(&nodes, &h1).unwrap().name, "h1", "by name");
        let w1 = subject("win1", Os::Windows, "198.18.1.5");
        let n = node_of(&nodes, &w1).unwrap();
        assert_eq!((n.name.as_str(), n.build), ("198.18.1.5", Some(17763)));
        assert_eq!(image_for(&options(), n, &w1).unwrap(), DEFAULT_IMAGE);
        // a 2016 node has no default: said, with the key to set
        let w2 = subject("win2", Os::Windows, "198.18.1.6");
        let n2 = node_of(&nodes, &w2).unwrap();
        let e = image_for(&options(), n2, &w2).unwrap_err();
        assert!(e.contains("cluster.pod_check.images.\"14393\""), "{e}");
        let mut o = options();
        o.images
            .insert("14393".into(), "example/probe:ltsc2016".into());
        assert_eq!(image_for(&o, n2, &w2).unwrap(), "example/probe:ltsc2016");
        assert!(node_of(&nodes, &subject("x", Os::Linux, "198.18.1.99")).is_none());
    }

    #[test]
    fn the_manifest_pins_each_pod_to_its_node_and_labels_the_run() {
        let nodes = k8s_nodes(NODES).unwrap();
        let w1 = subject("Win_1", Os::Windows, "198.18.1.5");
        let name = pod_name("ab12", &w1.host);
        assert_eq!(name, "kwinctl-ab12-win-1");
        let m = manifest(
            &options(),
            "ab12",
            &[(name, &nodes[1], DEFAULT_IMAGE.into(), &w1)],
        );
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        let p = &v["items"][0];
        assert_eq!(p["spec"]["nodeName"], "198.18.1.5");
        assert_eq!(p["spec"]["nodeSelector"]["kubernetes.io/os"], "windows");
        assert_eq!(p["metadata"]["labels"][RUN_LABEL], "ab12");
        assert_eq!(p["spec"]["containers"][0]["args"][1], "--http-port=8080");
        // one line: the heredoc's end marker cannot appear in it
        assert!(!m.contains('\n'));
    }

    #[test]
    fn the_selector_uses_the_os_label_the_node_carries() {
        // a 1.10 Windows node: only beta.kubernetes.io/os (kubernetes.io/os
        // came with 1.14); a node with no OS label: nodeName alone
        let nodes = k8s_nodes(
            r#"{"items":[
              {"metadata":{"name":"198.18.1.5","labels":{"beta.kubernetes.io/os":"windows"}},"status":{}},
              {"metadata":{"name":"198.18.1.6","labels":{}},"status":{}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(nodes[0].os.as_deref(), Some("windows"));
        let w1 = subject("win1", Os::Windows, "198.18.1.5");
        let w2 = subject("win2", Os::Windows, "198.18.1.6");
        let m = manifest(
            &options(),
            "ab12",
            &[
                ("a".into(), &nodes[0], DEFAULT_IMAGE.into(), &w1),
                ("b".into(), &nodes[1], DEFAULT_IMAGE.into(), &w2),
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(
            v["items"][0]["spec"]["nodeSelector"],
            serde_json::json!({ "beta.kubernetes.io/os": "windows" })
        );
        assert_eq!(v["items"][1]["spec"]["nodeSelector"], serde_json::json!({}));
        assert_eq!(v["items"][1]["spec"]["nodeName"], "198.18.1.6");
    }

    #[test]
    fn a_windows_pod_is_asked_only_names_windows_resolves() {
        let names = |os| {
            dns_lookups(os, "cluster.local")
                .into_iter()
                .map(|(c, n)| format!("{c}={n}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Os::Linux),
            [
                "dns=kubernetes.default.svc.cluster.local",
                "dns-search=kubernetes.default"
            ]
        );
        assert_eq!(
            names(Os::Windows),
            ["dns=kubernetes.default.svc.cluster.local"]
        );
    }

    #[test]
    fn what_a_host_says_is_made_safe_and_short() {
        let s = said("line one\n\x1b[2Jcleared\u{202e}x ".repeat(40).as_str());
        assert!(!s.contains('\x1b') && !s.contains('\u{202e}'), "{s}");
        assert!(s.chars().count() <= 200, "{}", s.len());
    }
}
