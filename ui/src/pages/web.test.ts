import { describe, expect, it } from "vitest";
import type { WebSettings, WebTestResult } from "../ipc";
import { createApi } from "../ipc";
import { keyStatus, testSummary, toWebForm, validateWeb, webInput } from "./web";

const settings = (over: Partial<WebSettings> = {}): WebSettings => ({
  search: "searxng",
  searchUrl: "http://127.0.0.1:8888",
  effectiveSearchUrl: "http://127.0.0.1:8888",
  fetch: "keyhaven",
  fetchMaxBytes: 2097152,
  timeoutMs: 20000,
  key: { source: "keyring", name: "brave-search", hasKey: false },
  restartRequired: false,
  ...over,
});

describe("web tools settings", () => {
  it("validate the search URL per provider", () => {
    expect(validateWeb({ search: "none", searchUrl: "", fetch: "keyhaven" })).toEqual({});
    expect(validateWeb({ search: "brave", searchUrl: "", fetch: "keyhaven" })).toEqual({});
    expect(validateWeb({ search: "searxng", searchUrl: " ", fetch: "editor" }).searchUrl).toMatch(/needs your instance/);
    expect(validateWeb({ search: "searxng", searchUrl: "ftp://x.org", fetch: "editor" }).searchUrl).toMatch(/http\(s\) URL/);
    expect(validateWeb({ search: "searxng", searchUrl: "https://s.example.org/", fetch: "editor" })).toEqual({});
  });
  it("round-trip the form and send an empty URL to remove it", () => {
    const f = toWebForm(settings({ searchUrl: null, search: "brave" }));
    expect(f).toEqual({ search: "brave", searchUrl: "", fetch: "keyhaven" });
    expect(webInput({ ...f, searchUrl: "  https://b.example  " })).toEqual({
      search: "brave",
      searchUrl: "https://b.example",
      fetch: "keyhaven",
      fetchMaxBytes: null,
      timeoutMs: null,
    });
  });
  it("say where the key is without showing it", () => {
    expect(keyStatus(settings())).toBe("No key set (keyring entry brave-search).");
    expect(keyStatus(settings({ key: { source: "env", name: "BRAVE_KEY", hasKey: true } }))).toBe("A key is set (environment variable BRAVE_KEY).");
  });
  it("sum up a test search", () => {
    const r: WebTestResult = { ok: true, hits: 3, firstTitle: "Rust", latencyMs: 120, message: "3 result(s)" };
    expect(testSummary(r)).toBe("3 results in 120 ms. First: “Rust”.");
    expect(testSummary({ ...r, hits: 1, firstTitle: null })).toBe("1 result in 120 ms.");
    expect(testSummary({ ...r, ok: false, message: "Brave Search rate limit reached (HTTP 429)" })).toBe("Failed: Brave Search rate limit reached (HTTP 429)");
  });
  it("call the web routes, the key write-only", async () => {
    const calls: [string, string, unknown][] = [];
    const api = createApi({
      download: async () => "",
      request: async <T,>(method: string, path: string, body?: unknown) => {
        calls.push([method, path, body]);
        return settings() as T;
      },
    });
    await api.web();
    await api.setWeb({ search: "none", searchUrl: null, fetch: "editor", fetchMaxBytes: null, timeoutMs: null });
    await api.setWebKey("BSA-secret");
    await api.deleteWebKey();
    await api.testWebSearch("rust");
    expect(calls).toEqual([
      ["GET", "/api/web", undefined],
      ["PUT", "/api/web", { search: "none", searchUrl: null, fetch: "editor", fetchMaxBytes: null, timeoutMs: null }],
      ["PUT", "/api/web/key", { value: "BSA-secret" }],
      ["DELETE", "/api/web/key", undefined],
      ["POST", "/api/web/test", { query: "rust" }],
    ]);
  });
});
