//! A streaming scanner that splits model text into plain text and fenced blocks that may be
//! actions. It holds back only what may still become such a block: a trailing run of up to two
//! backticks, an opening fence whose info string is still arriving (bounded), and the body of a
//! ```` ```json action ```` / ```` ```json ```` block until it closes. Everything else is released
//! at once, whatever the chunk boundaries were.

/// The longest info string (after the opening backticks) waited for before deciding.
const MAX_INFO: usize = 48;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Text(String),
    /// A fenced block that may be an action. `raw` is the whole block as the model wrote it
    /// (released as text when it turns out not to be one); `tagged` is true for an explicit
    /// action tag; `closed` is false for a block cut off by the end of the reply.
    Block {
        raw: String,
        body: String,
        tagged: bool,
        closed: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// ```` ```json action ```` and the like.
    Tagged,
    /// ```` ```json ```` or a bare ```` ``` ````: an action only if its content clearly is one.
    Candidate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Text,
    /// Seen an opening fence; `pending` holds the info string so far.
    Info,
    /// Inside a block that may be an action. `opener` is the fence line as written.
    Block {
        kind: Kind,
        opener: String,
        scanned: usize,
        in_str: bool,
        esc: bool,
        line_start: bool,
    },
    /// Inside another code block (```` ```python ````): released as it comes, until it closes.
    Code,
}

#[derive(Debug, Clone)]
pub struct Scanner {
    state: State,
    pending: String,
}

impl Default for Scanner {
    fn default() -> Scanner {
        Scanner { state: State::Text, pending: String::new() }
    }
}

/// The length of the longest suffix of `s` made of backticks, capped at 2 (a possible fence start).
fn trailing_ticks(s: &str) -> usize {
    s.bytes().rev().take_while(|b| *b == b'`').count().min(2)
}

fn classify(info: &str) -> Option<Kind> {
    let lower = info.trim().to_ascii_lowercase();
    let words: Vec<&str> = lower.split(|c: char| c.is_whitespace() || c == ':' || c == '-' || c == ',').collect();
    if words.iter().any(|w| matches!(*w, "action" | "tool" | "tool_call" | "tool_use" | "function_call")) {
        return Some(Kind::Tagged);
    }
    match lower.as_str() {
        "" | "json" | "json5" | "jsonc" => Some(Kind::Candidate),
        _ => None,
    }
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// True when some text is held back.
    pub fn holding(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn push(&mut self, text: &str, out: &mut Vec<Segment>) {
        self.pending.push_str(text);
        while self.step(out) {}
    }

    /// Ends the reply: releases what is held; an unclosed block is reported with `closed: false`.
    pub fn finish(&mut self, out: &mut Vec<Segment>) {
        let pending = std::mem::take(&mut self.pending);
        match std::mem::replace(&mut self.state, State::Text) {
            State::Text | State::Code => push_text(out, pending),
            State::Info => push_text(out, format!("```{pending}")),
            State::Block { kind, opener, .. } => out.push(Segment::Block {
                raw: format!("{opener}{pending}"),
                body: pending,
                tagged: kind == Kind::Tagged,
                closed: false,
            }),
        }
    }

    /// One step of progress; false when more input is needed.
    fn step(&mut self, out: &mut Vec<Segment>) -> bool {
        match &mut self.state {
            State::Text | State::Code => {
                let in_code = self.state == State::Code;
                if let Some(i) = self.pending.find("```") {
                    if in_code {
                        let text: String = self.pending.drain(..i + 3).collect();
                        push_text(out, text);
                        self.state = State::Text;
                    } else {
                        let text: String = self.pending.drain(..i).collect();
                        push_text(out, text);
                        self.pending.drain(..3);
                        self.state = State::Info;
                    }
                    return true;
                }
                let keep = trailing_ticks(&self.pending);
                let cut = self.pending.len() - keep;
                if cut > 0 {
                    let text: String = self.pending.drain(..cut).collect();
                    push_text(out, text);
                }
                false
            }
            State::Info => {
                // The info string ends at a newline, or where a JSON body starts on the same line.
                let end = self.pending.find(['\n', '{', '[']);
                let Some(end) = end else {
                    if self.pending.len() > MAX_INFO {
                        let text = format!("```{}", std::mem::take(&mut self.pending));
                        push_text(out, text);
                        self.state = State::Code;
                        return true;
                    }
                    return false;
                };
                let info = &self.pending[..end];
                match classify(info) {
                    Some(kind) => {
                        let header_len = if self.pending[end..].starts_with('\n') { end + 1 } else { end };
                        let opener = format!("```{}", &self.pending[..header_len]);
                        self.pending.drain(..header_len);
                        self.state =
                            State::Block { kind, opener, scanned: 0, in_str: false, esc: false, line_start: true };
                    }
                    None => {
                        let text = format!("```{}", &self.pending[..end]);
                        self.pending.drain(..end);
                        push_text(out, text);
                        self.state = State::Code;
                    }
                }
                true
            }
            State::Block { kind, opener, scanned, in_str, esc, line_start } => {
                let bytes = self.pending.as_bytes();
                let mut i = *scanned;
                while i < bytes.len() {
                    let b = bytes[i];
                    if b == b'`' && (!*in_str || *line_start) {
                        let rest = &bytes[i..];
                        if rest.len() < 3 && rest.iter().all(|c| *c == b'`') {
                            // Maybe a closing fence: wait for more.
                            *scanned = i;
                            return false;
                        }
                        if rest.starts_with(b"```") {
                            let body = self.pending[..i].to_owned();
                            let raw = format!("{opener}{body}```");
                            let tagged = *kind == Kind::Tagged;
                            self.pending.drain(..i + 3);
                            self.state = State::Text;
                            out.push(Segment::Block { raw, body, tagged, closed: true });
                            return true;
                        }
                    }
                    if *in_str {
                        if *esc {
                            *esc = false;
                        } else if b == b'\\' {
                            *esc = true;
                        } else if b == b'"' {
                            *in_str = false;
                        }
                    } else if b == b'"' {
                        *in_str = true;
                    }
                    if b == b'\n' {
                        *line_start = true;
                    } else if !(b == b' ' || b == b'\t' || b == b'\r') {
                        *line_start = false;
                    }
                    i += 1;
                }
                *scanned = i;
                false
            }
        }
    }
}

fn push_text(out: &mut Vec<Segment>, text: String) {
    if text.is_empty() {
        return;
    }
    if let Some(Segment::Text(t)) = out.last_mut() {
        t.push_str(&text);
    } else {
        out.push(Segment::Text(text));
    }
}
