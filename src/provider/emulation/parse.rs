//! Reads one action block's JSON into tool calls, accepting the shapes models really produce,
//! and maps the names models invent onto the declared tools.

use serde_json::{Map, Value};

/// A parsed tool call: the declared tool's name and the arguments object.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: Value,
}

/// Why a block that claimed to be an action could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// Keys that hold the arguments, in the order they are tried.
const ARG_KEYS: &[&str] = &["parameters", "arguments", "input", "args", "params", "action_input", "tool_input"];
/// Keys that hold the tool's name, in the order they are tried.
const NAME_KEYS: &[&str] = &["tool", "name", "tool_name", "action", "function"];

/// The declared tool names plus the shipped synonym table.
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    declared: Vec<String>,
    groups: Vec<Vec<String>>,
}

/// The shipped synonym groups (`aliases.txt`).
const ALIASES: &str = include_str!("aliases.txt");

impl ToolNames {
    pub fn new(declared: Vec<String>) -> ToolNames {
        let groups = ALIASES
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(str::to_ascii_lowercase).collect())
            .collect();
        ToolNames { declared, groups }
    }

    pub fn declared(&self) -> &[String] {
        &self.declared
    }

    /// The declared name `name` stands for: exact, then case-insensitive, then through a synonym
    /// group that holds exactly one declared tool. `None` when nothing matches.
    pub fn resolve(&self, name: &str) -> Option<String> {
        let name = name.trim();
        if let Some(d) = self.declared.iter().find(|d| *d == name) {
            return Some(d.clone());
        }
        let lower = name.to_ascii_lowercase();
        if let Some(d) = self.declared.iter().find(|d| d.to_ascii_lowercase() == lower) {
            return Some(d.clone());
        }
        let group = self.groups.iter().find(|g| g.contains(&lower))?;
        let mut hits = self.declared.iter().filter(|d| group.contains(&d.to_ascii_lowercase()));
        let first = hits.next()?;
        hits.next().is_none().then(|| first.clone())
    }

    /// `name` mapped onto a declared tool when possible, else unchanged (the client then reports
    /// the unknown tool, which the model can read and correct).
    pub fn canonical(&self, name: &str) -> String {
        self.resolve(name).unwrap_or_else(|| name.trim().to_owned())
    }
}

/// Parses a block body. `tagged` blocks (```` ```json action ````) must hold an action: anything
/// else is [`Malformed`]. Untagged ```` ```json ```` blocks count only when they clearly are an
/// action (a `tool` key, or a name key naming a declared tool); otherwise `Ok(None)`.
pub fn parse_block(body: &str, tagged: bool, names: &ToolNames) -> Result<Option<Vec<ParsedCall>>, Malformed> {
    let text = body.trim();
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return if tagged { Err(Malformed(format!("the block is not valid JSON ({e})"))) } else { Ok(None) };
        }
    };
    let objects: Vec<&Map<String, Value>> = match &value {
        Value::Object(o) => match o.get("tool_calls").or_else(|| o.get("actions")) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_object).collect(),
            _ => vec![o],
        },
        Value::Array(items) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    };
    if objects.is_empty() {
        return if tagged { Err(Malformed("the block holds no JSON object".into())) } else { Ok(None) };
    }
    let mut calls = Vec::new();
    for o in objects {
        match parse_object(o, tagged, names) {
            Ok(Some(c)) => calls.push(c),
            Ok(None) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(calls))
}

fn parse_object(o: &Map<String, Value>, tagged: bool, names: &ToolNames) -> Result<Option<ParsedCall>, Malformed> {
    // OpenAI's own shape: {"function": {"name": ..., "arguments": ...}}.
    if let Some(Value::Object(f)) = o.get("function") {
        return parse_object(f, tagged, names);
    }
    let Some((key, name)) = NAME_KEYS.iter().find_map(|k| o.get(*k).and_then(Value::as_str).map(|n| (*k, n))) else {
        return if tagged {
            Err(Malformed("the action names no tool (expected a \"tool\" key)".into()))
        } else {
            Ok(None)
        };
    };
    if name.trim().is_empty() {
        return if tagged { Err(Malformed("the tool name is empty".into())) } else { Ok(None) };
    }
    // Untagged blocks must be unmistakable: a `tool` key, or a declared tool's name.
    if !tagged && key != "tool" && names.resolve(name).is_none() {
        return Ok(None);
    }
    let arguments = match ARG_KEYS.iter().find_map(|k| o.get(*k)) {
        Some(Value::Object(a)) => Value::Object(a.clone()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(a)) => Value::Object(a),
            _ if s.trim().is_empty() => Value::Object(Map::new()),
            _ => return Err(Malformed(format!("the arguments of `{name}` are a string that is not a JSON object"))),
        },
        Some(Value::Null) => Value::Object(Map::new()),
        Some(_) => return Err(Malformed(format!("the arguments of `{name}` are not a JSON object"))),
        None => {
            // Top-level arguments: everything but the name key.
            let rest: Map<String, Value> =
                o.iter().filter(|(k, _)| *k != key).map(|(k, v)| (k.clone(), v.clone())).collect();
            Value::Object(rest)
        }
    };
    Ok(Some(ParsedCall { name: names.canonical(name), arguments }))
}

/// Phrases by which a model says it cannot use tools (lowercase, ASCII apostrophes).
const REFUSALS: &[&str] = &[
    "cannot use tools",
    "can't use tools",
    "unable to use tools",
    "don't have access to tools",
    "do not have access to tools",
    "don't have access to any tools",
    "do not have access to any tools",
    "don't have the ability to",
    "do not have the ability to",
    "cannot execute commands",
    "can't execute commands",
    "cannot run commands",
    "can't run commands",
    "unable to execute",
    "cannot access your file",
    "can't access your file",
    "cannot access the file system",
    "can't access the file system",
    "don't have access to your file",
    "do not have access to your file",
    "cannot call functions",
    "can't call functions",
    "as an ai language model",
    "i'm just a language model",
    "i am just a language model",
];

/// True when `text` reads like a refusal to use the tools.
pub fn is_refusal(text: &str) -> bool {
    let lower = text.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'");
    REFUSALS.iter().any(|p| lower.contains(p))
}
