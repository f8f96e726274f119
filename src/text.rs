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
        if !ascii_kept(line, &mut out) {
            line_by_characters(line, &mut out);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One line as [`sanitize`] keeps it, character by character: controls
/// and bidi controls escaped, cut after [`MAX_LINE`] characters.
fn line_by_characters(line: &str, out: &mut String) {
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

/// An ASCII line without a control in the part [`sanitize`] keeps,
/// written to `out` in one copy (cut as the character loop cuts it: in
/// ASCII a character is a byte); false, and nothing written, for any other
/// line. A probe's transcript is mostly such lines, one of them (the
/// routes' JSON) longer than [`MAX_LINE`].
fn ascii_kept(line: &str, out: &mut String) -> bool {
    if !line.is_ascii() {
        return false;
    }
    let kept = &line[..line.len().min(MAX_LINE)];
    if kept.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return false;
    }
    out.push_str(kept);
    if line.len() > MAX_LINE {
        out.push_str(&format!("… ({} more characters)", line.len() - MAX_LINE));
    }
    true
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

/// [`safe_text`] of a text kwinctl owns: given back without a copy when
/// it holds no secret and nothing to make safe (a probe's transcript).
pub fn safe_text_owned(s: String) -> String {
    let redacted = match crate::secret::redact(&s) {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(r) => Some(r),
    };
    let s = redacted.unwrap_or(s);
    let sanitized = match sanitize(&s) {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(o) => Some(o),
    };
    sanitized.unwrap_or(s)
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
    let s: &str = &redacted;
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    // Bytes are copied in runs: only a string's quote, backslash, ASCII
    // control or non-ASCII character needs a look (JSON is mostly ASCII).
    let mut kept = 0; // s[kept..i] is still to be copied as it is
    let mut i = 0;
    let mut in_string = false;
    // s[kept..at] copied, then `with` in place of s[at..next]
    let replace = |out: &mut String, kept: &mut usize, at: usize, next: usize, with: &str| {
        out.push_str(&s[*kept..at]);
        out.push_str(with);
        *kept = next;
    };
    while i < b.len() {
        let c = b[i];
        if !in_string {
            in_string = c == b'"';
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_string = false;
                i += 1;
            }
            b'\\' => {
                let Some(&e) = b.get(i + 1) else { break };
                let control = match e {
                    b'b' => Some('\u{8}'),
                    b'f' => Some('\u{c}'),
                    b'r' => Some('\r'),
                    _ => None,
                };
                if let Some(d) = control {
                    replace(&mut out, &mut kept, i, i + 2, &json_escaped(d));
                    i += 2;
                    continue;
                }
                if e == b'u' {
                    // up to 4 characters (valid JSON: 4 hex digits)
                    let end = s[i + 2..]
                        .char_indices()
                        .nth(4)
                        .map_or(s.len(), |(n, _)| i + 2 + n);
                    let hex = &s[i + 2..end];
                    if let Some(d) = u32::from_str_radix(hex, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .filter(|&d| json_unsafe(d))
                    {
                        replace(&mut out, &mut kept, i, end, &json_escaped(d));
                    }
                    i = end;
                    continue;
                }
                // the escaped character is kept, whatever it is
                i += 1 + s[i + 1..].chars().next().map_or(1, char::len_utf8);
            }
            b'\n' | b'\t' | 0x20..0x7f => i += 1,
            0..0x20 | 0x7f => {
                replace(&mut out, &mut kept, i, i + 1, &json_escaped(c as char));
                i += 1;
            }
            _ => {
                let d = s[i..].chars().next().expect("a character starts here");
                let next = i + d.len_utf8();
                if json_unsafe(d) {
                    replace(&mut out, &mut kept, i, next, &json_escaped(d));
                }
                i = next;
            }
        }
    }
    out.push_str(&s[kept..]);
    out
}

/// What [`sanitize`] writes for `c`, as JSON string content.
fn json_escaped(c: char) -> String {
    if (c as u32) < 0x100 {
        format!("\\\\x{:02x}", c as u32)
    } else {
        format!("\\\\u{:04x}", c as u32)
    }
}

/// A character [`safe_json`] writes escaped inside a string.
fn json_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || bidi(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// [`sanitize`] as it was before its ASCII lines were copied whole:
    /// every line character by character.
    fn sanitize_by_characters(s: &str) -> String {
        let mut out = String::new();
        for (i, line) in s.split('\n').enumerate() {
            if i > 0 {
                out.push('\n');
            }
            line_by_characters(line, &mut out);
        }
        out
    }

    /// [`safe_json`] as it was before it copied runs of bytes: character
    /// by character.
    fn safe_json_by_characters(json: &str) -> String {
        let redacted = crate::secret::redact(json);
        let mut out = String::new();
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
                        'b' => out.push_str(&json_escaped('\u{8}')),
                        'f' => out.push_str(&json_escaped('\u{c}')),
                        'r' => out.push_str(&json_escaped('\r')),
                        'u' => {
                            let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                                Some(d) if json_unsafe(d) => out.push_str(&json_escaped(d)),
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
                c if json_unsafe(c) => out.push_str(&json_escaped(c)),
                c => out.push(c),
            }
        }
        out
    }

    /// Text made of what the judgements turn on: controls, bidi, escapes,
    /// quotes, hex digits, non-ASCII, and enough plain letters for lines
    /// around [`MAX_LINE`].
    fn tricky_text() -> impl Strategy<Value = String> {
        let c = prop_oneof![
            200 => Just('a'),
            3 => Just('\n'),
            2 => Just('\t'),
            2 => Just('"'),
            2 => Just('\\'),
            1 => Just('u'),
            1 => Just('b'),
            1 => Just('f'),
            1 => Just('r'),
            1 => Just('0'),
            1 => Just('1'),
            1 => Just('B'),
            1 => Just('+'),
            1 => Just('\r'),
            1 => Just('\u{1b}'),
            1 => Just('\u{7f}'),
            1 => Just('\u{9b}'),
            1 => Just('\u{202e}'),
            1 => Just('é'),
            1 => Just('😀'),
        ];
        proptest::collection::vec(c, 0..2500).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn sanitize_is_its_character_loop(s in tricky_text()) {
            prop_assert_eq!(sanitize(&s), sanitize_by_characters(&s));
        }

        #[test]
        fn safe_json_is_its_character_loop(s in tricky_text()) {
            prop_assert_eq!(safe_json(&s), safe_json_by_characters(&s));
            // and the JSON of that text, as kwinctl's reports carry it
            let json = serde_json::json!({ "s": s, "l": [&s] }).to_string();
            prop_assert_eq!(safe_json(&json), safe_json_by_characters(&json));
        }
    }

    #[test]
    fn clips_by_characters() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc…");
        assert_eq!(clip("ééé", 2), "éé…");
    }
}
