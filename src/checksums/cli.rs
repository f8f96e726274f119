//! `kwinctl checksums -i INV [--write]`: after a version bump (new URLs in
//! the inventory), take the SHA-256 of every download whose publisher
//! kwinctl knows from its checksum file again, show the change as a diff,
//! and with `--write` write it into the inventory, keeping the rest of the
//! file as it was. `path:` entries and URLs of other publishers are left
//! alone (said so). `kwinctl init` fills its template the same way
//! ([`fill`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;

use super::edit::{self, Changed, Value};
use super::{Known, Source, recognise};
use crate::error::{CliError, Exit};
use crate::report::{err_line, plural};

/// Where the checksum files come from (shared by `init` and `checksums`).
#[derive(Args, Clone, Debug, Default)]
pub struct SourceArgs {
    /// For a download on a mirror laid out as BASE/HOST/PATH, fetch the
    /// checksum file beside the mirror's copy instead of from the
    /// publisher (for a machine that reaches only the mirror).
    #[arg(long)]
    pub from_mirror: bool,
    /// Also trust the CA certificates in this PEM file when fetching
    /// checksum files (a mirror behind a private CA); the built-in Mozilla
    /// roots are trusted anyway.
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
}

impl SourceArgs {
    pub fn source(&self) -> Source {
        Source {
            from_mirror: self.from_mirror,
            ca_file: self.ca_file.clone(),
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct ChecksumsArgs {
    /// The inventory file.
    #[arg(short = 'i', long = "inventory", value_name = "INV")]
    pub inventory: PathBuf,
    /// Write the new values into the inventory; without it the change is
    /// only shown (a diff) and nothing is written.
    #[arg(long)]
    pub write: bool,
    #[command(flatten)]
    pub source: SourceArgs,
}

pub const EX_CHECKSUMS: &str = "Examples:
  kwinctl checksums -i cluster.yaml              (show what would change; writes nothing)
  kwinctl checksums -i cluster.yaml --write
  kwinctl checksums -i cluster.yaml --from-mirror --ca-file mirror-ca.pem --write";

/// An inventory's text with the known downloads' SHA-256 set.
#[derive(Debug)]
pub struct Filled {
    pub text: String,
    pub changed: Vec<Changed>,
    /// How many `url:` entries have a publisher kwinctl knows.
    pub known: usize,
    /// The other `url:` entries: (line from 1, URL).
    pub unknown: Vec<(usize, String)>,
}

/// `text` with the `sha256:` of every `url:` entry whose publisher kwinctl
/// knows taken from its checksum file. Nothing is returned half done: a
/// checksum file that cannot be fetched or read fails the whole (exit 1),
/// an entry that cannot be edited too (exit 2).
pub fn fill(text: &str, source: &Source) -> Result<Filled, CliError> {
    let entries = edit::entries(text);
    let mut known: BTreeMap<String, Known> = BTreeMap::new();
    let mut unknown = Vec::new();
    for e in &entries {
        match recognise(&e.url) {
            Some(k) => {
                known.insert(e.url.clone(), k);
            }
            None => unknown.push((e.line + 1, e.url.clone())),
        }
    }
    let n_known = entries.len() - unknown.len();
    if known.is_empty() {
        return Ok(Filled {
            text: text.to_string(),
            changed: vec![],
            known: 0,
            unknown,
        });
    }
    let fetched =
        super::fetch(&known.values().collect::<Vec<_>>(), source).map_err(|e| CliError {
            exit: Exit::HostFailed,
            error: anyhow::anyhow!("{e}"),
        })?;
    let mut values = BTreeMap::new();
    for (url, k) in &known {
        let f = &fetched[&k.checksum_url(source.from_mirror)];
        values.insert(
            url.clone(),
            Value {
                sha256: f.sha256.clone(),
                from: f.url.clone(),
            },
        );
    }
    let (new, changed) = edit::set(text, &values).map_err(CliError::bad)?;
    // the same YAML but for the values: a file that parsed still parses
    let parses = |t: &str| serde_saphyr::from_str::<serde_json::Value>(t).is_ok();
    if parses(text) && !parses(&new) {
        return Err(CliError::internal(anyhow::anyhow!(
            "setting the sha256 values would break the inventory's YAML; nothing was written \
             (please report it, with the inventory's binaries section)"
        )));
    }
    Ok(Filled {
        text: new,
        changed,
        known: n_known,
        unknown,
    })
}

/// Replace `path`'s content with `text`, keeping its permissions: a temp
/// file beside it, renamed over it.
fn replace(path: &Path, text: &str) -> Result<(), CliError> {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let fail = |e: std::io::Error| {
        CliError::internal(anyhow::anyhow!(
            "cannot write {}: {e}; it is unchanged",
            path.display()
        ))
    };
    let perms = std::fs::metadata(&real).map_err(fail)?.permissions();
    let dir = real.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".kwinctl-checksums")
        .tempfile_in(dir)
        .map_err(fail)?;
    tmp.write_all(text.as_bytes())
        .and_then(|_| tmp.as_file().sync_all())
        .and_then(|_| tmp.as_file().set_permissions(perms))
        .map_err(fail)?;
    tmp.persist(&real).map_err(|e| fail(e.error))?;
    Ok(())
}

pub fn run(a: &ChecksumsArgs) -> Result<Exit, CliError> {
    let path = &a.inventory;
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::bad(format!("cannot read {}: {e}", path.display())))?;
    let filled = fill(&text, &a.source.source())?;
    for (line, url) in &filled.unknown {
        err_line(&crate::text::safe_text(&format!(
            "note: line {line}: {url}: kwinctl does not know this publisher's checksum files; \
             its sha256 stays as written (docs/inventory.md, \"Binaries\")"
        )));
    }
    if filled.known == 0 {
        err_line(&format!(
            "{}: no download from a publisher kwinctl knows (dl.k8s.io, containerd's or the CNI \
             plugins' GitHub releases); nothing to do",
            path.display()
        ));
        return Ok(Exit::Ok);
    }
    if filled.changed.is_empty() {
        err_line(&format!(
            "{}: every sha256 is already the one its checksum file gives ({})",
            path.display(),
            plural(filled.known, "download")
        ));
        return Ok(Exit::Ok);
    }
    let shown = path.display().to_string();
    let diff = similar::TextDiff::from_lines(&text, &filled.text)
        .unified_diff()
        .context_radius(2)
        .header(&shown, &shown)
        .to_string();
    let _ = crate::report::emit(crate::text::safe_text(&diff).as_bytes());
    let n = plural(filled.changed.len(), "sha256 value");
    if a.write {
        replace(path, &filled.text)?;
        err_line(&format!("wrote {n} to {shown}"));
    } else {
        err_line(&format!(
            "{n} would change (above); nothing written: run again with --write to write them"
        ));
    }
    Ok(Exit::Ok)
}
