//! The tests that need root and the lab (network namespaces, sshd, the
//! simulated Windows hosts, systemd containers) in one binary, plus
//! `live_windows` (gated on its environment). Run one file's tests with
//! `cargo test --test lab -- lab_ssh::`, one test by its full name.

#[path = "../common/mod.rs"]
mod common;

mod lab_cpid;
mod lab_demo;
mod lab_facts;
mod lab_faults;
mod lab_guide;
mod lab_hostile;
mod lab_identity;
mod lab_import;
mod lab_interrupt;
mod lab_join;
mod lab_k8s;
mod lab_kerberos;
mod lab_kerberos_errors;
mod lab_l2bridge;
mod lab_lease;
mod lab_linux;
mod lab_lock;
mod lab_mesh;
mod lab_move;
mod lab_plan;
mod lab_pods;
mod lab_pods_bounds;
mod lab_proof;
mod lab_push;
mod lab_ready;
mod lab_reset;
mod lab_rolling;
mod lab_schema;
mod lab_script;
mod lab_skew;
mod lab_ssh;
mod lab_state;
mod lab_stdout;
mod lab_systemd;
mod lab_trace;
mod lab_upgrade;
mod lab_vswitch;
mod lab_windows;
mod lab_windows_fidelity;
mod lab_windows_k8sfix;
mod lab_winssh;
mod live_windows;
