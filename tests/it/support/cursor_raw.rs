//! Hand-written protobuf encoding of client messages, for requests whose field numbers must come
//! from the wire description (docs/cursor-wire.md) rather than from the project's generated code:
//! a test that encoded them with the engine's own types would pass with a wrong number on both
//! sides.

/// A varint.
pub fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = u8::try_from(v & 0x7f).expect("seven bits");
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// A length-delimited field (string, bytes or message).
pub fn ld(field: u64, body: &[u8]) -> Vec<u8> {
    [varint(field << 3 | 2), varint(u64::try_from(body.len()).expect("length")), body.to_vec()].concat()
}

/// A string field.
pub fn st(field: u64, text: &str) -> Vec<u8> {
    ld(field, text.as_bytes())
}

/// A varint field (ints, bools, enums).
pub fn int(field: u64, v: u64) -> Vec<u8> {
    [varint(field << 3), varint(v)].concat()
}

/// `RequestContextEnv{os_version=1, workspace_paths=2, shell=3}` inside `RequestContext.env=4`,
/// followed by `extra` (other RequestContext fields).
pub fn request_context(workspace: &str, extra: &[u8]) -> Vec<u8> {
    let env = [st(1, "linux"), st(2, workspace), st(3, "sh")].concat();
    [ld(4, &env), extra.to_vec()].concat()
}

/// `UserMessage{text=1, message_id=2, mode=4}`.
pub fn user_message(text: &str, message_id: &str, mode: u64) -> Vec<u8> {
    [st(1, text), st(2, message_id), int(4, mode)].concat()
}

/// `AgentClientMessage{run_request=1 AgentRunRequest{action=2, conversation_id=5,
/// requested_model=9{model_id=1}, …}}` with `action` the raw `ConversationAction` and `extra`
/// more raw `AgentRunRequest` fields ([`pre_fetched`], [`run_id`], [`todos_state`]).
pub fn run_request(action: &[u8], conversation_id: &str, model: &str, extra: &[u8]) -> Vec<u8> {
    ld(1, &[ld(2, action), st(5, conversation_id), ld(9, &st(1, model)), extra.to_vec()].concat())
}

/// `AgentRunRequest.pre_fetched_blobs=17 {id=1, value=2}`.
pub fn pre_fetched(id: &[u8], value: &[u8]) -> Vec<u8> {
    ld(17, &[ld(1, id), ld(2, value)].concat())
}

/// `AgentRunRequest.run_id=25` (3.15 builds).
pub fn run_id(id: &str) -> Vec<u8> {
    st(25, id)
}

/// `AgentRunRequest.conversation_state=1 {todos=3 repeated bytes}`, each a `TodoItem{id=1,
/// content=2, status=3}` (status: PENDING 1, IN_PROGRESS 2, COMPLETED 3, CANCELLED 4).
pub fn todos_state(todos: &[(&str, &str, u64)]) -> Vec<u8> {
    let items: Vec<u8> = todos
        .iter()
        .flat_map(|(id, content, status)| ld(3, &[st(1, id), st(2, content), int(3, *status)].concat()))
        .collect();
    ld(1, &items)
}

/// `AgentClientMessage{conversation_action=4}` with the raw `ConversationAction`.
pub fn conversation_action(action: &[u8]) -> Vec<u8> {
    ld(4, action)
}
