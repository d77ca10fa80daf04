//! A second, independent description of the wire types the backend emits to Cursor, written by
//! hand from docs/cursor-wire.md (§4.6 InteractionUpdate and §6.3 `context_injection_state`, §4.7 ToolCall and its cards, §4.8 the
//! exec shapes the cards reuse, §4.9 KV, §4.10 the interaction cards, §4.11 the checkpoint and
//! its blobs, §6.5 and §6.6) — **not** from the project's generated prost code — and a generic
//! protobuf walker that checks raw bytes against it.
//!
//! The walker fails on a field number the description does not know (the IDE's decoder would
//! skip it, but Keyhaven writing a field Cursor does not have means a wrong number), on a wire
//! type that differs from the declared type (the IDE's decoder fails the **whole** message on
//! that, which is how the old read_lints card broke), on invalid UTF-8 in a string, and on
//! truncated input. `any` marks a subtree this description does not cover (exec requests,
//! interaction queries, the user's selected context); it must still be length-delimited.
//!
//! Where the docs elide fields with "…", the numbers come from the public extractions of the
//! client's agent.v1 code the docs cite (3.15-era build).

use std::collections::HashMap;
use std::sync::OnceLock;

/// `Message: N type; N *type; …` — `*` = repeated. Scalars: `str`, `bytes`, `i32`, `i64`,
/// `u32`, `u64`, `bool`, `enum`, `f64`, `f32`; `any` = an opaque message; otherwise a message.
const SCHEMA: &str = r"
AgentServerMessage: 1 InteractionUpdate; 2 any; 3 ConversationStateStructure; 4 KvServerMessage; 5 any; 7 any; 8 any
KvServerMessage: 1 u32; 2 BlobIdOnly; 3 SetBlobArgs
BlobIdOnly: 1 bytes
SetBlobArgs: 1 bytes; 2 bytes

InteractionUpdate: 1 TextDeltaUpdate; 2 ToolCallUpdate; 3 ToolCallUpdate; 4 ThinkingDeltaUpdate; 5 ThinkingCompletedUpdate; 6 UserMessageAppendedUpdate; 7 PartialToolCallUpdate; 8 TokenDeltaUpdate; 9 OneString; 10 Empty; 11 OneString; 12 ShellOutputDeltaUpdate; 13 Empty; 14 TurnEndedUpdate; 15 ToolCallDeltaUpdate; 16 StepStartedUpdate; 17 StepCompletedUpdate; 23 ContextInjectionStateUpdate
TextDeltaUpdate: 1 str; 2 bool
ToolCallUpdate: 1 str; 2 ToolCall; 3 str
ThinkingDeltaUpdate: 1 str; 2 enum
ThinkingCompletedUpdate: 1 i32
UserMessageAppendedUpdate: 1 UserMessage
PartialToolCallUpdate: 1 str; 2 ToolCall; 3 str; 4 str
TokenDeltaUpdate: 1 i32
OneString: 1 str
Empty:
ShellOutputDeltaUpdate: 1 OneString; 2 OneString; 3 ShellStreamExit; 4 any
ShellStreamExit: 1 u32; 2 str; 4 bool
TurnEndedUpdate: 1 i64; 2 i64; 3 i64; 4 i64; 5 i64
ToolCallDeltaUpdate: 1 str; 2 ToolCallDelta; 3 str
ToolCallDelta: 1 ShellToolCallDelta; 2 any; 3 OneString; 4 any
ShellToolCallDelta: 1 OneString; 2 OneString
StepStartedUpdate: 1 u64
StepCompletedUpdate: 1 u64; 2 i64
ContextInjectionStateUpdate: 1 str; 2 ContextInjectionState
ContextInjectionState: 1 Empty; 2 ContextInjectionDelivered; 3 Empty; 4 Empty; 5 OneString
ContextInjectionDelivered: 1 i32; 2 str; 3 i64

UserMessage: 1 str; 2 str; 3 any; 4 enum; 5 bool; 8 str; 18 bytes; 19 bytes

ToolCall: 1 ShellToolCall; 3 DeleteToolCall; 4 GlobToolCall; 5 GrepToolCall; 8 ReadToolCall; 9 UpdateTodosToolCall; 12 EditToolCall; 13 LsToolCall; 14 ReadLintsToolCall; 15 McpToolCall; 17 CreatePlanToolCall; 18 WebSearchToolCall; 23 AskQuestionToolCall; 24 FetchToolCall; 25 SwitchModeToolCall; 37 WebFetchToolCall; 57 str; 59 u64; 60 u64

