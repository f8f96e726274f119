//! Who a Windows node is to the cluster: the name it registers as
//! (`name.rs`).

pub mod name;
