// Provider presets and form validation for the Providers & Models page.
import type { Model, ModelInput, Provider, ProviderInput, ProviderKind, ToolsMode } from "./ipc";

export interface ProviderPreset {
  id: string;
  label: string;
  name: string;
  kind: ProviderKind;
  baseUrl: string;
  /** Local servers need no key. */
  needsKey: boolean;
  /** DeepSeek-style `reasoning_content` on the wire. */
  reasoningContent?: boolean;
  example?: string;
}

export const PRESETS: ProviderPreset[] = [
  { id: "openai", label: "OpenAI", name: "openai", kind: "openai", baseUrl: "https://api.openai.com/v1", needsKey: true, example: "gpt-4.1" },
  { id: "anthropic", label: "Anthropic", name: "anthropic", kind: "anthropic", baseUrl: "https://api.anthropic.com/v1", needsKey: true, example: "claude-sonnet-4-5" },
  { id: "deepseek", label: "DeepSeek", name: "deepseek", kind: "openai", baseUrl: "https://api.deepseek.com/v1", needsKey: true, reasoningContent: true, example: "deepseek-chat" },
  { id: "kimi", label: "Kimi (Moonshot)", name: "kimi", kind: "openai", baseUrl: "https://api.moonshot.ai/v1", needsKey: true, example: "kimi-k2-0905-preview" },
  { id: "qwen", label: "Qwen (DashScope)", name: "qwen", kind: "openai", baseUrl: "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", needsKey: true, example: "qwen-plus" },
  { id: "openrouter", label: "OpenRouter", name: "openrouter", kind: "openai", baseUrl: "https://openrouter.ai/api/v1", needsKey: true, example: "anthropic/claude-sonnet-4.5" },
  { id: "ollama", label: "Ollama (local)", name: "ollama", kind: "openai", baseUrl: "http://127.0.0.1:11434/v1", needsKey: false, example: "llama3.1" },
  { id: "lmstudio", label: "LM Studio (local)", name: "lmstudio", kind: "openai", baseUrl: "http://127.0.0.1:1234/v1", needsKey: false, example: "qwen2.5-coder-7b-instruct" },
];

export const KINDS: ProviderKind[] = ["openai", "anthropic", "openai-responses", "lingma"];

export type FieldErrors<K extends string> = Partial<Record<K, string>>;

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const ENV_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface ProviderForm {
  name: string;
  kind: ProviderKind;
  baseUrl: string;
  keySource: "none" | "keyring" | "env";
  keyName: string;
}

export function presetForm(p: ProviderPreset): ProviderForm {
  return { name: p.name, kind: p.kind, baseUrl: p.baseUrl, keySource: p.needsKey ? "keyring" : "none", keyName: p.needsKey ? p.name : "" };
}

export function validateProvider(f: ProviderForm, existing: string[] = []): FieldErrors<keyof ProviderForm> {
  const e: FieldErrors<keyof ProviderForm> = {};
  const name = f.name.trim();
  if (!name) e.name = "Enter a name, e.g. openai.";
  else if (!NAME_RE.test(name)) e.name = "Use letters, digits, '.', '_' or '-' (at most 64).";
  else if (existing.includes(name)) e.name = `A provider named "${name}" already exists.`;
  const url = f.baseUrl.trim();
  if (!url) e.baseUrl = "Enter the API base URL.";
  else {
    try {
      const u = new URL(url);
      if (u.protocol !== "http:" && u.protocol !== "https:") e.baseUrl = "The URL must start with http:// or https://.";
    } catch {
      e.baseUrl = "This is not a valid URL.";
    }
  }
  if (f.keySource !== "none") {
    const k = f.keyName.trim();
    if (!k) e.keyName = f.keySource === "env" ? "Enter the environment variable's name." : "Enter the keyring entry's name.";
    else if (f.keySource === "env" && !ENV_RE.test(k)) e.keyName = "Environment variable names use letters, digits and '_'.";
  }
  return e;
}

/** The edit form of an existing provider. */
export function providerFormOf(p: Provider): ProviderForm {
  return { name: p.name, kind: p.kind, baseUrl: p.baseUrl, keySource: p.key?.source ?? "none", keyName: p.key?.name ?? "" };
}

