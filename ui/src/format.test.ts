import { describe, expect, it } from "vitest";
import { costSourceSplit, exportFileName, formatCost, formatDuration, plural, formatMs, formatPercent, formatTokens, prettyBody, sinceDay, usageBars } from "./format";
import type { UsageReport, UsageStats } from "./ipc";

describe("formatCost", () => {
  it("formats micro-dollars", () => {
    expect(formatCost(12_300)).toBe("$0.0123");
    expect(formatCost(0)).toBe("$0.00");
    expect(formatCost(1_500_000)).toBe("$1.50");
    expect(formatCost(1_234_567_890)).toBe("$1,234.57");
    expect(formatCost(42)).toBe("$0.000042");
    expect(formatCost(-12_300)).toBe("-$0.0123");
  });
  it("shows unknown costs as a dash", () => {
    expect(formatCost(null)).toBe("—");
    expect(formatCost(undefined)).toBe("—");
  });
});

describe("formatPercent", () => {
  it("formats ratios", () => {
    expect(formatPercent(0.1234)).toBe("12.3%");
    expect(formatPercent(0)).toBe("0%");
    expect(formatPercent(1)).toBe("100%");
    expect(formatPercent(0.5, 0)).toBe("50%");
    expect(formatPercent(Number.NaN)).toBe("—");
  });
});

describe("formatTokens / formatMs / formatDuration", () => {
  it("abbreviates", () => {
    expect(formatTokens(950)).toBe("950");
    expect(formatTokens(12_345)).toBe("12.3k");
    expect(formatTokens(4_500_000)).toBe("4.5M");
    expect(formatTokens(2_000)).toBe("2k");
    expect(formatMs(850)).toBe("850 ms");
    expect(formatMs(1234)).toBe("1.23 s");
    expect(formatMs(2000)).toBe("2 s");
    expect(formatMs(125_000)).toBe("2m 5s");
    expect(formatMs(null)).toBe("—");
    expect(formatDuration(90_061_000)).toBe("1d 1h 1m");
    expect(formatDuration(59_000)).toBe("0m");
  });
});

const stats = (costMicros: number): UsageStats => ({
  calls: 1, errors: 0, errorRate: 0, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0,
  reasoningTokens: 0, cacheHitRate: 0, costMicros, costUsd: costMicros / 1e6, avgLatencyMs: 0,
  latency: { p50Ms: null, p95Ms: null, p99Ms: null },
});

describe("usageBars", () => {
  it("sorts, drops zeros and scales to the largest", () => {
    const report: UsageReport = {
      since: "2026-11-30", until: "2026-11-30", timeZone: "UTC", groupBy: "model", totals: stats(300),
      rows: [{ key: "a", stats: stats(100) }, { key: "", stats: stats(200) }, { key: "z", stats: stats(0) }],
      costSources: [],
    };
    const bars = usageBars(report, (s) => s.costMicros, formatCost);
    expect(bars.map((b) => [b.label, b.fraction])).toEqual([["(unknown)", 1], ["a", 0.5]]);
    expect(bars[0]!.display).toBe("$0.0002");
  });
});

describe("prettyBody", () => {
  it("indents JSON and leaves other text alone", () => {
    expect(prettyBody('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(prettyBody("data: x")).toBe("data: x");
    expect(prettyBody(null)).toBe("");
  });
});

describe("plural", () => {
  it("counts", () => {
    expect(plural(1, "call")).toBe("1 call");
    expect(plural(0, "call")).toBe("0 calls");
  });
});

describe("cost sources and exports", () => {
  it("names the largest share of the cost first", () => {
    const split = costSourceSplit([
      { source: "reported", calls: 8, costMicros: 900_000 },
      { source: "computed", calls: 1, costMicros: 50_000 },
      { source: "estimated", calls: 1, costMicros: 50_000 },
    ]);
    expect(split).toEqual({ value: "90% reported", sub: "5% computed · 5% estimated" });
  });

  it("falls back to call counts when nothing cost anything, and says nothing without calls", () => {
    expect(
      costSourceSplit([
        { source: "reported", calls: 1, costMicros: 0 },
        { source: "computed", calls: 0, costMicros: 0 },
        { source: "estimated", calls: 3, costMicros: 0 },
      ]),
    ).toEqual({ value: "75% estimated", sub: "25% reported · 0% computed" });
    expect(costSourceSplit([{ source: "reported", calls: 0, costMicros: 0 }])).toBeNull();
  });

  it("dates export windows in UTC", () => {
    const now = Date.UTC(2026, 10, 30, 23, 30);
    expect(sinceDay(1, now)).toBe("2026-11-30");
    expect(sinceDay(7, now)).toBe("2026-11-24");
    expect(exportFileName("calls", "2026-11-24", "2026-11-30")).toBe("keyhaven-calls-2026-11-24-to-2026-11-30.csv");
  });
});