ShellToolCall: 1 ShellArgs; 2 ShellResult; 3 str
ShellArgs: 1 str; 2 str; 3 i32; 4 str; 5 *str; 6 bool; 7 bool; 8 any; 9 any; 10 u64; 11 bool; 12 bool; 13 enum; 14 i32; 15 str
ShellResult: 1 ShellSuccess; 2 ShellFailure; 3 ShellTimeout; 4 ShellRejected; 5 ShellSpawnError; 7 ShellPermissionDenied; 101 any; 102 bool; 103 str; 104 u32
ShellSuccess: 1 str; 2 str; 3 i32; 4 str; 5 str; 6 str; 7 i32; 8 any; 9 str
ShellFailure: 1 str; 2 str; 3 i32; 4 str; 5 str; 6 str; 7 i32; 8 any; 9 str; 10 enum; 11 bool
ShellTimeout: 1 str; 2 str; 3 i32
ShellRejected: 1 str; 2 str; 3 str; 4 bool
ShellSpawnError: 1 str; 2 str; 3 str
ShellPermissionDenied: 1 str; 2 str; 3 str; 4 bool

DeleteToolCall: 1 DeleteArgs; 2 DeleteResult
DeleteArgs: 1 str; 2 str
DeleteResult: 1 DeleteSuccess; 2 PathOnly; 3 PathAndText; 4 DeletePermissionDenied; 5 PathOnly; 6 PathAndText; 7 PathAndText
DeleteSuccess: 1 str; 2 str; 3 i64; 4 str
DeletePermissionDenied: 1 str; 2 str; 3 bool
PathOnly: 1 str
PathAndText: 1 str; 2 str

GlobToolCall: 1 GlobToolArgs; 2 GlobToolResult
GlobToolArgs: 1 str; 2 str
GlobToolResult: 1 GlobToolSuccess; 2 OneString
GlobToolSuccess: 1 str; 2 str; 3 *str; 4 i32; 5 bool; 6 bool

GrepToolCall: 1 GrepArgs; 2 GrepResult
GrepArgs: 1 str; 2 str; 3 str; 4 str; 5 i32; 6 i32; 7 i32; 8 bool; 9 str; 10 i32; 11 bool; 14 str
GrepResult: 1 GrepSuccess; 2 OneString
GrepSuccess: 1 str; 2 str; 3 str; 4 *GrepWorkspaceResult
GrepWorkspaceResult: 1 str; 2 GrepUnionResult
GrepUnionResult: 1 any; 2 GrepFiles; 3 GrepContent
GrepFiles: 1 *str; 2 i32; 3 bool; 4 bool
GrepContent: 1 *GrepFileMatches; 2 i32; 3 i32
GrepFileMatches: 1 str; 2 *GrepLine
GrepLine: 1 i32; 2 str; 3 bool; 4 bool

ReadToolCall: 1 ReadToolArgs; 2 ReadToolResult
ReadToolArgs: 1 str; 2 i32; 3 i32; 5 bool
ReadToolResult: 1 ReadToolSuccess; 2 OneString
ReadToolSuccess: 1 str; 2 bool; 3 bool; 4 u32; 5 u32; 6 bytes; 7 str; 8 any; 9 bytes; 10 bytes; 11 bool; 12 *str; 13 *any

UpdateTodosToolCall: 1 UpdateTodosArgs; 2 UpdateTodosResult
UpdateTodosArgs: 1 *TodoItem; 2 bool
UpdateTodosResult: 1 UpdateTodosSuccess; 2 OneString
UpdateTodosSuccess: 1 *TodoItem; 2 i32; 3 bool
TodoItem: 1 str; 2 str; 3 enum; 4 i64; 5 i64; 6 *str

EditToolCall: 1 EditArgs; 2 EditResult
EditArgs: 1 str; 6 str
EditResult: 1 EditSuccess; 2 PathOnly; 3 PathOnly; 4 PathOnly; 6 PathAndText; 7 EditError
EditSuccess: 1 str; 3 i32; 4 i32; 5 str; 6 str; 7 str; 8 str
EditError: 1 str; 2 str; 5 str

LsToolCall: 1 LsArgs; 2 LsResult
LsArgs: 1 str; 2 *str; 3 str
LsResult: 1 LsTree; 2 PathAndText; 3 PathAndText; 4 LsTree
LsTree: 1 LsNode
LsNode: 1 str; 2 *LsNode; 3 *LsFile; 4 bool; 5 *ExtensionCount; 6 i32
LsFile: 1 str; 2 any
ExtensionCount: 1 str; 2 i32

