//! kwinctl: bootstrap Kubernetes clusters with Windows Server and Linux
//! workers.
//!
//! Data flow: inventory → plan → facts → diff → render/apply → verify → report.

pub mod diff;
pub mod facts;
pub mod inventory;
pub mod lock;
pub mod plan;
pub mod record;
pub mod render;
pub mod report;
pub mod run;
pub mod transport;
pub mod verify;
