//! Each Windows node's own identity (issue 35): bootstrap tokens made on
//! the control plane and kube-proxy's credential.

pub mod proxy;
pub mod secret_token;
pub mod token;
