//! Typed facts parsed from a probe's JSON, per OS.
//!
//! A probe prints one line `KWINCTL-FACTS {json}`. Anything else on stdout
//! (motd, shell noise) is ignored. Facts that are not what the probe promises
//! fail the host with a message; they never panic.

mod linux;
pub mod windows;

pub use linux::*;
