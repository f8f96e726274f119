//! A bootstrap token as the join holds it (docs/research/bootstrap.md#bt-token).

use crate::secret::Secret;

/// A bootstrap token `<id>.<secret>`: the id is public (it names the
/// Secret), the secret half is held as a [`Secret`].
pub struct BootstrapToken {
    pub id: String,
    pub secret: Secret,
}
