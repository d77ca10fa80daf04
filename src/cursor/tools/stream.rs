//! Streamed tool arguments: [`FieldStream`] follows the JSON text of a tool call's arguments as
//! the model streams it and yields the decoded text of one top-level string field as it grows
//! (`contents` of `write_file`), so the edit card can show the new file while the model writes
//! it (`tool_call_delta{edit_tool_call_delta{stream_content_delta}}`).
//!
//! It is a small incremental JSON scanner: one pass over each chunk, constant state, no
//! re-parsing of what came before. Input that is not a JSON object, or whose field is not a
//! string, yields nothing; an escape split across chunks waits for its rest. It never panics.

/// Where the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between tokens.
    Between,
    /// Inside a string (a key, or a value we do not want).
    InString { escape: bool },
    /// Inside the wanted field's value string.
    InValue,
    /// The wanted value ended, or the input is not an object: nothing more to yield.
    Done,
}

/// Yields the decoded text of the top-level string field `key` as it streams.
#[derive(Debug)]
pub struct FieldStream {
    key: &'static str,
    state: State,
    depth: u32,
    /// The current top-level key (while reading it) and whether the next value belongs to `key`.
    current_key: String,
    reading_key: bool,
    expect_value: bool,
    /// An escape sequence inside the value, not complete yet (starts with `\`).
    pending: String,
    /// A high surrogate waiting for its low half.
    high: Option<u16>,
}

impl FieldStream {
    pub fn new(key: &'static str) -> FieldStream {
        FieldStream {
            key,
            state: State::Between,
            depth: 0,
            current_key: String::new(),
            reading_key: false,
            expect_value: false,
            pending: String::new(),
            high: None,
        }
    }

    /// Feeds the next chunk of argument text; returns the newly decoded value text (may be empty).
    pub fn push(&mut self, chunk: &str) -> String {
        let mut out = String::new();
        for c in chunk.chars() {
            match self.state {
                State::Done => break,
                State::InValue => self.value_char(c, &mut out),
                State::InString { escape } => {
                    if escape {
                        self.state = State::InString { escape: false };
                        if self.reading_key {
                            self.current_key.push(c);
                        }
                    } else if c == '\\' {
                        self.state = State::InString { escape: true };
                    } else if c == '"' {
                        self.state = State::Between;
                        if self.reading_key {
                            self.reading_key = false;
                        }
                    } else if self.reading_key {
                        self.current_key.push(c);
                    }
                }
                State::Between => self.between(c),
            }
        }
        out
    }

    fn between(&mut self, c: char) {
        match c {
            '{' | '[' => {
                if self.depth == 0 && c == '[' {
                    self.state = State::Done;
                    return;
                }
                self.depth += 1;
                self.expect_value = false;
            }
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.state = State::Done;
                }
            }
            ':' if self.depth == 1 => self.expect_value = self.current_key == self.key,
            ',' if self.depth == 1 => {
                self.current_key.clear();
                self.expect_value = false;
            }
            '"' => {
                if self.depth == 1 && self.expect_value {
                    self.state = State::InValue;
                    self.expect_value = false;
                } else {
                    // A key at depth 1 comes when no value is expected.
                    self.reading_key = self.depth == 1 && self.current_key.is_empty();
                    self.state = State::InString { escape: false };
                }
            }
            c if c.is_whitespace() => {}
            _ => {
                if self.depth == 0 {
                    self.state = State::Done;
                } else if self.depth == 1 {
                    // A non-string value (number, bool, null): the wanted field is not a string.
                    self.expect_value = false;
                }
            }
        }
    }

    fn value_char(&mut self, c: char, out: &mut String) {
        if self.pending.is_empty() {
            match c {
                '"' => {
                    self.flush_high(out);
                    self.state = State::Done;
                }
                '\\' => self.pending.push(c),
                _ => {
                    self.flush_high(out);
                    out.push(c);
                }
            }
            return;
        }
        self.pending.push(c);
        let simple = match self.pending.as_str() {
            "\\n" => Some('\n'),
            "\\t" => Some('\t'),
            "\\r" => Some('\r'),
            "\\b" => Some('\u{8}'),
            "\\f" => Some('\u{c}'),
            "\\\"" => Some('"'),
            "\\\\" => Some('\\'),
            "\\/" => Some('/'),
            _ => None,
        };
        if let Some(ch) = simple {
            self.pending.clear();
            self.flush_high(out);
            out.push(ch);
            return;
        }
        if !self.pending.starts_with("\\u") {
            // An invalid escape: keep its text as is.
            self.flush_high(out);
            out.push_str(&self.pending);
            self.pending.clear();
            return;
        }
        if self.pending.len() < 6 {
            return;
        }
        let unit = u16::from_str_radix(&self.pending[2..], 16).ok();
        self.pending.clear();
        match unit {
            Some(u) if (0xD800..0xDC00).contains(&u) => {
                self.flush_high(out);
                self.high = Some(u);
            }
            Some(u) if (0xDC00..0xE000).contains(&u) => {
                let ch = self.high.take().and_then(|h| char::decode_utf16([h, u]).next().and_then(Result::ok));
                out.push(ch.unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            Some(u) => {
                self.flush_high(out);
                out.push(char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            None => {
                self.flush_high(out);
                out.push(char::REPLACEMENT_CHARACTER);
            }
        }
    }

    /// A high surrogate without its low half becomes U+FFFD.
    fn flush_high(&mut self, out: &mut String) {
        if self.high.take().is_some() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}
