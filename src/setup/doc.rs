//! Format-preserving edits of client config files: JSON with comments (through the CST of
//! `jsonc-parser`) and TOML (through `toml_edit`). Values go in and come out as
//! [`serde_json::Value`]; a key is a path of object or table names from the root.
//!
//! Invariant: only the keys named in an edit change; comments, order, whitespace and every other
//! key stay byte for byte. An edit whose value is already in place changes nothing.

use std::path::Path;

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use serde_json::Value;

use crate::setup::SetupError;

/// The syntax of a client's config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Jsonc,
    Toml,
}

/// One change: set `path` to `value`, or remove it when `value` is `None`.
#[derive(Debug, Clone)]
pub(crate) struct Edit {
    pub path: Vec<String>,
    pub value: Option<Value>,
}

/// A parsed document that can be read and edited, then printed back.
#[derive(Debug)]
pub(crate) enum Doc {
    Jsonc(CstRootNode),
    Toml(toml_edit::DocumentMut),
}

fn shape(path: &Path, key: &[String], message: &str) -> SetupError {
    SetupError::Shape { path: path.to_path_buf(), key: key.join("."), message: message.to_owned() }
}

impl Doc {
    /// Parses `text`; an empty or whitespace-only file is an empty document.
    pub(crate) fn parse(format: Format, file: &Path, text: &str) -> Result<Doc, SetupError> {
        let parse_err = |message: String| SetupError::Parse { path: file.to_path_buf(), message };
        match format {
            Format::Jsonc => {
                let root = CstRootNode::parse(text, &ParseOptions::default()).map_err(|e| parse_err(e.to_string()))?;
                if let Some(v) = root.value()
                    && v.as_object().is_none()
                {
                    return Err(shape(file, &[], "the top level is not an object"));
                }
                Ok(Doc::Jsonc(root))
            }
            Format::Toml => text.parse::<toml_edit::DocumentMut>().map(Doc::Toml).map_err(|e| parse_err(e.to_string())),
        }
    }

    pub(crate) fn render(&self) -> String {
        match self {
            Doc::Jsonc(root) => root.to_string(),
            Doc::Toml(doc) => doc.to_string(),
        }
    }

    /// The value at `key`, if present.
    pub(crate) fn get(&self, file: &Path, key: &[String]) -> Result<Option<Value>, SetupError> {
        let Some((last, parents)) = key.split_last() else { return Ok(None) };
        match self {
            Doc::Jsonc(root) => {
                let Some(mut obj) = root.object_value() else { return Ok(None) };
                for (i, seg) in parents.iter().enumerate() {
                    let Some(prop) = obj.get(seg) else { return Ok(None) };
                    obj = prop.object_value().ok_or_else(|| shape(file, &key[..=i], "is not an object"))?;
                }
                Ok(obj.get(last).and_then(|p| p.to_serde_value()))
            }
            Doc::Toml(doc) => {
                let mut item = doc.as_item();
                for seg in key {
                    match item.get(seg.as_str()) {
                        Some(next) => item = next,
                        None => return Ok(None),
                    }
                }
                Ok(toml_item_to_json(item))
            }
        }
    }

    /// Applies `edits` in order. Returns the container paths that had to be created (so an undo
    /// can remove them again once they are empty).
    pub(crate) fn apply(&mut self, file: &Path, edits: &[Edit]) -> Result<Vec<Vec<String>>, SetupError> {
        let mut created = Vec::new();
        for edit in edits {
            if self.get(file, &edit.path)? == edit.value {
                continue;
            }
            match &edit.value {
                Some(v) => self.set(file, &edit.path, v, &mut created)?,
                None => self.remove(file, &edit.path)?,
            }
        }
        Ok(created)
    }

    fn set(
        &mut self,
        file: &Path,
        key: &[String],
        value: &Value,
        created: &mut Vec<Vec<String>>,
    ) -> Result<(), SetupError> {
        let Some((last, parents)) = key.split_last() else { return Ok(()) };
        match self {
            Doc::Jsonc(root) => {
                let mut obj: CstObject = root.object_value_or_set();
                for (i, seg) in parents.iter().enumerate() {
                    if obj.get(seg).is_none() {
                        created.push(key[..=i].to_vec());
                    }
                    obj = obj.object_value_or_create(seg).ok_or_else(|| shape(file, &key[..=i], "is not an object"))?;
                }
                match obj.get(last) {
                    Some(prop) => prop.set_value(json_to_cst(value)),
                    None => {
                        obj.append(last, json_to_cst(value));
                    }
                }
            }
            Doc::Toml(doc) => {
                let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
                for (i, seg) in parents.iter().enumerate() {
                    if table.get(seg).is_none() {
                        created.push(key[..=i].to_vec());
                        let mut t = toml_edit::Table::new();
                        t.set_implicit(true);
                        table.insert(seg, toml_edit::Item::Table(t));
                    }
                    table = table
                        .get_mut(seg)
                        .and_then(|i| i.as_table_like_mut())
                        .ok_or_else(|| shape(file, &key[..=i], "is not a table"))?;
                }
                let mut item = json_to_toml_item(value);
                match table.get_mut(last) {
                    Some(old) => {
                        if let (Some(old), toml_edit::Item::Value(new)) = (old.as_value(), &mut item) {
                            // Keep the spacing and a comment written after the old value.
                            *new.decor_mut() = old.decor().clone();
                        }
                        // Assigning in place keeps the key, its position and the comments above it.
                        *old = item;
                    }
                    None => {
                        table.insert(last, item);
                    }
                }
            }
        }
        Ok(())
    }

