//! The run's bootstrap token, made and deleted with `kubeadm token` on the
//! control plane over its SSH session (docs/research/bootstrap.md#bt-token,
//! #bt-join). The secret half is held as a [`Secret`] from the moment it is
//! read: it is never printed, logged or recorded; the token's id is public
//! (it names the Secret `bootstrap-token-<id>`) and is what messages show.

use std::time::Duration;

use crate::secret::Secret;
use crate::text::{clip, printable};
use crate::transport::Session;

/// How long a run's token lives at most when the run cannot delete it
/// (`kubeadm token create --ttl`): long enough for a slow join, short
/// enough that a forgotten one expires the same hour.
pub const TTL: Duration = Duration::from_secs(30 * 60);

/// What `kubeadm token create --description` records with the token.
pub const DESCRIPTION: &str = "kwinctl up: joins Windows nodes (deleted when the run ends)";

/// A bootstrap token: `<id>.<secret>`.
#[derive(Debug, Clone)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: Secret,
}

impl BootstrapToken {
    /// A token of the form `[a-z0-9]{6}.[a-z0-9]{16}`
    /// (docs/research/bootstrap.md#bt-token), else `None`.
    pub fn parse(text: &str) -> Option<BootstrapToken> {
        let (id, secret) = text.trim().split_once('.')?;
        let ok = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        (ok(id, 6) && ok(secret, 16)).then(|| BootstrapToken {
            id: id.to_string(),
            secret: Secret::new(secret),
        })
    }
    /// The whole token, for the one file that carries it.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret.expose())
    }
}

/// The command that deletes token `id` by hand.
pub fn delete_command(id: &str) -> String {
    format!("kubeadm token delete {id}")
}

async fn sh(
    s: &mut dyn Session,
    script: &str,
    bound: Duration,
) -> Result<(u32, String, String), String> {
    match tokio::time::timeout(bound, s.run(script)).await {
        Ok(Ok(o)) => Ok((o.exit.unwrap_or(255), o.stdout, o.stderr)),
        Ok(Err(e)) => Err(format!("the control plane did not answer: {e}")),
        Err(_) => Err(format!(
            "the control plane did not answer within {}s",
            bound.as_secs()
        )),
    }
}

fn last_line(err: &str) -> String {
    clip(
        &printable(
            err.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or(""),
        ),
        300,
    )
}

/// `kubeadm token create --ttl TTL --description …` on the control plane;
/// `None` when the control plane has no kubeadm.
pub async fn create(
    s: &mut dyn Session,
    ttl: Duration,
    bound: Duration,
) -> Result<Option<BootstrapToken>, String> {
    let minutes = (ttl.as_secs() / 60).max(1);
    let script = format!(
        "command -v kubeadm >/dev/null 2>&1 || {{ echo 'kubeadm is not on the PATH' >&2; exit 127; }}\n\
         kubeadm token create --ttl {minutes}m --description {}\n",
        crate::render::sh_quote(DESCRIPTION)
    );
    let (code, out, err) = sh(s, &script, bound).await?;
    if code == 127 {
        return Ok(None);
    }
    if code != 0 {
        return Err(format!(
            "`kubeadm token create` failed on the control plane (exit {code}): {}; check that kubeadm can reach the API server there (its admin.conf)",
            last_line(&err)
        ));
    }
    // (the token is read before anything could print it)
    BootstrapToken::parse(out.lines().next().unwrap_or(""))
        .map(Some)
        .ok_or_else(|| {
            "`kubeadm token create` printed no token of the form <id>.<secret> on its first line"
                .to_string()
        })
}

/// `kubeadm token delete <id>`; an error says the id and the command to
/// run by hand.
pub async fn delete(s: &mut dyn Session, id: &str, bound: Duration) -> Result<(), String> {
    let script = format!("kubeadm token delete {}\n", crate::render::sh_quote(id));
    let fail = |why: String| {
        format!(
            "the run's bootstrap token {id} could not be deleted ({why}); delete it on the control plane: `{}` (it expires by itself within {} minutes)",
            delete_command(id),
            TTL.as_secs() / 60
        )
    };
    match sh(s, &script, bound).await {
        Ok((0, _, _)) => Ok(()),
        Ok((code, _, err)) => Err(fail(format!("exit {code}: {}", last_line(&err)))),
        Err(e) => Err(fail(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_parses_only_in_its_form_and_hides_its_secret() {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef\n").unwrap();
        assert_eq!(t.id, "abcdef");
        assert_eq!(t.expose(), "abcdef.0123456789abcdef");
        assert!(!format!("{t:?}").contains("0123456789abcdef"));
        assert_eq!(
            crate::secret::redact("x 0123456789abcdef"),
            format!("x {}", crate::secret::MASK)
        );
        for bad in [
            "abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef0",
            "",
        ] {
            assert!(BootstrapToken::parse(bad).is_none(), "{bad}");
        }
    }
}
