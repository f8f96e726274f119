//! Upgrading a running cluster's Windows nodes (issue 36): a change of the
//! declared Kubernetes release is an upgrade, judged against the version
//! skew policy before any host changes (`skew.rs`; the policy's rows are in
//! `os/windows/k8s.yaml`, its sources in docs/research/upgrade.md).

pub mod skew;
