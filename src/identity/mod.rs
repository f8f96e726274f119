//! Who a Windows node is to the cluster: the name it registers as
//! (`name.rs`) and the client certificate it holds (`cert.rs`).

pub mod cert;
pub mod name;
