//! What an inbound decoder did not map onto the canonical request, kept verbatim and tagged with
//! its dialect, so that a same-dialect upstream receives exactly what the client sent.
//!
//! Hub and spoke stays intact: only the encoder of the tagged dialect reads a [`Passthrough`];
//! the others ignore it (each documents what it translates instead). There is no pairwise path.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The wire dialects, as tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireDialect {
    Anthropic,
    OpenaiChat,
    OpenaiResponses,
}

/// The client's request beyond the canonical fields.
///
/// `body` is the inbound body itself. Its dialect's encoder sends it whole (with only the model
/// name and `stream` changed, and reasoning envelopes restored) as long as the canonical request
/// still equals what `body` decodes to; once the engine changed the request (tool emulation,
/// reasoning re-injection, `previous_response_id`), it encodes the canonical request and adds
/// `fields`, `tools` and `betas`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Passthrough {
    pub dialect: WireDialect,
    /// The inbound body as received (a JSON object).
    pub body: Value,
    /// Top-level keys the decoder did not map (`context_management`, `mcp_servers`,
    /// `prompt_cache_key`, `service_tier`, ...), verbatim.
    pub fields: Map<String, Value>,
    /// Tool definitions without a canonical counterpart (server or hosted tools), verbatim.
    pub tools: Vec<Value>,
    /// The client's feature flags for its vendor (Anthropic: the `anthropic-beta` values).
    pub betas: Vec<String>,
}

impl Passthrough {
    pub fn new(dialect: WireDialect, body: Value) -> Passthrough {
        Passthrough { dialect, body, fields: Map::new(), tools: Vec::new(), betas: Vec::new() }
    }

    /// The top-level keys of `raw` (a JSON object) that are not in `mapped`, verbatim.
    pub fn unmapped(raw: &Value, mapped: &[&str]) -> Map<String, Value> {
        match raw {
            Value::Object(obj) => {
                obj.iter().filter(|(k, _)| !mapped.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
            }
            _ => Map::new(),
        }
    }

    /// The tagged passthrough of `req` when it came in `dialect`.
    pub fn of(req: &crate::model::Request, dialect: WireDialect) -> Option<&Passthrough> {
        req.passthrough.as_deref().filter(|p| p.dialect == dialect)
    }

    /// The `type` (or name) of each tool in `tools`, for notes on the call row.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|t| {
                t.get("type")
                    .and_then(Value::as_str)
                    .or_else(|| t.get("name").and_then(Value::as_str))
                    .unwrap_or("unknown")
                    .to_owned()
            })
            .collect()
    }
}

/// Debug without the body (it can be megabytes, and snapshots stay readable).
impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passthrough")
            .field("dialect", &self.dialect)
            .field("fields", &self.fields.keys().collect::<Vec<_>>())
            .field("tools", &self.tool_names())
            .field("betas", &self.betas)
            .finish_non_exhaustive()
    }
}
