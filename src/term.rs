//! The operator's terminal: whether to colour, and how wide to lay out.
//!
//! Colour only on a terminal, and never with `NO_COLOR` set (no-color.org)
//! or `TERM=dumb`. Width: `COLUMNS` when set (as `ls` and most tools honour
//! it, also through a pipe), else the terminal's, else unbounded (a pipe gets
//! whole lines, for grep).

use std::io::IsTerminal;

/// How text output is styled, decided once per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
    /// Columns to fit tables into; `None`: no limit.
    pub width: Option<u16>,
}

impl Style {
    /// For stdout.
    pub fn stdout() -> Style {
        Style::decide(std::io::stdout().is_terminal(), |k| std::env::var(k).ok())
    }
    /// For stderr.
    pub fn stderr() -> Style {
        Style::decide(std::io::stderr().is_terminal(), |k| std::env::var(k).ok())
    }
    /// Plain: no colour, no width limit.
    pub fn plain() -> Style {
        Style {
            color: false,
            width: None,
        }
    }

    fn decide(terminal: bool, env: impl Fn(&str) -> Option<String>) -> Style {
        let no_color = env("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = env("TERM").is_some_and(|t| t == "dumb");
        let columns = env("COLUMNS").and_then(|c| c.trim().parse::<u16>().ok());
        // a terminal that reports no size (a pty nobody sized) has no limit
        let width = columns
            .or_else(|| terminal.then(crossterm_width).flatten())
            .filter(|c| *c > 0);
        Style {
            color: terminal && !no_color && !dumb,
            width,
        }
    }

    /// `word` in `color` when colouring.
    pub fn paint(&self, word: &str, color: Color) -> String {
        if self.color {
            format!("\x1b[{}m{word}\x1b[0m", color as u8)
        } else {
            word.to_string()
        }
    }
}

fn crossterm_width() -> Option<u16> {
    comfy_table::Table::new().width()
}

/// A column of a [`Grid`]: its header, a shorter one for narrow
/// terminals, and whether it may be left out there.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub short: &'static str,
    pub optional: bool,
}

impl Column {
    pub const fn new(name: &'static str) -> Column {
        Column {
            name,
            short: name,
            optional: false,
        }
    }
    /// Shown as `short` on a narrow terminal.
    pub const fn short(self, short: &'static str) -> Column {
        Column { short, ..self }
    }
    /// Left out on a narrow terminal.
    pub const fn optional(self) -> Column {
        Column {
            optional: true,
            ..self
        }
    }
}

/// A table laid out for the terminal: bordered when it fits, else without
/// borders (as kubectl prints), then with short headers and without the
/// optional columns, and only then wrapped. Cells are kwinctl's own text
/// (names validated at load, addresses, counts), coloured where asked.
pub struct Grid {
    columns: Vec<Column>,
    rows: Vec<Vec<(String, Option<Color>)>>,
}

impl Grid {
    pub fn new(columns: &[Column]) -> Grid {
        Grid {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }
    pub fn row(&mut self, cells: Vec<(String, Option<Color>)>) {
        debug_assert_eq!(cells.len(), self.columns.len());
        self.rows.push(cells);
    }

    pub fn render(&self, style: Style) -> String {
        let Some(width) = style.width else {
            return self.build(true, false, None, style.color);
        };
        let fits = |s: &str| {
            s.lines()
                .all(|l| unicode_width::UnicodeWidthStr::width(l) <= width as usize)
        };
        for (bordered, narrow) in [(true, false), (false, false), (false, true)] {
            if fits(&self.build(bordered, narrow, None, false)) {
                return self.build(bordered, narrow, None, style.color);
            }
        }
        self.build(false, true, Some(width), style.color)
    }

    fn build(&self, bordered: bool, narrow: bool, wrap: Option<u16>, color: bool) -> String {
        use comfy_table::{Cell, ContentArrangement, Table, presets};
        let keep: Vec<usize> = (0..self.columns.len())
            .filter(|i| !(narrow && self.columns[*i].optional))
            .collect();
        let mut t = Table::new();
        t.load_style(if bordered {
            presets::UTF8_BORDERS_ONLY
        } else {
            presets::NOTHING
        });
        t.set_header(keep.iter().map(|i| {
            let c = &self.columns[*i];
            if narrow { c.short } else { c.name }
        }));
        for r in &self.rows {
            t.add_row(keep.iter().map(|i| {
                let (text, paint) = &r[*i];
                let cell = Cell::new(text);
                match paint {
                    Some(c) if color => cell.fg(comfy_table::Color::AnsiValue(*c as u8 - 30)),
                    _ => cell,
                }
            }));
        }
        if !bordered {
            let last = keep.len().saturating_sub(1);
            for (i, c) in t.column_iter_mut().enumerate() {
                c.set_padding((0, if i == last { 0 } else { 2 }));
            }
        }
        if color {
            t.enforce_styling();
        } else {
            t.force_no_tty();
        }
        if let Some(w) = wrap {
            t.set_width(w);
            t.set_content_arrangement(ContentArrangement::Dynamic);
        }
        let s = t.to_string();
        if bordered {
            s
        } else {
            // no trailing blanks from the last column's alignment
            s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n")
        }
    }
}

/// ANSI foreground colours kwinctl uses for status words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Color {
    Red = 31,
    Green = 32,
    Yellow = 33,
    Magenta = 35,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(terminal: bool, vars: &[(&str, &str)]) -> Style {
        Style::decide(terminal, |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color_or_dumb() {
        assert!(with(true, &[("TERM", "xterm")]).color);
        assert!(!with(false, &[("TERM", "xterm")]).color, "a pipe");
        assert!(!with(true, &[("NO_COLOR", "1")]).color);
        // NO_COLOR set but empty does not count (no-color.org)
        assert!(with(true, &[("NO_COLOR", "")]).color);
        assert!(!with(true, &[("TERM", "dumb")]).color);
        assert_eq!(with(false, &[("COLUMNS", "80")]).width, Some(80));
        assert_eq!(with(false, &[("COLUMNS", "x")]).width, None);
        assert_eq!(
            with(false, &[("COLUMNS", "0")]).width,
            None,
            "no size: no limit"
        );
        let s = with(true, &[]);
        assert_eq!(s.paint("failed", Color::Red), "\x1b[31mfailed\x1b[0m");
        assert_eq!(Style::plain().paint("failed", Color::Red), "failed");
    }
}
