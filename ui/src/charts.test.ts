import { describe, expect, it } from "vitest";
import { OTHER, dailyColumns, dayRange, niceMax, shortDay, stackPoints } from "./charts";
import type { UsagePoint, UsageReport, UsageStats } from "./ipc";

const pt = (day: string, key: string, costMicros: number): UsagePoint => ({
  day, key, calls: 1, errors: 0, inputTokens: 10, outputTokens: 5, cacheReadTokens: 0, cacheWriteTokens: 0, costMicros,
});

describe("dayRange", () => {
  it("lists every day inclusive, across months", () => {
    expect(dayRange("2026-02-27", "2026-03-02")).toEqual(["2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]);
    expect(dayRange("2026-03-01", "2026-03-01")).toEqual(["2026-03-01"]);
    expect(dayRange("x", "y")).toEqual([]);
  });
});

describe("stackPoints", () => {
  const days = ["2026-03-01", "2026-03-02", "2026-03-03"];
  it("stacks per day with missing days as zero", () => {
    const s = stackPoints([pt("2026-03-01", "a", 10), pt("2026-03-01", "b", 30), pt("2026-03-03", "a", 5)], days, (p) => p.costMicros);
    expect(s.keys).toEqual(["b", "a"]);
    expect(s.values).toEqual([[30, 10], [0, 0], [0, 5]]);
    expect([s.max, s.total]).toEqual([40, 45]);
  });
  it("folds the small keys into other and names the unknown key", () => {
    const pts = ["a", "b", "c", ""].map((k, i) => pt("2026-03-02", k, 100 - i * 10));
    const s = stackPoints(pts, days, (p) => p.costMicros, 3);
    expect(s.keys).toEqual(["a", "b", OTHER]);
    expect(s.values[1]).toEqual([100, 90, 80 + 70]);
    expect(stackPoints([pt("2026-03-02", "", 1)], days, (p) => p.costMicros).keys).toEqual(["(unknown)"]);
  });
  it("ignores points outside the window and zero metrics", () => {
    const s = stackPoints([pt("2026-01-01", "a", 10), pt("2026-03-01", "z", 0)], days, (p) => p.costMicros);
    expect(s.total).toBe(0);
    expect(s.keys).toEqual(["a"]);
  });
});

describe("dailyColumns", () => {
  it("takes one value per metric and day from a by-day report", () => {
    const stats = { calls: 4, errors: 1, latency: { p50Ms: 100, p95Ms: 300, p99Ms: null } } as unknown as UsageStats;
    const report = { since: "2026-03-01", until: "2026-03-02", groupBy: "day", totals: stats, rows: [{ key: "2026-03-02", stats }] } as UsageReport;
    const c = dailyColumns(report, ["2026-03-01", "2026-03-02"], [
      { key: "p50", of: (s) => s.latency.p50Ms },
      { key: "p99", of: (s) => s.latency.p99Ms },
    ]);
    expect(c.values).toEqual([[0, 0], [100, 0]]);
    expect(c.max).toBe(100);
  });
});

describe("axis helpers", () => {
  it("rounds maxima up and shortens days", () => {
    expect([niceMax(0), niceMax(7), niceMax(11), niceMax(1500), niceMax(0.003)]).toEqual([1, 10, 20, 2000, 0.005]);
    expect(shortDay("2026-03-01")).toBe("03-01");
  });
});
