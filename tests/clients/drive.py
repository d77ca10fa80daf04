"""Drives the official Python SDKs (openai, anthropic) through one scenario of the client matrix.

Usage: drive.py SDK SCENARIO BASE_URL MODEL RUN
  SDK: openai-chat | openai-responses | anthropic
Prints one JSON object: {"turns": [...], "error": null | {"type", "status", "message"}}.
Each turn is what the SDK itself returned: text, tool calls (arguments as the SDK assembled them),
reasoning (text plus the opaque signature / encrypted_content the client would send back), and the
stop reason. The scripted upstream (tests/it/support/vendor.rs) reads the marker in the prompt.
"""

import json
import sys

SDK, SCENARIO, BASE, MODEL, RUN = sys.argv[1:6]
MARKER = f"[kh scenario={SCENARIO} run={RUN}]"
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TOOL_RESULTS = {"get_weather": "22C and sunny", "get_time": "14:05"}
KEY = "sk-keyhaven-matrix-client"
TURNS = []

WEATHER = {"name": "get_weather", "description": "The weather in a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}}
TIME = {"name": "get_time", "description": "The time in a time zone.", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}


def args_value(a):
    if isinstance(a, str):
        try:
            return json.loads(a)
        except ValueError:
            return {"unparsed": a}
    return a


# ---------------------------------------------------------------------------------------------
# OpenAI Chat Completions

def chat_run():
    import openai
    client = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=2)
    tools = [{"type": "function", "function": f} for f in (WEATHER, TIME)]
    extra = {}
    prompt = MARKER + " Hello."
    if SCENARIO in ("reasoning", "reasoning_dropped"):
        extra["reasoning_effort"] = "medium"
    content = prompt
    if SCENARIO == "image":
        content = [{"type": "text", "text": MARKER + " What is in this image?"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG_B64}}]
    messages = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": content}]
    turns = TURNS

    def turn(stream=True):
        kwargs = dict(model=MODEL, messages=messages, **extra)
        if SCENARIO in ("parallel_tools", "tool_result", "reasoning", "reasoning_dropped"):
            kwargs["tools"] = tools
        if stream:
            with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
                for _ in s:
                    pass
                comp = s.get_final_completion()
        else:
            comp = client.chat.completions.create(**kwargs)
        msg = comp.choices[0].message
        extra_fields = msg.model_extra or {}
        calls = [{"id": c.id, "name": c.function.name, "arguments": args_value(c.function.arguments)}
                 for c in (msg.tool_calls or [])]
        turns.append({"text": msg.content, "tool_calls": calls,
                      "reasoning": {"text": extra_fields.get("reasoning_content")},
                      "stop": comp.choices[0].finish_reason, "stream": stream})
        return msg

    if SCENARIO == "text":
        turn(stream=False)
        turn(stream=True)
        return turns
    msg = turn()
    if msg.tool_calls:
        # What a Chat client sends back: content and tool calls (it cannot carry reasoning).
        messages.append({"role": "assistant", "content": msg.content,
                         "tool_calls": [{"id": c.id, "type": "function",
                                         "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                        for c in msg.tool_calls]})
        for c in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id,
                             "content": TOOL_RESULTS.get(c.function.name, "?")})
        turn()
    return turns


# ---------------------------------------------------------------------------------------------
# OpenAI Responses

def responses_run():
    import openai
    client = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=2)
    tools = [{"type": "function", **f} for f in (WEATHER, TIME)]
    extra = {"store": False}
    if SCENARIO in ("reasoning", "reasoning_dropped"):
        extra["reasoning"] = {"effort": "medium", "summary": "auto"}
        extra["include"] = ["reasoning.encrypted_content"]
    content = [{"type": "input_text", "text": MARKER + " Hello."}]
    if SCENARIO == "image":
        content = [{"type": "input_text", "text": MARKER + " What is in this image?"},
                   {"type": "input_image", "image_url": "data:image/png;base64," + PNG_B64}]
    inputs = [{"role": "user", "content": content}]
    turns = TURNS

    def turn(stream=True):
        kwargs = dict(model=MODEL, input=inputs, instructions="You are a test.", **extra)
        if SCENARIO in ("parallel_tools", "tool_result", "reasoning", "reasoning_dropped"):
            kwargs["tools"] = tools
        if stream:
            with client.responses.stream(**kwargs) as s:
                failure = None
                for ev in s:
                    # The SDK's get_final_response() only says "Didn't receive a response.completed
                    # event"; the failure the client saw is in the event itself.
                    if ev.type == "response.failed":
                        e = ev.response.error
                        failure = f"response.failed: {e.code}: {e.message}" if e else "response.failed"
                    elif ev.type == "error":
                        failure = f"error event: {ev.code}: {ev.message}"
                if failure:
                    raise RuntimeError(failure)
                resp = s.get_final_response()
        else:
            resp = client.responses.create(**kwargs)
        if resp.status == "failed":
            err = resp.error
            raise RuntimeError(f"response.failed: {err.code if err else None}: {err.message if err else None}")
        calls, reasoning = [], []
        for item in resp.output:
            if item.type == "function_call":
                calls.append({"id": item.call_id, "name": item.name, "arguments": args_value(item.arguments)})
            elif item.type == "reasoning":
                reasoning.append({"text": "\n\n".join(s.text for s in (item.summary or [])),
                                  "encrypted_content": item.encrypted_content})
        turns.append({"text": resp.output_text, "tool_calls": calls,
                      "reasoning": reasoning[0] if reasoning else {"text": None},
                      "stop": resp.status, "stream": stream})
        return resp

    if SCENARIO == "text":
        turn(stream=False)
        turn(stream=True)
        return turns
    resp = turn()
    calls = [i for i in resp.output if i.type == "function_call"]
    if calls:
        # The store:false pattern: every output item goes back as input, then the outputs.
        # reasoning_dropped: a client that does not keep reasoning replays without it.
        inputs.extend(i.model_dump(exclude_none=True) for i in resp.output
                      if not (SCENARIO == "reasoning_dropped" and i.type == "reasoning"))
        for c in calls:
            inputs.append({"type": "function_call_output", "call_id": c.call_id,
                           "output": TOOL_RESULTS.get(c.name, "?")})
        turn()
    return turns


# ---------------------------------------------------------------------------------------------
# Anthropic Messages

def anthropic_run():
    import anthropic
    client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=2)
    extra = {}
    if SCENARIO in ("reasoning", "reasoning_dropped"):
        extra["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    content = MARKER + " Hello."
    if SCENARIO == "image":
        content = [{"type": "text", "text": MARKER + " What is in this image?"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}]
    messages = [{"role": "user", "content": content}]
    tools = [{"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
             for f in (WEATHER, TIME)]
    turns = TURNS

    def turn(stream=True):
        kwargs = dict(model=MODEL, max_tokens=2048, system="You are a test.", messages=messages, **extra)
        if SCENARIO in ("parallel_tools", "tool_result", "reasoning", "reasoning_dropped"):
            kwargs["tools"] = tools
        if stream:
            with client.messages.stream(**kwargs) as s:
                for _ in s:
                    pass
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kwargs)
        text = "".join(b.text for b in msg.content if b.type == "text")
        calls = [{"id": b.id, "name": b.name, "arguments": b.input} for b in msg.content if b.type == "tool_use"]
        thinking = [b for b in msg.content if b.type == "thinking"]
        reasoning = {"text": thinking[0].thinking, "signature": thinking[0].signature} if thinking else {"text": None}
        turns.append({"text": text if any(b.type == "text" for b in msg.content) else None, "tool_calls": calls,
                      "reasoning": reasoning, "stop": msg.stop_reason, "stream": stream})
        return msg

    if SCENARIO == "text":
        turn(stream=False)
        turn(stream=True)
        return turns
    msg = turn()
    uses = [b for b in msg.content if b.type == "tool_use"]
    if uses:
        # reasoning_dropped: a client that clears thinking replays without it.
        messages.append({"role": "assistant", "content": [
            b.model_dump(exclude_none=True) for b in msg.content
            if not (SCENARIO == "reasoning_dropped" and b.type in ("thinking", "redacted_thinking"))]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": TOOL_RESULTS.get(b.name, "?")} for b in uses]})
        turn()
    return turns


def main():
    run = {"openai-chat": chat_run, "openai-responses": responses_run, "anthropic": anthropic_run}[SDK]
    out = {"sdk": SDK, "scenario": SCENARIO, "turns": [], "error": None}
    try:
        run()
    except Exception as e:  # the client's own report is the result
        out["error"] = {"type": type(e).__name__, "status": getattr(e, "status_code", None), "message": str(e)}
    out["turns"] = TURNS
    print(json.dumps(out))


main()
