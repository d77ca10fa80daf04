//! Local input-token estimates for `count_tokens` when the provider cannot count.
//!
//! Text is counted with OpenAI's `o200k_base` BPE (tiktoken-rs, which bundles its vocabulary:
//! nothing is downloaded). The framing follows OpenAI's published chat accounting (3 tokens per
//! message, 3 to prime the reply); tools count their name, description and JSON schema; images
//! use Anthropic's formula `width * height / 750` (after its downscale to a 1568-pixel long edge)
//! when the base64 PNG/JPEG/GIF/WebP header gives the size, else [`IMAGE_FALLBACK`].
//!
//! Claude models use another tokenizer, which is not public. Their estimate is the o200k count
//! times [`CLAUDE_FACTOR`] plus Anthropic's documented tool-use system prompt when tools are
//! present. The factor is a calibration assumption, not a measurement made here (no Anthropic
//! count was reachable when it was chosen); see `tests/fixtures/count_tokens/README.md`.

use base64::Engine as _;

use serde_json::Value;

use crate::model::{ImageSource, Part, Request, ToolChoice, ToolDef};

/// Tokens of an image whose size is unknown (a URL, or an unreadable header).
pub const IMAGE_FALLBACK: u64 = 1600;
/// Claude tokens per o200k token (assumed; see the module docs).
pub const CLAUDE_FACTOR: f64 = 1.20;
/// Anthropic's tool-use system prompt, added when tools are present (`auto`/`none` choice).
pub const CLAUDE_TOOLS_AUTO: u64 = 346;
/// The same for `any`/`tool` choice.
pub const CLAUDE_TOOLS_FORCED: u64 = 313;

const PER_MESSAGE: u64 = 3;
const REPLY_PRIMING: u64 = 3;
const PER_TOOL: u64 = 7;
const TOOLS_END: u64 = 12;

/// Tokens of `text` under o200k_base.
pub fn text_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let bpe = tiktoken_rs::o200k_base_singleton();
    bpe.encode_ordinary(text).len() as u64
}

/// Which tokenizer family to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// OpenAI and everything else: o200k as is.
    Openai,
    /// Claude: calibrated from o200k.
    Claude,
}

/// The estimated input tokens of `req`.
pub fn estimate(req: &Request, family: Family) -> u64 {
    let mut text = REPLY_PRIMING;
    let mut images = 0u64;
    for m in &req.messages {
        // The role name is one token in OpenAI's framing.
        text += PER_MESSAGE + 1;
        for p in &m.content {
            part_tokens(p, &mut text, &mut images);
        }
    }
    if !req.tools.is_empty() {
        for t in &req.tools {
            text += match family {
                Family::Openai => openai_tool_tokens(t),
                Family::Claude => json_tool_tokens(t),
            };
        }
        text += TOOLS_END;
    }
    match family {
        Family::Openai => text + images,
        Family::Claude => {
            let scaled = (text as f64 * CLAUDE_FACTOR).ceil() as u64;
            let tools = match (req.tools.is_empty(), &req.tool_choice) {
                (true, _) => 0,
                (false, Some(ToolChoice::Required | ToolChoice::Tool { .. })) => CLAUDE_TOOLS_FORCED,
                (false, _) => CLAUDE_TOOLS_AUTO,
            };
            scaled + tools + images
        }
    }
}

