// Chart view models for the Overview: days of a window, usage series stacked per day, the
// biggest keys kept and the rest folded into "other". Pure, unit-tested; drawn by chart.tsx.
import type { UsagePoint, UsageReport, UsageStats } from "./ipc";

/** Every `YYYY-MM-DD` from `since` to `until` (UTC), inclusive. */
export function dayRange(since: string, until: string): string[] {
  const out: string[] = [];
  const start = Date.parse(`${since}T00:00:00Z`);
  const end = Date.parse(`${until}T00:00:00Z`);
  if (!Number.isFinite(start) || !Number.isFinite(end)) return out;
  for (let t = start; t <= end && out.length < 400; t += 86_400_000) out.push(new Date(t).toISOString().slice(0, 10));
  return out;
}

export const OTHER = "other";

export interface Stacked {
  /** The x axis: one entry per day. */
  labels: string[];
  /** The series, biggest first; the last may be "other". */
  keys: string[];
  /** values[day][key], in the order of `keys`. */
  values: number[][];
  /** The largest day total. */
  max: number;
  total: number;
}

/**
 * Usage points as stacked columns per day: the `maxKeys` biggest keys by `metric` over the whole
 * window, everything else summed into "other". Days without calls are zero.
 */
export function stackPoints(points: UsagePoint[], days: string[], metric: (p: UsagePoint) => number, maxKeys = 5): Stacked {
  const byKey = new Map<string, number>();
  for (const p of points) byKey.set(label(p.key), (byKey.get(label(p.key)) ?? 0) + metric(p));
  const ranked = [...byKey.entries()].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const kept = ranked.slice(0, ranked.length > maxKeys ? maxKeys - 1 : maxKeys).map(([k]) => k);
  const keys = ranked.length > kept.length ? [...kept, OTHER] : kept;
  const dayIndex = new Map(days.map((d, i) => [d, i]));
  const values = days.map(() => keys.map(() => 0));
  for (const p of points) {
    const d = dayIndex.get(p.day);
    if (d === undefined) continue;
    const v = metric(p);
    if (v <= 0) continue;
    let k = keys.indexOf(label(p.key));
    if (k < 0) k = keys.indexOf(OTHER);
    if (k < 0) continue;
    values[d]![k]! += v;
  }
  const sums = values.map((row) => row.reduce((a, b) => a + b, 0));
  return { labels: days, keys, values, max: Math.max(0, ...sums), total: sums.reduce((a, b) => a + b, 0) };
}

/** Per-day series from a `groupBy: "day"` report (latency, errors): one column group per day. */
export function dailyColumns(report: UsageReport, days: string[], metrics: { key: string; of: (s: UsageStats) => number | null }[]): Stacked {
  const byDay = new Map(report.rows.map((r) => [r.key, r.stats]));
  const values = days.map((d) => {
    const s = byDay.get(d);
    return metrics.map((m) => (s ? (m.of(s) ?? 0) : 0));
  });
  const flat = values.flat();
  return { labels: days, keys: metrics.map((m) => m.key), values, max: Math.max(0, ...flat), total: flat.reduce((a, b) => a + b, 0) };
}

function label(key: string): string {
  return key || "(unknown)";
}

/** A short axis label: `2026-11-30` → `11-30`. */
export function shortDay(day: string): string {
  return day.length === 10 ? day.slice(5) : day;
}

/** A "nice" axis maximum at or above `max` (1, 2 or 5 × 10^n). */
export function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const exp = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * exp >= max) return m * exp;
  return 10 * exp;
}
