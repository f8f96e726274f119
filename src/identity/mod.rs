//! Who a Windows node is to the cluster: the name it registers as
//! (`name.rs`), the client certificate it holds (`cert.rs`) and whether
//! the cluster's CA signed it (`issuer.rs`).

pub mod cert;
pub mod issuer;
pub mod name;