/// The tokenizer a model's usage is counted with when its provider reported none, and whether
/// that is the model's own (OpenAI's `o200k_base` models: GPT-4o, GPT-4.1, GPT-4.5, GPT-5, the
/// o-series, gpt-oss) or an approximation (Claude, calibrated from o200k; any other vendor's
/// model, o200k as is). `kind_is_anthropic` is the provider's kind.
pub fn model_tokenizer(kind_is_anthropic: bool, upstream: &str) -> (Family, bool) {
    let name = upstream.to_ascii_lowercase();
    let name = name.rsplit('/').next().unwrap_or(&name);
    if kind_is_anthropic || name.contains("claude") {
        return (Family::Claude, false);
    }
    let o200k = ["gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "gpt-oss"];
    let own = o200k
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', ':', '@'])));
    (Family::Openai, own)
}

/// The output tokens of an answer's content, counted like the input ([`estimate`]'s text rules):
/// text and visible thinking, each tool call's name and arguments as JSON.
pub fn output_tokens(content: &[Part], family: Family) -> u64 {
    let mut text = 0u64;
    for p in content {
        match p {
            Part::Text { text: t, .. } | Part::Thinking { text: t, .. } => text += text_tokens(t),
            Part::ToolUse { name, input, .. } => {
                text += text_tokens(name);
                text += match input {
                    Value::String(s) => text_tokens(s),
                    other => text_tokens(&other.to_string()),
                };
            }
            Part::RedactedThinking { .. } | Part::Image { .. } | Part::ToolResult { .. } => {}
        }
    }
    match family {
        Family::Openai => text,
        Family::Claude => (text as f64 * CLAUDE_FACTOR).ceil() as u64,
    }
}

/// The estimated input tokens of an Anthropic Messages body read as plain JSON, for a body the
/// request decoder does not accept: every message (and `system`) counts its framing and the text
/// of its string leaves (block `type`s, ids, signatures, cache controls and base64 data aside;
/// an image block counts [`IMAGE_FALLBACK`]); every tool its name, description and schema as
/// JSON text. Rougher than [`estimate`], and said to be an estimate all the same.
pub fn estimate_value(body: &Value, family: Family) -> u64 {
    let mut text = REPLY_PRIMING;
    let mut images = 0u64;
    if let Some(system) = body.get("system") {
        text += PER_MESSAGE + 1;
        leaf_tokens(system, &mut text, &mut images);
    }
    for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        text += PER_MESSAGE + 1;
        leaf_tokens(m.get("content").unwrap_or(&Value::Null), &mut text, &mut images);
    }
    let tools = body.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty());
    if let Some(tools) = tools {
        for t in tools {
            text += PER_TOOL;
            for key in ["name", "description"] {
                text += t.get(key).and_then(Value::as_str).map_or(0, text_tokens);
            }
            if let Some(schema) = t.get("input_schema") {
                text += text_tokens(&schema.to_string());
            }
        }
        text += TOOLS_END;
    }
    match family {
        Family::Openai => text + images,
        Family::Claude => {
            let forced = matches!(body.pointer("/tool_choice/type").and_then(Value::as_str), Some("any" | "tool"));
            let tools = match (tools.is_some(), forced) {
                (false, _) => 0,
                (true, true) => CLAUDE_TOOLS_FORCED,
                (true, false) => CLAUDE_TOOLS_AUTO,
            };
            (text as f64 * CLAUDE_FACTOR).ceil() as u64 + tools + images
        }
    }
}

fn leaf_tokens(v: &Value, text: &mut u64, images: &mut u64) {
    match v {
        Value::String(s) => *text += text_tokens(s),
        Value::Array(items) => items.iter().for_each(|i| leaf_tokens(i, text, images)),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("image") => *images += IMAGE_FALLBACK,
        Value::Object(o) => {
            for (k, v) in o {
                match k.as_str() {
                    "type" | "id" | "tool_use_id" | "signature" | "data" | "media_type" | "cache_control" => {}
                    // A tool call's input is JSON the model wrote.
                    "input" if !v.is_string() => *text += text_tokens(&v.to_string()),
                    _ => leaf_tokens(v, text, images),
                }
            }
        }
        _ => {}
    }
}

/// Claude sees tools as JSON: name, description and the schema's text.
fn json_tool_tokens(t: &ToolDef) -> u64 {
    let mut n = PER_TOOL + text_tokens(&t.name) + t.description.as_deref().map_or(0, text_tokens);
    if !t.parameters.is_null() {
        n += text_tokens(&serde_json::to_string(&t.parameters).unwrap_or_default());
    }
    n
}