ReadLintsToolCall: 1 ReadLintsToolArgs; 2 ReadLintsToolResult
ReadLintsToolArgs: 1 *str
ReadLintsToolResult: 1 ReadLintsToolSuccess; 2 OneString
ReadLintsToolSuccess: 1 *FileDiagnostics; 2 i32; 3 i32
FileDiagnostics: 1 str; 2 *DiagnosticItem; 3 i32
DiagnosticItem: 1 enum; 2 Range; 3 str; 4 str; 5 str; 6 bool
Range: 1 Position; 2 Position
Position: 1 u32; 2 u32

McpToolCall: 1 McpArgs; 2 McpToolResult; 3 str
McpArgs: 1 str; 2 *McpArgEntry; 3 str; 4 str; 5 str; 6 any; 7 bool; 8 bool; 9 str
McpArgEntry: 1 str; 2 Value
Value: 1 enum; 2 f64; 3 str; 4 bool; 5 Struct; 6 ListValue
Struct: 1 *StructEntry
StructEntry: 1 str; 2 Value
ListValue: 1 *Value
McpToolResult: 1 McpSuccess; 2 PathAndText; 3 McpRefusal; 4 McpRefusal
McpSuccess: 1 *McpContent; 2 bool; 3 Struct
McpContent: 1 McpText; 2 McpImage
McpText: 1 str; 2 any
McpImage: 1 bytes; 2 str
McpRefusal: 1 str; 2 bool

CreatePlanToolCall: 1 CreatePlanArgs; 2 CreatePlanResult
CreatePlanArgs: 1 str; 2 *TodoItem; 3 str; 4 str; 5 bool; 6 *Phase
Phase: 1 str; 2 *TodoItem
CreatePlanResult: 1 Empty; 2 OneString; 3 str

WebSearchToolCall: 1 WebSearchArgs; 2 WebSearchResult
WebSearchArgs: 1 str; 2 str
WebSearchResult: 1 WebSearchSuccess; 2 OneString; 3 OneString
WebSearchSuccess: 1 *WebReference
WebReference: 1 str; 2 str; 3 str

AskQuestionToolCall: 1 AskQuestionArgs; 2 AskQuestionResult
AskQuestionArgs: 1 str; 2 *AskQuestion; 5 bool; 6 str
AskQuestion: 1 str; 2 str; 3 *AskOption; 4 bool
AskOption: 1 str; 2 str
AskQuestionResult: 1 AskSuccess; 2 OneString; 3 OneString; 4 Empty
AskSuccess: 1 *AskAnswer
AskAnswer: 1 str; 2 *str; 3 str

FetchToolCall: 1 FetchArgs; 2 FetchResult
FetchArgs: 1 str; 2 str
FetchResult: 1 FetchSuccess; 2 PathAndText
FetchSuccess: 1 str; 2 str; 3 i32; 4 str

SwitchModeToolCall: 1 SwitchModeArgs; 2 SwitchModeResult
SwitchModeArgs: 1 str; 2 str; 3 str
SwitchModeResult: 1 PathAndText; 2 OneString; 3 OneString

WebFetchToolCall: 1 WebFetchArgs; 2 WebFetchResult
WebFetchArgs: 1 str; 2 str
WebFetchResult: 1 WebFetchSuccess; 2 PathAndText; 3 OneString
WebFetchSuccess: 1 str; 2 str; 3 any

ConversationStateStructure: 1 *bytes; 3 *bytes; 4 *str; 5 TokenDetails; 6 bytes; 7 bytes; 8 *bytes; 9 *str; 10 enum; 12 *FileStateEntry; 14 *StepTiming; 18 *str; 19 str; 22 str; 26 u64; 27 str
TokenDetails: 1 u32; 2 u32
FileStateEntry: 1 str; 2 bytes
StepTiming: 1 u64; 2 u64
ConversationTurnStructure: 1 AgentConversationTurnStructure; 2 any
AgentConversationTurnStructure: 1 bytes; 2 *bytes; 3 str
ConversationStep: 1 OneString; 2 ToolCall; 3 ThinkingMessage
ThinkingMessage: 1 str; 2 u32
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
    Str,
    Bytes,
    Varint,
    Fixed64,
    Fixed32,
}

#[derive(Debug, Clone)]
enum Ty {
    Scalar(Scalar),
    Any,
    Message(String),
}

#[derive(Debug, Clone)]
struct Field {
    ty: Ty,
    repeated: bool,
}

type Schema = HashMap<String, HashMap<u64, Field>>;

