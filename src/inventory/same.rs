//! Whether two layers of the inventory give a key the same value (their
//! positions aside): what tells a clash between two groups from agreement.

use serde_saphyr::Spanned;

use super::raw::{RawBastion, RawBinary};

/// Equal as the inventory means it (positions aside).
pub(super) trait Same {
    fn same(&self, o: &Self) -> bool;
}

impl Same for String {
    fn same(&self, o: &Self) -> bool {
        self == o
    }
}
impl Same for u16 {
    fn same(&self, o: &Self) -> bool {
        self == o
    }
}
impl Same for u32 {
    fn same(&self, o: &Self) -> bool {
        self == o
    }
}
impl Same for RawBastion {
    fn same(&self, o: &Self) -> bool {
        let v = |s: &Option<Spanned<String>>| s.as_ref().map(|s| s.value.clone());
        self.address.value == o.address.value
            && self.user == o.user
            && self.port.as_ref().map(|p| p.value) == o.port.as_ref().map(|p| p.value)
            && v(&self.identity) == v(&o.identity)
            && v(&self.known_hosts) == v(&o.known_hosts)
    }
}
impl Same for Vec<String> {
    fn same(&self, o: &Self) -> bool {
        self == o
    }
}
impl Same for bool {
    fn same(&self, o: &Self) -> bool {
        self == o
    }
}
impl Same for RawBinary {
    fn same(&self, o: &Self) -> bool {
        self.url.as_ref().map(|u| &u.value) == o.url.as_ref().map(|u| &u.value)
            && self.path == o.path
            && self.sha256 == o.sha256
    }
}
