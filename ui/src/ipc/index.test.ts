import { describe, expect, it, vi } from "vitest";
import { EngineError, HttpTransport, TauriTransport, createApi, defaultTransport, isNoSession, queryString, tauriInvoke } from "./index";

function fakeFetch(status: number, body: string | undefined) {
  return vi.fn(async (_url: RequestInfo | URL, _init?: RequestInit) => new Response(body ?? null, { status, headers: { "Content-Type": "application/json" } }));
}

function headersOf(init: RequestInit | undefined): Record<string, string> {
  return init?.headers as Record<string, string>;
}

describe("HttpTransport", () => {
  it("sends no credential of its own (the browser adds the session cookie) and parses JSON", async () => {
    const f = fakeFetch(200, JSON.stringify({ mode: "local", proxyRunning: true }));
    const api = createApi(new HttpTransport({ fetch: f }));
    const r = await api.routing();
    expect(r).toEqual({ mode: "local", proxyRunning: true });
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/routing");
    expect(init?.method).toBe("GET");
    expect(init?.credentials).toBe("same-origin");
    expect(headersOf(init)).toEqual({ Accept: "application/json", "X-Keyhaven-UI": "1" });
    expect(headersOf(init)["Content-Type"]).toBeUndefined();
    expect(init?.body).toBeUndefined();
  });

  it("sends JSON bodies with a JSON content type", async () => {
    const f = fakeFetch(200, JSON.stringify({ mode: "hybrid", proxyRunning: false }));
    const api = createApi(new HttpTransport({ fetch: f }));
    await api.setRouting({ mode: "hybrid" });
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/routing");
    expect(init?.method).toBe("PUT");
    expect(headersOf(init)["Content-Type"]).toBe("application/json");
    expect(JSON.parse(init?.body as string)).toEqual({ mode: "hybrid" });
  });

  it("marks bodiless POSTs as JSON too (the engine's guard wants it)", async () => {
    const f = fakeFetch(200, JSON.stringify({ ok: true }));
    await createApi(new HttpTransport({ fetch: f })).testModel("a b/c");
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/models/a%20b%2Fc/test");
    expect(init?.method).toBe("POST");
    expect(headersOf(init)["Content-Type"]).toBe("application/json");
  });

  it("accepts an empty 204", async () => {
    const f = vi.fn(async () => new Response(null, { status: 204 }));
    await expect(createApi(new HttpTransport({ fetch: f })).deleteModel("m")).resolves.toBeUndefined();
  });

  it("maps {kind, message} errors to EngineError", async () => {
    const f = fakeFetch(404, JSON.stringify({ kind: "not_found", message: "no provider `x`" }));
    const err = await createApi(new HttpTransport({ fetch: f })).testProvider("x").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineError);
    expect(err).toMatchObject({ kind: "not_found", message: "no provider `x`", status: 404 });
  });

  it("maps non-JSON error bodies to kind http", async () => {
    const f = vi.fn(async () => new Response("Bad Gateway", { status: 502 }));
    const err = await createApi(new HttpTransport({ fetch: f })).status().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "http", status: 502 });
    expect((err as Error).message).toContain("502");
  });

  it("maps fetch failures to kind network", async () => {
    const f = vi.fn(async () => {
      throw new TypeError("Failed to fetch");
    });
    const err = await createApi(new HttpTransport({ fetch: f })).status().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "network" });
  });

  it("maps an unparseable 200 to kind decode", async () => {
    const f = vi.fn(async () => new Response("<html>", { status: 200 }));
    const err = await createApi(new HttpTransport({ fetch: f })).status().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "decode" });
  });

  it("builds query strings without empty filters", async () => {
    const f = fakeFetch(200, JSON.stringify({ calls: [], offset: 0, limit: 50, hasMore: false }));
    await createApi(new HttpTransport({ fetch: f })).calls({
      limit: 50, offset: 100, model: "gpt", provider: null, client: "", status: "error", sinceMs: null, conversation: "conv 1",
      session: "0b6f-sess",
    });
    expect(f.mock.calls[0]![0]).toBe("/api/calls?limit=50&offset=100&model=gpt&status=error&conversation=conv+1&session=0b6f-sess");
    await createApi(new HttpTransport({ fetch: f })).sessions({ days: 7, limit: 0 });
    expect(f.mock.calls[1]![0]).toBe("/api/usage/sessions?days=7&limit=0");
    expect(queryString({ days: 1, groupBy: "model" })).toBe("?days=1&groupBy=model");
    expect(queryString({})).toBe("");
  });
});

