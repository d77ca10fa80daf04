import { describe, expect, it } from "vitest";
import type { ModelRoute } from "../ipc";
import { createApi } from "../ipc";
import { modelRoutesNote, routeSummary, showModelRoutes, tabNote } from "./routing";

describe("per-model Cursor routes", () => {
  it("are shown in hybrid mode only", () => {
    expect(showModelRoutes("hybrid")).toBe(true);
    expect(showModelRoutes("local")).toBe(false);
    expect(showModelRoutes("upstream")).toBe(false);
    expect(modelRoutesNote("local")).toMatch(/every configured model/);
    expect(modelRoutesNote("upstream")).toMatch(/Cursor's servers/);
  });
  it("are summed up", () => {
    const m = (model: string, route: ModelRoute["route"]): ModelRoute => ({ model, route });
    expect(routeSummary([m("a", "local"), m("b", "upstream"), m("c", "local")])).toBe("2 of 3 models run locally");
    expect(routeSummary([m("a", "upstream")])).toBe("0 of 1 model runs locally");
    expect(routeSummary([])).toBe("0 of 0 models run locally");
  });
  it("are set with PUT /api/routing/models/{name}", async () => {
    const calls: [string, string, unknown][] = [];
    const api = createApi({
      download: async () => "",
      request: async <T,>(method: string, path: string, body?: unknown) => {
        calls.push([method, path, body]);
        return { mode: "hybrid", proxyRunning: true, models: [] } as T;
      },
    });
    await api.setModelRoute("claude 4/x", { route: "upstream" });
    expect(calls).toEqual([["PUT", "/api/routing/models/claude%204%2Fx", { route: "upstream" }]]);
  });
});

describe("Cursor Tab", () => {
  it("says who answers it", () => {
    expect(tabNote({ model: "ds-fim", fimModels: ["ds-fim"] })).toMatch(/answered by ds-fim/);
    expect(tabNote({ model: null, fimModels: [] })).toMatch(/fim = true/);
    expect(tabNote({ model: null, fimModels: ["ds-fim"] })).toBe("Tab is served by Cursor (official).");
  });
  it("is set with PUT /api/routing/tab", async () => {
    const calls: [string, string, unknown][] = [];
    const api = createApi({
      download: async () => "",
      request: async <T,>(method: string, path: string, body?: unknown) => {
        calls.push([method, path, body]);
        return {} as T;
      },
    });
    await api.setTab({ model: "ds-fim" });
    await api.setTab({ model: null });
    expect(calls).toEqual([
      ["PUT", "/api/routing/tab", { model: "ds-fim" }],
      ["PUT", "/api/routing/tab", { model: null }],
    ]);
  });
});