/// OpenAI's compact rendering of function tools, as its cookbook counts it: `name:description`,
/// then `key:type:description` per property, enum items; other schema keywords as JSON text.
fn openai_tool_tokens(t: &ToolDef) -> u64 {
    let desc = t.description.as_deref().unwrap_or("");
    let mut n = PER_TOOL + text_tokens(&format!("{}:{}", t.name, desc.strip_suffix('.').unwrap_or(desc)));
    let Some(props) = t.parameters.get("properties").and_then(Value::as_object) else {
        return n;
    };
    if props.is_empty() {
        return n;
    }
    n += 3;
    for (key, schema) in props {
        n += 3;
        let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
        let d = schema.get("description").and_then(Value::as_str).unwrap_or("");
        if let Some(items) = schema.get("enum").and_then(Value::as_array) {
            n = n.saturating_sub(3);
            for item in items {
                n += 3 + text_tokens(item.as_str().unwrap_or(&item.to_string()));
            }
        }
        n += text_tokens(&format!("{key}:{ty}:{}", d.strip_suffix('.').unwrap_or(d)));
        let rest: serde_json::Map<String, Value> = schema
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "type" | "description" | "enum"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if !rest.is_empty() {
            n += text_tokens(&Value::Object(rest).to_string());
        }
    }
    n
}

fn part_tokens(p: &Part, text: &mut u64, images: &mut u64) {
    match p {
        Part::Text { text: t, .. } | Part::Thinking { text: t, .. } => *text += text_tokens(t),
        Part::RedactedThinking { .. } => {}
        Part::Image { source, .. } => *images += image_tokens(source),
        Part::ToolUse { name, input, .. } => {
            *text += text_tokens(name) + text_tokens(&serde_json::to_string(input).unwrap_or_default());
        }
        Part::ToolResult { content, .. } => {
            for c in content {
                part_tokens(c, text, images);
            }
        }
    }
}

/// Anthropic's image formula, from the size in the image header when it can be read.
pub fn image_tokens(source: &ImageSource) -> u64 {
    let ImageSource::Base64 { data, .. } = source else { return IMAGE_FALLBACK };
    // The header is near the start; JPEG's size marker may come after EXIF data, so decode a
    // generous prefix (a multiple of 4 characters).
    let prefix = &data[..data.len().min(64 * 1024)];
    let prefix = &prefix[..prefix.len() - prefix.len() % 4];
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(prefix) else { return IMAGE_FALLBACK };
    match image_size(&bytes) {
        Some((w, h)) => anthropic_image_tokens(w, h),
        None => IMAGE_FALLBACK,
    }
}

/// `w * h / 750` after scaling the long edge down to 1568 pixels.
pub fn anthropic_image_tokens(w: u32, h: u32) -> u64 {
    let (mut w, mut h) = (f64::from(w), f64::from(h));
    let long = w.max(h);
    if long > 1568.0 {
        let scale = 1568.0 / long;
        w = (w * scale).floor();
        h = (h * scale).floor();
    }
    ((w * h) / 750.0).ceil().max(1.0) as u64
}

/// Width and height from a PNG, GIF, WebP (VP8X/VP8/VP8L) or JPEG header.
pub fn image_size(b: &[u8]) -> Option<(u32, u32)> {
    let be32 = |i: usize| b.get(i..i + 4).map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]));
    let be16 = |i: usize| b.get(i..i + 2).map(|s| u32::from(u16::from_be_bytes([s[0], s[1]])));
    let le16 = |i: usize| b.get(i..i + 2).map(|s| u32::from(u16::from_le_bytes([s[0], s[1]])));
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some((be32(16)?, be32(20)?));
    }
    if b.starts_with(b"GIF8") {
        return Some((le16(6)?, le16(8)?));
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        let le24 = |i: usize| b.get(i..i + 3).map(|s| u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16);
        return match b.get(12..16)? {
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let v = b.get(21..25).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))?;
                Some(((v & 0x3fff) + 1, ((v >> 14) & 0x3fff) + 1))
            }
            _ => None,
        };
    }
    if b.starts_with(&[0xff, 0xd8]) {
        let mut i = 2;
        while i + 9 < b.len() {
            if b[i] != 0xff {
                i += 1;
                continue;
            }
            let marker = b[i + 1];
            if marker == 0xd8 || marker == 0x01 || (0xd0..=0xd7).contains(&marker) || marker == 0xff {
                i += if marker == 0xff { 1 } else { 2 };
                continue;
            }
            let len = be16(i + 2)? as usize;
            // Start-of-frame markers (not DHT 0xc4, JPG 0xc8, DAC 0xcc) carry the size.
            if (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
                return Some((be16(i + 7)?, be16(i + 5)?));
            }
            i += 2 + len;
        }
    }
    None
}

#[cfg(test)]
mod tests;