    fn remove(&mut self, file: &Path, key: &[String]) -> Result<(), SetupError> {
        let Some((last, parents)) = key.split_last() else { return Ok(()) };
        match self {
            Doc::Jsonc(root) => {
                let Some(mut obj) = root.object_value() else { return Ok(()) };
                for (i, seg) in parents.iter().enumerate() {
                    let Some(prop) = obj.get(seg) else { return Ok(()) };
                    obj = prop.object_value().ok_or_else(|| shape(file, &key[..=i], "is not an object"))?;
                }
                if let Some(prop) = obj.get(last) {
                    prop.remove();
                }
            }
            Doc::Toml(doc) => {
                let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
                for seg in parents {
                    match table.get_mut(seg).and_then(|i| i.as_table_like_mut()) {
                        Some(t) => table = t,
                        None => return Ok(()),
                    }
                }
                table.remove(last);
            }
        }
        Ok(())
    }

    /// Removes the object or table at `key` if it exists and has no entries left.
    pub(crate) fn remove_if_empty(&mut self, file: &Path, key: &[String]) -> Result<(), SetupError> {
        let empty = match self.get(file, key)? {
            Some(Value::Object(m)) => m.is_empty(),
            _ => false,
        };
        if empty { self.remove(file, key) } else { Ok(()) }
    }
}

fn json_to_cst(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(a) => CstInputValue::Array(a.iter().map(json_to_cst).collect()),
        Value::Object(m) => CstInputValue::Object(m.iter().map(|(k, v)| (k.clone(), json_to_cst(v))).collect()),
    }
}

/// Objects at the item level become `[tables]`; objects nested in them become inline tables.
fn json_to_toml_item(value: &Value) -> toml_edit::Item {
    match value {
        Value::Object(m) => {
            let mut t = toml_edit::Table::new();
            for (k, v) in ordered(m) {
                t.insert(k, toml_edit::Item::Value(json_to_toml_value(v)));
            }
            toml_edit::Item::Table(t)
        }
        v => toml_edit::Item::Value(json_to_toml_value(v)),
    }
}

/// A table's entries with `name`, `base_url` and `wire_api` first (the order Codex's docs use),
/// then the rest alphabetically. `serde_json::Map` does not keep insertion order.
fn ordered(m: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    const FIRST: [&str; 3] = ["name", "base_url", "wire_api"];
    let rank = |k: &str| FIRST.iter().position(|f| *f == k).unwrap_or(FIRST.len());
    let mut entries: Vec<_> = m.iter().collect();
    entries.sort_by(|a, b| rank(a.0).cmp(&rank(b.0)).then_with(|| a.0.cmp(b.0)));
    entries
}

fn json_to_toml_value(value: &Value) -> toml_edit::Value {
    match value {
        // TOML has no null; an empty string is the closest harmless stand-in.
        Value::Null => toml_edit::Value::from(""),
        Value::Bool(b) => toml_edit::Value::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml_edit::Value::from(i),
            (None, Some(f)) => toml_edit::Value::from(f),
            (None, None) => toml_edit::Value::from(n.to_string()),
        },
        Value::String(s) => toml_edit::Value::from(s.as_str()),
        Value::Array(a) => toml_edit::Value::Array(a.iter().map(json_to_toml_value).collect()),
        Value::Object(m) => {
            let mut t = toml_edit::InlineTable::new();
            for (k, v) in m {
                t.insert(k, json_to_toml_value(v));
            }
            toml_edit::Value::InlineTable(t)
        }
    }
}

fn toml_item_to_json(item: &toml_edit::Item) -> Option<Value> {
    match item {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(v) => Some(toml_value_to_json(v)),
        toml_edit::Item::Table(t) => {
            Some(Value::Object(t.iter().filter_map(|(k, v)| Some((k.to_owned(), toml_item_to_json(v)?))).collect()))
        }
        toml_edit::Item::ArrayOfTables(a) => Some(Value::Array(
            a.iter()
                .map(|t| {
                    Value::Object(t.iter().filter_map(|(k, v)| Some((k.to_owned(), toml_item_to_json(v)?))).collect())
                })
                .collect(),
        )),
    }
}

fn toml_value_to_json(value: &toml_edit::Value) -> Value {
    match value {
        toml_edit::Value::String(s) => Value::String(s.value().clone()),
        toml_edit::Value::Integer(i) => Value::from(*i.value()),
        toml_edit::Value::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number),
        toml_edit::Value::Boolean(b) => Value::Bool(*b.value()),
        // Datetimes come back as strings: only a partial undo of a datetime-valued key loses the type.
        toml_edit::Value::Datetime(d) => Value::String(d.value().to_string()),
        toml_edit::Value::Array(a) => Value::Array(a.iter().map(toml_value_to_json).collect()),
        toml_edit::Value::InlineTable(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.to_owned(), toml_value_to_json(v))).collect())
        }
    }
}

/// A stable hash of a value, independent of object key order, so "is this still what Keyhaven
/// wrote?" can be answered without keeping the value (which may be a token).
pub(crate) fn value_hash(value: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for k in keys {
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(v) = m.get(k) {
                        canonical(v, out);
                    }
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for v in a {
                    canonical(v, out);
                    out.push(',');
                }
                out.push(']');
            }
            v => out.push_str(&v.to_string()),
        }
    }
    let mut s = String::new();
    canonical(value, &mut s);
    crate::setup::fsio::sha256_hex(s.as_bytes())
}
