//! The minijinja environment over every OS's templates (embedded in the
//! binary by `build.rs` from `src/os/<os>/templates/`), with the quoting
//! filters.
//!
//! Templates only say *how* to do one action on one OS; which actions run is
//! decided by the diff. An action's template is found by its serde `kind`
//! (`<os>/<kind>.<ext>`) and rendered with the action itself as its context.
//! Every value that reaches a script goes through `sh` / `ps` (quoted) or
//! `sh_comment` / `ps_comment` (made safe for a comment line).

use minijinja::{Environment, UndefinedBehavior, Value, context};
use serde::Serialize;

include!(concat!(env!("OUT_DIR"), "/templates.rs"));

/// Quote a value for POSIX sh: always single quotes, `'` as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Quote a value for PowerShell: a single-quoted (verbatim) string. PowerShell
/// also takes the typographic single quotes as quote characters, so every one
/// of them is doubled too.
pub fn ps_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if matches!(c, '\'' | '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}') {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// A PowerShell array body: `'a', 'b'` (empty for no items).
pub fn ps_list<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|i| ps_quote(i.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Make a value safe inside a `#` comment: no line breaks or control chars.
pub fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The serde `kind` of an action: the name of its template and of the
/// simulator's handler.
pub fn kind_of<A: Serialize>(a: &A) -> String {
    match serde_json::to_value(a) {
        Ok(serde_json::Value::Object(m)) => m
            .get("kind")
            .and_then(|k| k.as_str())
            .map(str::to_string)
            .expect("an action serializes with a `kind`"),
        _ => panic!("an action serializes as an object"),
    }
}

pub struct Renderer {
    env: Environment<'static>,
}

impl Renderer {
    /// Every embedded template, the filters, and `globals` (constants the
    /// templates share, such as names kwinctl gives things on a host).
    pub fn new(globals: &[(&'static str, Value)]) -> Renderer {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        env.add_filter("sh", |v: String| sh_quote(&v));
        env.add_filter("sh_comment", |v: String| comment(&v));
        env.add_filter("ps", |v: String| ps_quote(&v));
        env.add_filter("ps_comment", |v: String| comment(&v));
        env.add_filter("ps_list", |v: Vec<String>| ps_list(&v));
        for (name, src) in TEMPLATES {
            env.add_template(name, src)
                .unwrap_or_else(|e| panic!("template {name}: {e}"));
        }
        for (k, v) in globals {
            env.add_global(*k, v.clone());
        }
        Renderer { env }
    }

    /// Whether a template exists (the contract test asks).
    pub fn has(&self, name: &str) -> bool {
        self.env.get_template(name).is_ok()
    }

    /// Render a template. Templates are embedded and tested: an error in one
    /// is a bug, hence the panic.
    pub fn render(&self, name: &str, ctx: Value) -> String {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .unwrap_or_else(|e| panic!("template {name}: {e:#}"))
    }

    /// An action's body: the template `<os>/<kind>.<ext>` with the action's
    /// fields (and `extra`, for what the action does not carry itself) as
    /// its context.
    pub fn action<A: Serialize>(&self, os: &str, ext: &str, a: &A, extra: Value) -> String {
        let name = format!("{os}/{}.{ext}", kind_of(a));
        self.render(&name, context! { ..extra, ..Value::from_serialize(a) })
    }
}

/// Every template's name (for the contract test).
pub fn template_names() -> impl Iterator<Item = &'static str> {
    TEMPLATES.iter().map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(comment("a\nrm -rf /"), "a?rm -rf /");
        assert_eq!(ps_quote("it’s"), "'it’’s'");
        assert_eq!(ps_list(&["a", "b'"]), "'a', 'b'''");
    }

    #[test]
    fn actions_render_by_kind_with_extra_context() {
        #[derive(Serialize)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        enum A {
            AddRoute { dst: String, via: String },
        }
        let r = Renderer::new(&[("route_proto", Value::from(198))]);
        let a = A::AddRoute {
            dst: "198.19.1.0/24".into(),
            via: "198.18.1.3".into(),
        };
        assert_eq!(kind_of(&a), "add_route");
        assert_eq!(
            r.action("linux", "sh", &a, Value::UNDEFINED).trim_end(),
            "ip -4 route replace '198.19.1.0/24' via '198.18.1.3' proto 198"
        );
    }
}
