import { describe, expect, it } from "vitest";
import { MODEL_DEFAULTS, PRESETS, emptyModelForm, hasErrors, modelFormOf, modelInput, presetForm, providerFormOf, providerInput, validateModel, validateProvider } from "./presets";
import type { Model, Provider } from "./ipc";

describe("provider presets", () => {
  it("cover the supported providers and validate as they are", () => {
    expect(PRESETS.map((p) => p.id)).toEqual(["openai", "anthropic", "deepseek", "kimi", "qwen", "openrouter", "ollama", "lmstudio"]);
    for (const p of PRESETS) expect(validateProvider(presetForm(p))).toEqual({});
  });
  it("local presets need no key", () => {
    const ollama = PRESETS.find((p) => p.id === "ollama")!;
    expect(providerInput(presetForm(ollama), ollama).key).toBeNull();
    const ds = PRESETS.find((p) => p.id === "deepseek")!;
    expect(providerInput(presetForm(ds), ds)).toMatchObject({ key: { source: "keyring", name: "deepseek" }, reasoningContent: true });
  });
});

describe("validateProvider", () => {
  it("reports each bad field", () => {
    const e = validateProvider({ name: "bad name", kind: "openai", baseUrl: "ftp://x", keySource: "env", keyName: "1X" });
    expect(Object.keys(e).sort()).toEqual(["baseUrl", "keyName", "name"]);
    expect(validateProvider({ name: "a", kind: "openai", baseUrl: "http://h/v1", keySource: "none", keyName: "" }, ["a"]).name).toMatch(/exists/);
  });
});

describe("validateModel", () => {
  const ok = { ...emptyModelForm("openai"), name: "fast", upstream: "gpt-4.1-mini", aliases: " a, ,b ", contextWindow: "128000" };
  it("accepts a good model and builds its input", () => {
    expect(hasErrors(validateModel(ok, ["openai"]))).toBe(false);
    expect(modelInput(ok)).toMatchObject({ aliases: ["a", "b"], contextWindow: 128000, maxOutputTokens: null, capabilities: null, tools: null, price: null });
    expect(modelInput({ ...ok, thinking: true, toolsMode: "emulated" })).toMatchObject({ capabilities: { tools: true, vision: true, thinking: true }, tools: "emulated" });
  });
  it("rejects bad ones", () => {
    expect(validateModel({ ...ok, provider: "" }, []).provider).toBe("Add a provider first.");
    expect(validateModel({ ...ok, contextWindow: "1.5" }, ["openai"]).contextWindow).toBeDefined();
    expect(validateModel({ ...ok, upstream: " " }, ["openai"]).upstream).toBeDefined();
  });
});

describe("editing", () => {
  const provider: Provider = {
    name: "ds", kind: "openai", baseUrl: "https://api.deepseek.com/v1", key: { source: "keyring", name: "ds", hasKey: true },
    reasoningContent: true, maxCompletionTokens: false, modelCount: 1, health: null,
  };
  it("round-trips a provider and keeps the settings the form does not show", () => {
    const f = providerFormOf(provider);
    expect(f).toEqual({ name: "ds", kind: "openai", baseUrl: "https://api.deepseek.com/v1", keySource: "keyring", keyName: "ds" });
    expect(validateProvider(f, ["other"])).toEqual({});
    const input = providerInput({ ...f, baseUrl: "https://x/v1/" }, undefined, provider);
    expect(input).toEqual({ name: "ds", kind: "openai", baseUrl: "https://x/v1", key: { source: "keyring", name: "ds" }, reasoningContent: true, maxCompletionTokens: false });
    expect(providerFormOf({ ...provider, key: null }).keySource).toBe("none");
  });
  const model: Model = {
    id: "abc", name: "m", aliases: ["x", "y"], provider: "ds", upstream: "deepseek-chat", contextWindow: 64000, maxOutputTokens: null,
    capabilities: { tools: true, vision: false, thinking: true }, tools: "auto", priced: true,
    price: { input: "1", output: "2", cacheRead: null, cacheWrite: null },
  };
  it("round-trips a model, sending its capabilities and keeping its price", () => {
    const f = modelFormOf(model);
    expect(f).toMatchObject({ aliases: "x, y", contextWindow: "64000", maxOutputTokens: "", vision: false, thinking: true, toolsMode: "auto" });
    expect(hasErrors(validateModel(f, ["ds"], []))).toBe(false);
    expect(modelInput(f, model)).toEqual({
      name: "m", aliases: ["x", "y"], provider: "ds", upstream: "deepseek-chat", contextWindow: 64000, maxOutputTokens: null,
      capabilities: { tools: true, vision: false, thinking: true }, tools: "auto", price: model.price,
    });
    // An edit with default capabilities still sends them (the model had an explicit entry).
    expect(modelInput({ ...f, ...MODEL_DEFAULTS }, model).capabilities).toEqual({ tools: true, vision: true, thinking: false });
  });
});
