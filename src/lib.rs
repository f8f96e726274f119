//! kwinctl: bootstrap Kubernetes clusters with Windows Server and Linux
//! workers.
//!
//! Data flow: inventory → alloc (pod CIDRs, state) → per host: probe (facts)
//! → diff → script → apply + re-probe → verify → report. Everything that
//! differs between operating systems is under `os/`; the runner (`run/`)
//! drives any OS through `os::NodeOps`; commands are in `cmd/`.

pub mod alloc;
pub mod blocking;
pub mod checksums;
pub mod cmd;
pub mod diff;
pub mod error;
pub mod events;
pub mod hash;
pub mod identity;
pub mod import;
pub mod inventory;
pub mod join;
pub mod kubectl;
pub mod localfile;
pub mod lock;
pub mod mesh;
pub mod mode;
pub mod os;
pub mod outcome;
pub mod podcheck;
pub mod probe;
pub mod record;
pub mod removal;
pub mod render;
pub mod report;
pub mod run;
pub mod secret;
pub mod select;
pub mod state;
pub mod stdout;
pub mod term;
pub mod text;
pub mod transfer;
pub mod transport;
pub mod upgrade;
pub mod verify;
pub mod wire;