/**
 * The input for a create (from a preset) or an edit (`base`: the provider as it is, so settings
 * the form does not show are kept).
 */
export function providerInput(f: ProviderForm, preset?: ProviderPreset, base?: Provider): ProviderInput {
  return {
    name: f.name.trim(),
    kind: f.kind,
    baseUrl: f.baseUrl.trim().replace(/\/+$/, ""),
    key: f.keySource === "none" ? null : { source: f.keySource, name: f.keyName.trim() },
    reasoningContent: preset?.reasoningContent ?? base?.reasoningContent ?? null,
    maxCompletionTokens: base?.maxCompletionTokens ?? null,
  };
}

export interface ModelForm {
  name: string;
  provider: string;
  upstream: string;
  aliases: string;
  contextWindow: string;
  maxOutputTokens: string;
  tools: boolean;
  vision: boolean;
  thinking: boolean;
  toolsMode: ToolsMode;
}

/** The engine's defaults for a new model: tools and vision on, thinking off, native tools. */
export const MODEL_DEFAULTS = { tools: true, vision: true, thinking: false, toolsMode: "native" as ToolsMode };

export function emptyModelForm(provider = ""): ModelForm {
  return { name: "", provider, upstream: "", aliases: "", contextWindow: "", maxOutputTokens: "", ...MODEL_DEFAULTS };
}

/** The edit form of an existing model. */
export function modelFormOf(m: Model): ModelForm {
  return {
    name: m.name,
    provider: m.provider,
    upstream: m.upstream,
    aliases: m.aliases.join(", "),
    contextWindow: m.contextWindow === null ? "" : String(m.contextWindow),
    maxOutputTokens: m.maxOutputTokens === null ? "" : String(m.maxOutputTokens),
    tools: m.capabilities.tools,
    vision: m.capabilities.vision,
    thinking: m.capabilities.thinking,
    toolsMode: m.tools,
  };
}

function positiveInt(s: string): number | null | undefined {
  const t = s.trim();
  if (!t) return null;
  if (!/^\d+$/.test(t)) return undefined;
  const n = Number(t);
  return n > 0 && Number.isSafeInteger(n) ? n : undefined;
}

export function validateModel(f: ModelForm, providers: string[], existing: string[] = []): FieldErrors<keyof ModelForm> {
  const e: FieldErrors<keyof ModelForm> = {};
  const name = f.name.trim();
  if (!name) e.name = "Enter the name clients will ask for.";
  else if (/\s/.test(name)) e.name = "Names cannot contain spaces.";
  else if (existing.includes(name)) e.name = `A model named "${name}" already exists.`;
  if (!f.provider) e.provider = providers.length ? "Choose a provider." : "Add a provider first.";
  else if (!providers.includes(f.provider)) e.provider = "Unknown provider.";
  if (!f.upstream.trim()) e.upstream = "Enter the provider's model id.";
  if (positiveInt(f.contextWindow) === undefined) e.contextWindow = "A positive whole number, or empty.";
  if (positiveInt(f.maxOutputTokens) === undefined) e.maxOutputTokens = "A positive whole number, or empty.";
  return e;
}

/**
 * The input for a create or (with `base`, the model as it is) an edit. A new model that keeps
 * the defaults sends `null`s, so its config entry stays short; an edit sends what the form shows
 * and keeps the price override the form does not show.
 */
export function modelInput(f: ModelForm, base?: Model): ModelInput {
  const caps = { tools: f.tools, vision: f.vision, thinking: f.thinking };
  const defaultCaps = caps.tools === MODEL_DEFAULTS.tools && caps.vision === MODEL_DEFAULTS.vision && caps.thinking === MODEL_DEFAULTS.thinking;
  return {
    name: f.name.trim(),
    aliases: f.aliases.split(",").map((a) => a.trim()).filter(Boolean),
    provider: f.provider,
    upstream: f.upstream.trim(),
    contextWindow: positiveInt(f.contextWindow) ?? null,
    maxOutputTokens: positiveInt(f.maxOutputTokens) ?? null,
    capabilities: base || !defaultCaps ? caps : null,
    tools: base || f.toolsMode !== MODEL_DEFAULTS.toolsMode ? f.toolsMode : null,
    price: base?.price ?? null,
  };
}

export function hasErrors(e: object): boolean {
  return Object.keys(e).length > 0;
}
