// Drives the official TypeScript SDKs (openai, @anthropic-ai/sdk) through one scenario of the
// client matrix; the twin of drive.py, with the same output.
//
// Usage: node drive.mjs SDK SCENARIO BASE_URL MODEL RUN
//   SDK: openai-chat | openai-responses | anthropic
// Prints one JSON object: {"turns": [...], "error": null | {"type", "status", "message"}}, where
// each turn is what the SDK itself returned (text, tool calls as the SDK assembled them, reasoning
// with its opaque signature / encrypted_content, the stop reason).

import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [SDK, SCENARIO, BASE, MODEL, RUN] = process.argv.slice(2);
const MARKER = `[kh scenario=${SCENARIO} run=${RUN}]`;
const PNG_B64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const TOOL_RESULTS = { get_weather: '22C and sunny', get_time: '14:05' };
const KEY = 'sk-keyhaven-matrix-client';
const TURNS = [];
const REASONING = ['reasoning', 'reasoning_dropped'].includes(SCENARIO);
const WITH_TOOLS = ['parallel_tools', 'tool_result', 'reasoning', 'reasoning_dropped'].includes(SCENARIO);

const WEATHER = {
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' }, unit: { type: 'string' } },
    required: ['city'],
  },
};
const TIME = {
  name: 'get_time',
  description: 'The time in a time zone.',
  parameters: { type: 'object', properties: { tz: { type: 'string' } }, required: ['tz'] },
};

function argsValue(a) {
  if (typeof a !== 'string') return a;
  try {
    return JSON.parse(a);
  } catch {
    return { unparsed: a };
  }
}

// -----------------------------------------------------------------------------------------------
// OpenAI Chat Completions

