//! Upgrading a running cluster's Windows nodes (issue 36): a change of the
//! declared Kubernetes release is an upgrade, judged against the version
//! skew policy before any host changes (`skew.rs`; the policy's rows are in
//! `os/windows/k8s.yaml`, its sources in docs/research/upgrade.md), and
//! made one node at a time with the node cordoned and drained around it
//! (`drain.rs`: the control plane's kubectl; the runner's side is
//! `run/upgrade.rs`); with `up --verify-pods` the node's test pod is
//! checked before it is uncordoned (`pods.rs`).

pub mod drain;
pub mod plan;
pub mod pods;
pub mod skew;
