import { describe, expect, it } from "vitest";
import type { ModelPrice } from "./ipc";
import { createApi } from "./ipc";
import { priceInput, sourceText, toPriceForm, validatePrice } from "./prices";

const model = (over: Partial<ModelPrice> = {}): ModelPrice => ({
  name: "gpt",
  provider: "oa",
  upstream: "gpt-4o-mini",
  source: "table",
  perMtok: { input: "0.150000", output: "0.600000", cacheRead: "0.075000", cacheWrite: "1.000000" },
  version: "2026-11-30",
  note: null,
  ...over,
});

describe("prices page", () => {
  it("fills the form with the prices in use, without trailing zeros", () => {
    expect(toPriceForm(model())).toEqual({ input: "0.15", output: "0.6", cacheRead: "0.075", cacheWrite: "1" });
    expect(toPriceForm(model({ perMtok: null }))).toEqual({ input: "", output: "", cacheRead: "", cacheWrite: "" });
  });
  it("checks the amounts before they are sent", () => {
    expect(validatePrice({ input: "", output: "x", cacheRead: "", cacheWrite: "" })).toEqual({
      input: "A price in USD per million tokens, e.g. 3.00",
      output: "A price in USD per million tokens, e.g. 3.00",
    });
    expect(validatePrice({ input: "-1", output: "2", cacheRead: "0.3", cacheWrite: "1,5" })).toEqual({
      input: "A price in USD per million tokens, e.g. 3.00",
      cacheWrite: "Empty (the table's) or a price, e.g. 0.30",
    });
    expect(validatePrice({ input: "3", output: " 15.00 ", cacheRead: "", cacheWrite: "" })).toEqual({});
  });
  it("sends empty cache prices as null (the table's apply)", () => {
    expect(priceInput({ input: " 3 ", output: "15", cacheRead: "", cacheWrite: "3.75" })).toEqual({ input: "3", output: "15", cacheRead: null, cacheWrite: "3.75" });
  });
  it("names the source", () => {
    expect(sourceText(model())).toBe("price table");
    expect(sourceText(model({ source: "config", version: "override-20261201T211500Z" }))).toBe("override");
    expect(sourceText(model({ source: "config", version: "config-1a2b3c4d" }))).toBe("config override");
    expect(sourceText(model({ source: "none", version: null }))).toBe("no price");
  });
  it("calls the price routes", async () => {
    const calls: [string, string, unknown][] = [];
    const api = createApi({
      request: async <T,>(method: string, path: string, body?: unknown) => {
        calls.push([method, path, body]);
        return { version: "v", currency: "USD", models: [] } as T;
      },
      download: async () => "",
    });
    const input = priceInput({ input: "1", output: "2", cacheRead: "", cacheWrite: "" });
    await api.setPrice("a/b", input);
    await api.unsetPrice("a/b");
    expect(calls).toEqual([
      ["PUT", "/api/prices/a%2Fb", input],
      ["DELETE", "/api/prices/a%2Fb", undefined],
    ]);
  });
});
