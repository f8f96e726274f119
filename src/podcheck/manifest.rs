//! The pure half of the pod check: the nodes kubectl lists, each node's
//! image, the pods' manifest, and what a host printed made safe.

use super::{DEFAULT_IMAGE, DEFAULT_WINDOWS_BUILDS, Options, PORT, RUN_LABEL, Subject};
use crate::inventory::Os;

/// A node as `kubectl get nodes -o json` lists it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct K8sNode {
    pub(super) name: String,
    pub(super) os: Option<String>,
    /// The label that carries the node's OS: `kubernetes.io/os` (kubelets
    /// from 1.14 on, PR kubernetes#73333), else `beta.kubernetes.io/os`.
    pub(super) os_label: Option<&'static str>,
    pub(super) build: Option<u32>,
    pub(super) addresses: Vec<String>,
}

pub(super) fn k8s_nodes(json: &str) -> Result<Vec<K8sNode>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("kubectl get nodes: not JSON ({e})"))?;
    let items = v["items"].as_array().ok_or("kubectl get nodes: no items")?;
    Ok(items
        .iter()
        .map(|n| {
            let labels = &n["metadata"]["labels"];
            let os_label = OS_LABELS.iter().copied().find(|l| labels[*l].is_string());
            K8sNode {
                name: n["metadata"]["name"].as_str().unwrap_or_default().into(),
                os: os_label.and_then(|l| labels[l].as_str().map(str::to_string)),
                os_label,
                // node.kubernetes.io/windows-build: "10.0.17763"
                build: labels["node.kubernetes.io/windows-build"]
                    .as_str()
                    .and_then(|b| b.rsplit('.').next())
                    .and_then(|b| b.parse().ok()),
                addresses: n["status"]["addresses"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x["address"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect())
}

/// The labels a kubelet puts the node's OS in, newest first: from 1.14 on
/// `kubernetes.io/os`; before, only `beta.kubernetes.io/os`.
const OS_LABELS: [&str; 2] = ["kubernetes.io/os", "beta.kubernetes.io/os"];

/// The names a test pod looks up, each with its check's name: the
/// Service's full name everywhere, and on Linux also `kubernetes.default`,
/// which a Linux resolver expands with the pod's search list. A Windows
/// resolver takes a name with a dot as fully qualified and does not expand
/// it (kubernetes/website, "DNS resolution on Windows nodes";
/// docs/windows.md, Pod IP and DNS), so a Windows pod is not asked it.
pub(super) fn dns_lookups(os: Os, domain: &str) -> Vec<(&'static str, String)> {
    let mut out = vec![("dns", format!("kubernetes.default.svc.{domain}"))];
    if os == Os::Linux {
        out.push(("dns-search", "kubernetes.default".into()));
    }
    out
}

/// The Kubernetes node of an inventory host: by address, else by the name
/// it registers as (a Windows kubelet's --hostname-override), else by host
/// name, else named as its address (how kwinctl named Windows nodes before).
pub(super) fn node_of<'a>(nodes: &'a [K8sNode], s: &Subject) -> Option<&'a K8sNode> {
    let ip = s.address.to_string();
    nodes
        .iter()
        .find(|n| n.addresses.contains(&ip))
        .or_else(|| nodes.iter().find(|n| n.name == s.node))
        .or_else(|| nodes.iter().find(|n| n.name.eq_ignore_ascii_case(&s.host)))
        .or_else(|| nodes.iter().find(|n| n.name == ip))
}

/// The test pod's image for a node, or why there is none.
pub(super) fn image_for(o: &Options, n: &K8sNode, s: &Subject) -> Result<String, String> {
    if s.os == Os::Linux {
        return Ok(o
            .images
            .get("linux")
            .cloned()
            .unwrap_or(DEFAULT_IMAGE.into()));
    }
    let Some(build) = n.build else {
        // the label exists from Kubernetes 1.17 on
        return o.images.get("windows").cloned().ok_or_else(|| {
            format!(
                "node {} has no node.kubernetes.io/windows-build label (kubelets before 1.17 set none): set cluster.pod_check.images.windows to an image for its Windows build",
                n.name
            )
        });
    };
    if let Some(i) = o.images.get(&build.to_string()) {
        return Ok(i.clone());
    }
    if DEFAULT_WINDOWS_BUILDS.contains(&build) {
        return Ok(DEFAULT_IMAGE.into());
    }
    Err(format!(
        "no default test image for Windows build {build} (process isolation needs the host's build): set cluster.pod_check.images.\"{build}\" to an image for it that has agnhost and nslookup"
    ))
}

/// A pod name from a host name: a DNS label.
pub(super) fn pod_name(run: &str, host: &str) -> String {
    let h: String = host
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let h = h.trim_matches('-');
    let h = &h[..h.len().min(40)];
    format!("kwinctl-{run}-{h}")
}

pub(super) fn manifest(
    o: &Options,
    run: &str,
    pods: &[(String, &K8sNode, String, &Subject)],
) -> String {
    let items: Vec<serde_json::Value> = pods
        .iter()
        .map(|(name, node, image, s)| {
            // nodeName binds the pod; the selector, in the label the node
            // really carries, keeps a wrong binding from running (the
            // kubelet's admission fails a pod whose selector its node does
            // not match); a node with neither label gets none
            let os = if s.os == Os::Windows {
                "windows"
            } else {
                "linux"
            };
            let selector: serde_json::Map<String, serde_json::Value> = node
                .os_label
                .map(|l| (l.to_string(), serde_json::Value::from(os)))
                .into_iter()
                .collect();
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": o.namespace,
                    "labels": { RUN_LABEL: run, "app.kubernetes.io/managed-by": "kwinctl" },
                },
                "spec": {
                    "nodeName": node.name,
                    "nodeSelector": selector,
                    "tolerations": [{ "operator": "Exists" }],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "probe",
                        "image": image,
                        "args": ["netexec", format!("--http-port={PORT}")],
                    }],
                },
            })
        })
        .collect();
    serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string()
}

/// A shell word: single-quoted.
pub(super) fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What a host printed, safe and short, for a check's detail.
pub(super) fn said(s: &str) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::text::sanitize(&one).chars().take(200).collect()
}