fn schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        let mut s = Schema::new();
        for line in SCHEMA.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (name, fields) = line.split_once(':').expect("`Name: fields`");
            let mut map = HashMap::new();
            for f in fields.split(';').map(str::trim).filter(|f| !f.is_empty()) {
                let (num, ty) = f.split_once(' ').expect("`N type`");
                let (repeated, ty) = match ty.strip_prefix('*') {
                    Some(t) => (true, t),
                    None => (false, ty),
                };
                let ty = match ty {
                    "str" => Ty::Scalar(Scalar::Str),
                    "bytes" => Ty::Scalar(Scalar::Bytes),
                    "i32" | "i64" | "u32" | "u64" | "bool" | "enum" => Ty::Scalar(Scalar::Varint),
                    "f64" => Ty::Scalar(Scalar::Fixed64),
                    "f32" => Ty::Scalar(Scalar::Fixed32),
                    "any" => Ty::Any,
                    m => Ty::Message(m.to_owned()),
                };
                let prev = map.insert(num.parse().expect("field number"), Field { ty, repeated });
                assert!(prev.is_none(), "{name}: field {num} declared twice");
            }
            assert!(s.insert(name.trim().to_owned(), map).is_none(), "{name} declared twice");
        }
        for (name, fields) in &s {
            for f in fields.values() {
                if let Ty::Message(m) = &f.ty {
                    assert!(s.contains_key(m), "{name} names undeclared message {m}");
                }
            }
        }
        s
    })
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or("truncated varint")?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// Checks `bytes` as message `name`; the error names the path to the bad field.
pub fn check(name: &str, bytes: &[u8]) -> Result<(), String> {
    walk(name, bytes, name)
}

fn walk(name: &str, b: &[u8], path: &str) -> Result<(), String> {
    let fields = schema().get(name).ok_or_else(|| format!("{path}: no description of {name}"))?;
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i).map_err(|e| format!("{path}: {e}"))?;
        let (num, wire) = (key >> 3, key & 7);
        let at = format!("{path}.{num}");
        let field = fields.get(&num).ok_or_else(|| format!("{at}: field {num} is not a field of {name}"))?;
        let payload: Option<&[u8]> = match wire {
            0 => {
                varint(b, &mut i).map_err(|e| format!("{at}: {e}"))?;
                None
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if i + n > b.len() {
                    return Err(format!("{at}: truncated fixed field"));
                }
                i += n;
                None
            }
            2 => {
                let len = usize::try_from(varint(b, &mut i).map_err(|e| format!("{at}: {e}"))?)
                    .map_err(|_| format!("{at}: length overflow"))?;
                let end = i.checked_add(len).filter(|e| *e <= b.len()).ok_or_else(|| format!("{at}: truncated"))?;
                let p = &b[i..end];
                i = end;
                Some(p)
            }
            w => return Err(format!("{at}: wire type {w} (groups) is never used by Cursor")),
        };
        let expected = match &field.ty {
            Ty::Scalar(Scalar::Varint) => 0,
            Ty::Scalar(Scalar::Fixed64) => 1,
            Ty::Scalar(Scalar::Fixed32) => 5,
            _ => 2,
        };
        let packed = field.repeated
            && wire == 2
            && matches!(field.ty, Ty::Scalar(Scalar::Varint | Scalar::Fixed32 | Scalar::Fixed64));
        if wire != expected && !packed {
            return Err(format!(
                "{at}: wire type {wire} where {name}.{num} is declared {:?} (wire type {expected})",
                field.ty
            ));
        }
        match (&field.ty, payload) {
            (Ty::Scalar(Scalar::Str), Some(p)) => {
                std::str::from_utf8(p).map_err(|_| format!("{at}: string is not UTF-8"))?;
            }
            (Ty::Message(m), Some(p)) => walk(m, p, &format!("{at}({m})"))?,
            _ => {}
        }
    }
    Ok(())
}

/// Checks every `ToolCall`, `InteractionUpdate`, checkpoint and KV message of a server frame;
/// panics with the path of the first problem.
pub fn assert_server_message(bytes: &[u8]) {
    if let Err(e) = check("AgentServerMessage", bytes) {
        panic!("the backend emitted a message the IDE's decoder would reject or misread: {e}");
    }
}

/// Checks a checkpoint blob of a known type (`ConversationTurnStructure`, `ConversationStep`,
/// `UserMessage`, `TodoItem`).
pub fn assert_blob(name: &str, bytes: &[u8]) {
    if let Err(e) = check(name, bytes) {
        panic!("a checkpoint blob does not decode as {name} per docs/cursor-wire.md: {e}");
    }
}
