import { describe, expect, it } from "vitest";
import { PRESETS, hasErrors, modelInput, presetForm, providerInput, validateModel, validateProvider } from "./presets";

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
  const ok = { name: "fast", provider: "openai", upstream: "gpt-4.1-mini", aliases: " a, ,b ", contextWindow: "128000", maxOutputTokens: "" };
  it("accepts a good model and builds its input", () => {
    expect(hasErrors(validateModel(ok, ["openai"]))).toBe(false);
    expect(modelInput(ok)).toMatchObject({ aliases: ["a", "b"], contextWindow: 128000, maxOutputTokens: null });
  });
  it("rejects bad ones", () => {
    expect(validateModel({ ...ok, provider: "" }, []).provider).toBe("Add a provider first.");
    expect(validateModel({ ...ok, contextWindow: "1.5" }, ["openai"]).contextWindow).toBeDefined();
    expect(validateModel({ ...ok, upstream: " " }, ["openai"]).upstream).toBeDefined();
  });
});
