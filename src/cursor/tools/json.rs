//! JSON ↔ the `google.protobuf.Value` shape (`agent.v1.JsonValue`): MCP tool schemas arrive as
//! Values, MCP arguments leave as a map of Values.

use serde_json::{Map, Number, Value};

use crate::cursor::protocol::agent::{JsonList, JsonNull, JsonStruct, JsonValue, json_value::Kind};

pub fn to_json(v: &JsonValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => {
            // Integral numbers come back as integers (protobuf has only doubles).
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                #[expect(clippy::cast_possible_truncation, reason = "checked integral and in range")]
                let i = *n as i64;
                Value::Number(i.into())
            } else {
                Number::from_f64(*n).map_or(Value::Null, Value::Number)
            }
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => Value::Object(s.fields.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(to_json).collect()),
    }
}

pub fn from_json(v: &Value) -> JsonValue {
    let kind = match v {
        Value::Null => Kind::NullValue(JsonNull::NullValue as i32),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(JsonList { values: a.iter().map(from_json).collect() }),
        Value::Object(o) => Kind::StructValue(JsonStruct { fields: object_fields(o) }),
    };
    JsonValue { kind: Some(kind) }
}

/// An object's fields as a Value map (MCP `args`).
pub fn object_fields(o: &Map<String, Value>) -> std::collections::HashMap<String, JsonValue> {
    o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect()
}
