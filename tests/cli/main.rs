//! The root-free tests in one binary: the CLI, the inventory and its
//! imports, rendering and the PowerShell checks, properties, SSH
//! resolution and trust against OpenSSH, Ansible against ansible-inventory,
//! the source tree's structure and the documentation. One test binary
//! instead of one per file: a one-line change relinks it once
//! (docs/testing.md). Run one file's tests with `cargo test --test cli --
//! powershell::`.

#[path = "../common/mod.rs"]
mod common;

mod ansible_differential;
mod check_vendor;
mod cli;
mod cli_binaries;
mod cli_checksums;
mod cli_conventions;
mod cli_files;
mod cli_graph;
mod cli_help;
mod cli_identity;
mod cli_import;
mod cli_import_winssh;
mod cli_init;
mod cli_push_cache;
mod cli_record;
mod cli_select;
mod cli_ssh_env;
mod cli_stdout;
mod docs;
mod https_fixture;
mod powershell;
mod properties;
mod ps51;
mod ssh_config;
mod ssh_differential;
mod structure;
mod windows_versions;
