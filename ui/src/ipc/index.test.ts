import { describe, expect, it, vi } from "vitest";
import { EngineError, HttpTransport, createApi, queryString, tokenFromDocument } from "./index";

function fakeFetch(status: number, body: string | undefined) {
  return vi.fn(async (_url: RequestInfo | URL, _init?: RequestInit) => new Response(body ?? null, { status, headers: { "Content-Type": "application/json" } }));
}

function headersOf(init: RequestInit | undefined): Record<string, string> {
  return init?.headers as Record<string, string>;
}

describe("HttpTransport", () => {
  it("sends the bearer token and parses JSON", async () => {
    const f = fakeFetch(200, JSON.stringify({ mode: "local", proxyRunning: true }));
    const api = createApi(new HttpTransport({ token: "tok-123", fetch: f }));
    const r = await api.routing();
    expect(r).toEqual({ mode: "local", proxyRunning: true });
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/routing");
    expect(init?.method).toBe("GET");
    expect(headersOf(init).Authorization).toBe("Bearer tok-123");
    expect(headersOf(init)["Content-Type"]).toBeUndefined();
    expect(init?.body).toBeUndefined();
  });

  it("sends JSON bodies with a JSON content type", async () => {
    const f = fakeFetch(200, JSON.stringify({ mode: "hybrid", proxyRunning: false }));
    const api = createApi(new HttpTransport({ token: "t", fetch: f }));
    await api.setRouting({ mode: "hybrid" });
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/routing");
    expect(init?.method).toBe("PUT");
    expect(headersOf(init)["Content-Type"]).toBe("application/json");
    expect(JSON.parse(init?.body as string)).toEqual({ mode: "hybrid" });
  });

  it("marks bodiless POSTs as JSON too (the engine's guard wants it)", async () => {
    const f = fakeFetch(200, JSON.stringify({ ok: true }));
    await createApi(new HttpTransport({ token: "t", fetch: f })).testModel("a b/c");
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/models/a%20b%2Fc/test");
    expect(init?.method).toBe("POST");
    expect(headersOf(init)["Content-Type"]).toBe("application/json");
  });

  it("accepts an empty 204", async () => {
    const f = vi.fn(async () => new Response(null, { status: 204 }));
    await expect(createApi(new HttpTransport({ token: "t", fetch: f })).deleteModel("m")).resolves.toBeUndefined();
  });

  it("maps {kind, message} errors to EngineError", async () => {
    const f = fakeFetch(404, JSON.stringify({ kind: "not_found", message: "no provider `x`" }));
    const err = await createApi(new HttpTransport({ token: "t", fetch: f })).testProvider("x").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineError);
    expect(err).toMatchObject({ kind: "not_found", message: "no provider `x`", status: 404 });
  });

  it("maps non-JSON error bodies to kind http", async () => {
    const f = vi.fn(async () => new Response("Bad Gateway", { status: 502 }));
    const err = await createApi(new HttpTransport({ token: "t", fetch: f })).status().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "http", status: 502 });
    expect((err as Error).message).toContain("502");
  });

  it("maps fetch failures to kind network", async () => {
    const f = vi.fn(async () => {
      throw new TypeError("Failed to fetch");
    });
    const err = await createApi(new HttpTransport({ token: "t", fetch: f })).status().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "network" });
  });

  it("maps an unparseable 200 to kind decode", async () => {
    const f = vi.fn(async () => new Response("<html>", { status: 200 }));
    const err = await createApi(new HttpTransport({ token: "t", fetch: f })).status().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "decode" });
  });

  it("builds query strings without empty filters", async () => {
    const f = fakeFetch(200, JSON.stringify({ calls: [], offset: 0, limit: 50, hasMore: false }));
    await createApi(new HttpTransport({ token: "t", fetch: f })).calls({
      limit: 50, offset: 100, model: "gpt", provider: null, client: "", status: "error", sinceMs: null,
    });
    expect(f.mock.calls[0]![0]).toBe("/api/calls?limit=50&offset=100&model=gpt&status=error");
    expect(queryString({ days: 1, groupBy: "model" })).toBe("?days=1&groupBy=model");
    expect(queryString({})).toBe("");
  });
});

describe("client setup calls", () => {
  it("use the dry-run and env routes", async () => {
    const f = fakeFetch(200, "{}");
    const a = createApi(new HttpTransport({ token: "t", fetch: f }));
    await a.previewRoute("claudeCode", { model: "m", smallModel: null, disableHttp2: false });
    await a.previewUndo("codex");
    await a.routeEnv();
    await a.envSetup();
    await a.usageSeries({ days: 7, splitBy: "provider" });
    const calls = f.mock.calls.map(([url, init]) => `${init?.method} ${String(url)}`);
    expect(calls).toEqual([
      "POST /api/clients/claudeCode/route/preview",
      "POST /api/clients/codex/undo/preview",
      "POST /api/clients/env/route",
      "GET /api/clients/env",
      "GET /api/usage/series?days=7&splitBy=provider",
    ]);
    expect(JSON.parse(f.mock.calls[0]![1]?.body as string)).toEqual({ model: "m", smallModel: null, disableHttp2: false });
  });
});

describe("tokenFromDocument", () => {
  const doc = (content: string | null) => ({
    querySelector: () => (content === null ? null : ({ getAttribute: () => content } as unknown as Element)),
  });
  it("reads the injected token", () => {
    expect(tokenFromDocument(doc("abc"))).toBe("abc");
  });
  it("ignores the unreplaced placeholder and a missing tag", () => {
    expect(tokenFromDocument(doc("%KEYHAVEN_TOKEN%"))).toBe("");
    expect(tokenFromDocument(doc(null))).toBe("");
  });
});