async function chatRun() {
  const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 2 });
  const tools = [WEATHER, TIME].map((f) => ({ type: 'function', function: f }));
  const extra = REASONING ? { reasoning_effort: 'medium' } : {};
  let content = `${MARKER} Hello.`;
  if (SCENARIO === 'image') {
    content = [
      { type: 'text', text: `${MARKER} What is in this image?` },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_B64}` } },
    ];
  }
  const messages = [
    { role: 'system', content: 'You are a test.' },
    { role: 'user', content },
  ];
  async function turn(stream = true) {
    const params = { model: MODEL, messages, ...extra, ...(WITH_TOOLS ? { tools } : {}) };
    let comp;
    if (stream) {
      const s = client.chat.completions.stream({ ...params, stream_options: { include_usage: true } });
      for await (const _ of s) {
        // drain
      }
      comp = await s.finalChatCompletion();
    } else {
      comp = await client.chat.completions.create(params);
    }
    const msg = comp.choices[0].message;
    TURNS.push({
      text: msg.content ?? null,
      tool_calls: (msg.tool_calls ?? []).map((c) => ({
        id: c.id,
        name: c.function.name,
        arguments: argsValue(c.function.arguments),
      })),
      reasoning: { text: msg.reasoning_content ?? null },
      stop: comp.choices[0].finish_reason,
      stream,
    });
    return msg;
  }
  if (SCENARIO === 'text') {
    await turn(false);
    await turn(true);
    return;
  }
  const msg = await turn();
  if (msg.tool_calls?.length) {
    // What a Chat client sends back: content and tool calls (it cannot carry reasoning).
    messages.push({
      role: 'assistant',
      content: msg.content ?? null,
      tool_calls: msg.tool_calls.map((c) => ({
        id: c.id,
        type: 'function',
        function: { name: c.function.name, arguments: c.function.arguments },
      })),
    });
    for (const c of msg.tool_calls) {
      messages.push({ role: 'tool', tool_call_id: c.id, content: TOOL_RESULTS[c.function.name] ?? '?' });
    }
    await turn();
  }
}

// -----------------------------------------------------------------------------------------------
// OpenAI Responses

async function responsesRun() {
  const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 2 });
  const tools = [WEATHER, TIME].map((f) => ({ type: 'function', ...f }));
  const extra = { store: false };
  if (REASONING) {
    extra.reasoning = { effort: 'medium', summary: 'auto' };
    extra.include = ['reasoning.encrypted_content'];
  }
  let content = [{ type: 'input_text', text: `${MARKER} Hello.` }];
  if (SCENARIO === 'image') {
    content = [
      { type: 'input_text', text: `${MARKER} What is in this image?` },
      { type: 'input_image', image_url: `data:image/png;base64,${PNG_B64}` },
    ];
  }
  const input = [{ role: 'user', content }];
  async function turn(stream = true) {
    const params = {
      model: MODEL,
      input,
      instructions: 'You are a test.',
      ...extra,
      ...(WITH_TOOLS ? { tools } : {}),
    };
    let resp;
    if (stream) {
      const s = client.responses.stream(params);
      for await (const _ of s) {
        // drain
      }
      resp = await s.finalResponse();
    } else {
      resp = await client.responses.create(params);
    }
    if (resp.status === 'failed') {
      throw new Error(`response.failed: ${resp.error?.code}: ${resp.error?.message}`);
    }
    const calls = [];
    const reasoning = [];
    for (const item of resp.output) {
      if (item.type === 'function_call') {
        calls.push({ id: item.call_id, name: item.name, arguments: argsValue(item.arguments) });
      } else if (item.type === 'reasoning') {
        reasoning.push({
          text: (item.summary ?? []).map((s) => s.text).join('\n\n'),
          encrypted_content: item.encrypted_content ?? null,
        });
      }
    }
    TURNS.push({
      text: resp.output_text,
      tool_calls: calls,
      reasoning: reasoning[0] ?? { text: null },
      stop: resp.status,
      stream,
    });
    return resp;
  }
  if (SCENARIO === 'text') {
    await turn(false);
    await turn(true);
    return;
  }
  const resp = await turn();
  const calls = resp.output.filter((i) => i.type === 'function_call');
  if (calls.length) {
    // The store:false pattern: every output item goes back as input, then the outputs.
    // reasoning_dropped: a client that does not keep reasoning replays without it.
    input.push(...resp.output.filter((i) => !(SCENARIO === 'reasoning_dropped' && i.type === 'reasoning')));
    for (const c of calls) {
      input.push({ type: 'function_call_output', call_id: c.call_id, output: TOOL_RESULTS[c.name] ?? '?' });
    }
    await turn();
  }
}

// -----------------------------------------------------------------------------------------------
// Anthropic Messages

async function anthropicRun() {
  const client = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 2 });
  const extra = REASONING ? { thinking: { type: 'enabled', budget_tokens: 1024 } } : {};
  let content = `${MARKER} Hello.`;
  if (SCENARIO === 'image') {
    content = [
      { type: 'text', text: `${MARKER} What is in this image?` },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG_B64 } },
    ];
  }
  const messages = [{ role: 'user', content }];
  const tools = [WEATHER, TIME].map((f) => ({
    name: f.name,
    description: f.description,
    input_schema: f.parameters,
  }));
  async function turn(stream = true) {
    const params = {
      model: MODEL,
      max_tokens: 2048,
      system: 'You are a test.',
      messages,
      ...extra,
      ...(WITH_TOOLS ? { tools } : {}),
    };
    let msg;
    if (stream) {
      const s = client.messages.stream(params);
      for await (const _ of s) {
        // drain
      }
      msg = await s.finalMessage();
    } else {
      msg = await client.messages.create(params);
    }
    const texts = msg.content.filter((b) => b.type === 'text');
    const thinking = msg.content.filter((b) => b.type === 'thinking');
    TURNS.push({
      text: texts.length ? texts.map((b) => b.text).join('') : null,
      tool_calls: msg.content
        .filter((b) => b.type === 'tool_use')
        .map((b) => ({ id: b.id, name: b.name, arguments: b.input })),
      reasoning: thinking.length
        ? { text: thinking[0].thinking, signature: thinking[0].signature }
        : { text: null },
      stop: msg.stop_reason,
      stream,
    });
    return msg;
  }
  if (SCENARIO === 'text') {
    await turn(false);
    await turn(true);
    return;
  }
  const msg = await turn();
  const uses = msg.content.filter((b) => b.type === 'tool_use');
  if (uses.length) {
    // reasoning_dropped: a client that clears thinking replays without it.
    const dropped = (b) => SCENARIO === 'reasoning_dropped' && ['thinking', 'redacted_thinking'].includes(b.type);
    messages.push({ role: 'assistant', content: msg.content.filter((b) => !dropped(b)) });
    messages.push({
      role: 'user',
      content: uses.map((b) => ({
        type: 'tool_result',
        tool_use_id: b.id,
        content: TOOL_RESULTS[b.name] ?? '?',
      })),
    });
    await turn();
  }
}

const runs = { 'openai-chat': chatRun, 'openai-responses': responsesRun, anthropic: anthropicRun };
const out = { sdk: SDK, scenario: SCENARIO, turns: TURNS, error: null };
try {
  await runs[SDK]();
} catch (e) {
  out.error = { type: e?.constructor?.name ?? typeof e, status: e?.status ?? null, message: String(e?.message ?? e) };
}
process.stdout.write(`${JSON.stringify(out)}\n`);
