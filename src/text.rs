//! Text helpers shared by every layer.

/// Shorten text for one line of output (`max` characters, then `…`).
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

/// Text a host sent, with its control characters removed (it must never
/// steer the operator's terminal).
pub fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// `s` made printable line by line (a command's output kept as lines).
pub fn printable_lines(s: &str) -> String {
    s.lines().map(printable).collect::<Vec<_>>().join("\n")
}

/// The last non-blank line of `err` (what a command said last), clipped to
/// 300 characters, for a message.
pub fn last_line(err: &str) -> String {
    clip(
        err.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(""),
        300,
    )
}

/// A value quoted in a message: at most 64 characters of it, saying how
/// long it was when it was longer (an error never echoes a value whole).
pub fn echo(s: &str) -> String {
    let n = s.chars().count();
    if n <= 64 {
        format!("{:?}", s)
    } else {
        format!("{:?} ({n} characters)", clip(s, 64))
    }
}

/// The longest line [`sanitize`] keeps whole.
pub const MAX_LINE: usize = 1000;

/// Characters that reorder text on a terminal (bidi controls): a host could
/// make a message read other than it is.
fn bidi(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Text that came from a host, made safe to print: every control character
/// (C0 but for line feed and tab, DEL, C1) and every bidi control is shown
/// escaped (`\x1b`, `\u202e`) so no escape sequence reaches the terminal
/// and nothing reorders a line; lines longer than [`MAX_LINE`] characters
/// are cut, saying how much was left out. Everything else is kept.
pub fn sanitize(s: &str) -> std::borrow::Cow<'_, str> {
    if clean(s) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let total = line.chars().count();
        for (n, c) in line.chars().enumerate() {
            if n == MAX_LINE {
                out.push_str(&format!("… ({} more characters)", total - n));
                break;
            }
            match c {
                '\t' => out.push(c),
                c if (c as u32) < 0x100 && c.is_control() => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if c.is_control() || bidi(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether [`sanitize`] keeps `s` as it is. Every call's script and output
/// go through it on their way to the run record: ASCII text (a probe's, in
/// practice) is judged in one pass over its bytes, other text character by
/// character.
fn clean(s: &str) -> bool {
    if !s.is_ascii() {
        return s
            .chars()
            .all(|c| (!c.is_control() || c == '\n' || c == '\t') && !bidi(c))
            && s.lines().all(|l| l.len() <= MAX_LINE);
    }
    // ASCII: the controls are below 0x20 and 0x7f; no bidi control; a line
    // is its bytes (a `\r` ending one is a control: not clean either way)
    let mut line = 0;
    for &b in s.as_bytes() {
        match b {
            b'\n' => line = 0,
            b'\t' => line += 1,
            0..0x20 | 0x7f => return false,
            _ => line += 1,
        }
        if line > MAX_LINE {
            return false;
        }
    }
    true
}

/// Output for the operator's terminal: secrets masked, then made safe
/// (see [`sanitize`]).
pub fn safe_text(s: &str) -> String {
    sanitize(&crate::secret::redact(s)).into_owned()
}

/// JSON text made safe like [`safe_text`]: secrets masked, and in every
/// string (keys too) each control character but line feed and tab, and
/// each bidi control, written as [`sanitize`] writes it (`\x1b`,
/// `\u202e`, as text): a value decoded by `jq -r` or any JSON reader shows
/// the escape, never the character. Whether JSON wrote the character raw
/// (DEL, C1, bidi) or as an escape (`\u001b`, `\r`) makes no difference.
/// Everything else is kept as it was; the document stays valid JSON.
pub fn safe_json(json: &str) -> String {
    let redacted = crate::secret::redact(json);
    let mut out = String::with_capacity(redacted.len());
    // what `sanitize` writes for `c`, as JSON string content
    let escaped = |c: char| {
        if (c as u32) < 0x100 {
            format!("\\\\x{:02x}", c as u32)
        } else {
            format!("\\\\u{:04x}", c as u32)
        }
    };
    let unsafe_char = |c: char| (c.is_control() && c != '\n' && c != '\t') || bidi(c);
    let mut chars = redacted.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if !in_string {
            in_string = c == '"';
            out.push(c);
            continue;
        }
        match c {
            '"' => {
                in_string = false;
                out.push(c);
            }
            '\\' => {
                let Some(e) = chars.next() else {
                    out.push(c);
                    break;
                };
                match e {
                    'b' => out.push_str(&escaped('\u{8}')),
                    'f' => out.push_str(&escaped('\u{c}')),
                    'r' => out.push_str(&escaped('\r')),
                    'u' => {
                        let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(d) if unsafe_char(d) => out.push_str(&escaped(d)),
                            _ => {
                                out.push_str("\\u");
                                out.push_str(&hex);
                            }
                        }
                    }
                    e => {
                        out.push(c);
                        out.push(e);
                    }
                }
            }
            c if unsafe_char(c) => out.push_str(&escaped(c)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_every_control_and_bidi_character() {
        // every C0 but line feed and tab, DEL and every C1
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            if c == '\n' || c == '\t' {
                continue;
            }
            let s = format!("a{c}b");
            let out = sanitize(&s);
            assert!(!out.contains(c), "{:?} kept", c);
            assert_eq!(out, format!("a\\x{:02x}b", c as u32));
        }
        // OSC (title, clipboard), CSI (clear screen), bidi overrides
        let hostile = "x \u{1b}]0;TITLE\u{7}\u{1b}[2J\u{1b}]52;c;ZWNobw==\u{7}\u{9b}31m \u{202e}txt.exe\u{2066}";
        let out = sanitize(hostile);
        for bad in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}', '\u{2066}'] {
            assert!(!out.contains(bad), "{bad:?} in {out}");
        }
        assert_eq!(
            out,
            "x \\x1b]0;TITLE\\x07\\x1b[2J\\x1b]52;c;ZWNobw==\\x07\\x9b31m \\u202etxt.exe\\u2066"
        );
        // the rest is kept, lines too; long lines are cut
        assert_eq!(sanitize("é\tok\nnext"), "é\tok\nnext");
        let long = "y".repeat(MAX_LINE + 5);
        assert_eq!(
            sanitize(&long),
            format!("{}… (5 more characters)", "y".repeat(MAX_LINE))
        );
    }

    /// The one-pass judgement of ASCII text is the characters' judgement.
    #[test]
    fn clean_ascii_is_judged_as_every_character_is() {
        let slow = |s: &str| {
            s.chars()
                .all(|c| (!c.is_control() || c == '\n' || c == '\t') && !bidi(c))
                && s.lines().all(|l| l.len() <= MAX_LINE)
        };
        let mut cases: Vec<String> = (0u8..0x80)
            .map(|b| format!("ab{}cd\nef", b as char))
            .collect();
        for n in [MAX_LINE - 1, MAX_LINE, MAX_LINE + 1] {
            for tail in ["", "\n", "\nx", "\r\n", "\t", "\n\n"] {
                cases.push(format!("{}{tail}", "y".repeat(n)));
                cases.push(format!("x\n{}{tail}", "\t".repeat(n)));
            }
        }
        cases.push(String::new());
        cases.push("é".repeat(MAX_LINE / 2 + 1));
        cases.push("\u{202e}x".into());
        for s in &cases {
            assert_eq!(clean(s), slow(s), "{s:?}");
        }
    }

    #[test]
    fn safe_json_strings_decode_to_what_sanitize_prints() {
        let hostile =
            "a\u{1b}[2J\u{1b}]52;c;ZWNobw==\u{7}\r\u{8}\u{c}\u{9b}\u{202e}b\u{7f}\u{2066}";
        let v =
            serde_json::json!({"s": hostile, "n": ["ok\ttab\nline é \"q\" \\ 😀"], "k\u{1b}": 1});
        let text = safe_json(&v.to_string());
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        // decoded (as `jq -r` does), every string is what text output shows
        assert_eq!(back["s"], sanitize(hostile).as_ref());
        assert_eq!(back["n"][0], "ok\ttab\nline é \"q\" \\ 😀");
        assert_eq!(back["k\\x1b"], 1);
        fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::String(s) => out.push(s.clone()),
                serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
                serde_json::Value::Object(o) => o.iter().for_each(|(k, v)| {
                    out.push(k.clone());
                    strings(v, out)
                }),
                _ => {}
            }
        }
        let mut all = Vec::new();
        strings(&back, &mut all);
        for s in all {
            assert!(
                !s.chars()
                    .any(|c| (c.is_control() && c != '\n' && c != '\t') || bidi(c)),
                "{s:?}"
            );
        }
        // and the text itself carries none of them raw
        assert!(!text.chars().any(|c| c.is_control() || bidi(c)), "{text}");
    }

    #[test]
    fn clips_by_characters() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc…");
        assert_eq!(clip("ééé", 2), "éé…");
    }
}