describe("client setup calls", () => {
  it("use the dry-run and env routes", async () => {
    const f = fakeFetch(200, "{}");
    const a = createApi(new HttpTransport({ fetch: f }));
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

describe("isNoSession", () => {
  it("is true for a 401 or kind unauthorized only", () => {
    expect(isNoSession(new EngineError("unauthorized", "no session", 401))).toBe(true);
    expect(isNoSession(new EngineError("http", "HTTP 401", 401))).toBe(true);
    expect(isNoSession(new EngineError("forbidden", "Origin not allowed", 403))).toBe(false);
    expect(isNoSession(new EngineError("network", "down"))).toBe(false);
    expect(isNoSession(new Error("x"))).toBe(false);
  });
});

describe("TauriTransport", () => {
  const reply = (status: number, body: unknown) => vi.fn(async (_cmd: string, _args?: Record<string, unknown>) => ({ status, body }));

  it("sends method, path and body to the one control command", async () => {
    const invoke = reply(200, { mode: "hybrid", proxyRunning: true });
    const r = await createApi(new TauriTransport(invoke)).setRouting({ mode: "hybrid" });
    expect(r).toEqual({ mode: "hybrid", proxyRunning: true });
    expect(invoke).toHaveBeenCalledWith("control", { method: "PUT", path: "/api/routing", body: { mode: "hybrid" } });
  });

  it("sends null for a missing body and keeps the query string", async () => {
    const invoke = reply(200, { calls: [], offset: 0, limit: 5, hasMore: false });
    await createApi(new TauriTransport(invoke)).calls({ limit: 5, offset: 0, model: null, provider: null, client: null, status: null, sinceMs: null, conversation: null, session: null });
    expect(invoke).toHaveBeenCalledWith("control", { method: "GET", path: "/api/calls?limit=5&offset=0", body: null });
  });

  it("maps error replies to EngineError with the status", async () => {
    const invoke = reply(503, { kind: "unavailable", message: "Keyhaven is stopped; start it to use this" });
    const err = await createApi(new TauriTransport(invoke)).status().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineError);
    expect(err).toMatchObject({ kind: "unavailable", status: 503 });
  });

  it("turns a 204 (null body) into undefined", async () => {
    await expect(createApi(new TauriTransport(reply(204, null))).deleteModel("m")).resolves.toBeUndefined();
  });

  it("maps a rejected invoke to kind ipc and a malformed answer to kind decode", async () => {
    const rejected = vi.fn(async () => {
      throw new Error("command control not found");
    });
    await expect(createApi(new TauriTransport(rejected)).status()).rejects.toMatchObject({ kind: "ipc" });
    const odd = vi.fn(async () => "nope");
    await expect(createApi(new TauriTransport(odd)).status()).rejects.toMatchObject({ kind: "decode" });
  });

  it("reaches the app routes", async () => {
    const invoke = reply(200, { state: "stopped", error: null, gatewayUrl: null, startOnLogin: false, lastStop: null });
    const a = createApi(new TauriTransport(invoke));
    await a.stop();
    await a.setApp({ startOnLogin: true });
    expect(invoke.mock.calls.map((c) => [c[1]?.method, c[1]?.path])).toEqual([["POST", "/api/app/stop"], ["PUT", "/api/app"]]);
  });
});

describe("transport selection", () => {
  it("finds Tauri's invoke only when the global is there", () => {
    const invoke = async () => ({ status: 200, body: null });
    expect(tauriInvoke({ __TAURI__: { core: { invoke } } })).toBe(invoke);
    expect(tauriInvoke({})).toBeUndefined();
    expect(tauriInvoke({ __TAURI__: {} })).toBeUndefined();
  });

  it("uses HTTP outside the app window", () => {
    expect(defaultTransport()).toBeInstanceOf(HttpTransport);
  });
});

describe("downloads", () => {
  it("reads a CSV export as text over HTTP, with the UI header and no credential of its own", async () => {
    const csv = 'id,client\nkh-1,"a, ""quoted"" client"\n';
    const f = vi.fn(async (_url: RequestInfo | URL, _init?: RequestInit) => new Response(csv, { status: 200, headers: { "Content-Type": "text/csv; charset=utf-8" } }));
    const text = await createApi(new HttpTransport({ fetch: f })).exportCalls({ format: "csv", since: "2026-11-30", until: null });
    expect(text).toBe(csv);
    const [url, init] = f.mock.calls[0]!;
    expect(url).toBe("/api/calls/export?format=csv&since=2026-11-30");
    expect(init?.credentials).toBe("same-origin");
    expect(headersOf(init)["X-Keyhaven-UI"]).toBe("1");
  });

  it("turns an error answer into an EngineError", async () => {
    const f = fakeFetch(400, JSON.stringify({ kind: "invalid", message: "until is before since" }));
    const err = await createApi(new HttpTransport({ fetch: f })).exportUsage({ format: "csv", since: "2026-12-02", until: "2026-11-30" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineError);
    expect((err as EngineError).kind).toBe("invalid");
    expect((err as EngineError).status).toBe(400);
  });

  it("gets the file's text from the app window's IPC answer", async () => {
    const invoke = vi.fn(async () => ({ status: 200, body: "day,model\n2026-11-30,m\n" }));
    const text = await createApi(new TauriTransport(invoke)).exportUsage({ format: "csv", since: null, until: null });
    expect(text).toBe("day,model\n2026-11-30,m\n");
    expect(invoke).toHaveBeenCalledWith("control", { method: "GET", path: "/api/usage/export?format=csv", body: null });
  });
});

describe("prices", () => {
  it("reads the price report with a GET", async () => {
    const report = { version: "2026-11-30", currency: "USD", models: [] };
    const f = fakeFetch(200, JSON.stringify(report));
    await expect(createApi(new HttpTransport({ fetch: f })).prices()).resolves.toEqual(report);
    expect(f.mock.calls[0]![0]).toBe("/api/prices");
    expect(f.mock.calls[0]![1]?.method).toBe("GET");
  });
});
