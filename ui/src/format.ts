// Pure formatting and view-model helpers (no DOM, no engine calls): unit-tested.
import type { CallStatus, CostSource, CostSourceShare, UsageReport, UsageStats } from "./ipc";

/** Micro-dollars as dollars: 12300 → "$0.0123", 1_234_567_890 → "$1,234.57", null → "—". */
export function formatCost(micros: number | null | undefined): string {
  if (micros === null || micros === undefined || !Number.isFinite(micros)) return "—";
  const usd = micros / 1_000_000;
  const abs = Math.abs(usd);
  if (abs === 0) return "$0.00";
  const digits = abs >= 1 ? 2 : abs >= 0.01 ? 4 : 6;
  const s = abs.toLocaleString("en-US", { minimumFractionDigits: digits === 2 ? 2 : 0, maximumFractionDigits: digits });
  return `${usd < 0 ? "-" : ""}$${s}`;
}

/** A ratio (0..1) as a percent: 0.1234 → "12.3%", 0 → "0%", 1 → "100%". */
export function formatPercent(ratio: number | null | undefined, digits = 1): string {
  if (ratio === null || ratio === undefined || !Number.isFinite(ratio)) return "—";
  const p = ratio * 100;
  if (p === 0 || p === 100) return `${p}%`;
  return `${p.toFixed(digits)}%`;
}

/** Token counts: 950 → "950", 12_345 → "12.3k", 4_500_000 → "4.5M". */
export function formatTokens(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  const abs = Math.abs(n);
  if (abs < 1000) return String(n);
  if (abs < 1_000_000) return `${trim(n / 1000)}k`;
  if (abs < 1_000_000_000) return `${trim(n / 1_000_000)}M`;
  return `${trim(n / 1_000_000_000)}B`;
}

function trim(x: number): string {
  return (Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(1)).replace(/\.0$/, "");
}

/** Milliseconds: 850 → "850 ms", 1234 → "1.23 s", 125_000 → "2m 5s", null → "—". */
export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2).replace(/\.?0+$/, "")} s`;
  const m = Math.floor(ms / 60_000);
  const s = Math.round((ms % 60_000) / 1000);
  return `${m}m ${s}s`;
}

/** Uptime-style duration: 90_061_000 → "1d 1h 1m". */
export function formatDuration(ms: number): string {
  const total = Math.floor(ms / 60_000);
  const d = Math.floor(total / 1440);
  const h = Math.floor((total % 1440) / 60);
  const m = total % 60;
  if (d > 0) return `${d}d ${h}h ${m}m`;
  if (h > 0) return `${h}h ${m}m`;
  return `${m}m`;
}

/** A local timestamp, `YYYY-MM-DD HH:MM:SS`. */
export function formatTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export const STATUS_LABEL: Record<CallStatus, string> = {
  inFlight: "in flight",
  ok: "ok",
  error: "error",
  canceled: "canceled",
  interrupted: "interrupted",
};

export interface Bar {
  label: string;
  value: number;
  /** 0..1 of the largest value. */
  fraction: number;
  display: string;
}

/** Rows of a usage report as bars sorted by `metric`, largest first, at most `max`. */
export function usageBars(
  report: UsageReport,
  metric: (s: UsageStats) => number,
  display: (v: number) => string,
  max = 12,
): Bar[] {
  const rows = report.rows
    .map((r) => ({ label: r.key || "(unknown)", value: metric(r.stats) }))
    .filter((r) => r.value > 0)
    .sort((a, b) => b.value - a.value)
    .slice(0, max);
  const top = rows.reduce((m, r) => Math.max(m, r.value), 0);
  return rows.map((r) => ({ ...r, fraction: top > 0 ? r.value / top : 0, display: display(r.value) }));
}

/** Pretty-prints a JSON body; other text is returned as is. */
export function prettyBody(body: string | null): string {
  if (body === null) return "";
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

/** "1 call", "2 calls". */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export const COST_SOURCE_LABEL: Record<CostSource, string> = {
  reported: "reported by the provider",
  computed: "computed with the model's tokenizer",
  estimated: "estimated",
};

/**
 * Where the spend came from, as shares of the cost (of the calls when nothing cost anything):
 * `value` names the largest source, `sub` the others. `null` without calls.
 */
export function costSourceSplit(shares: CostSourceShare[]): { value: string; sub: string } | null {
  const calls = shares.reduce((n, s) => n + s.calls, 0);
  if (calls === 0) return null;
  const cost = shares.reduce((n, s) => n + s.costMicros, 0);
  const weight = (s: CostSourceShare) => (cost > 0 ? s.costMicros / cost : s.calls / calls);
  const sorted = [...shares].sort((a, b) => weight(b) - weight(a));
  const pct = (s: CostSourceShare) => `${formatPercent(weight(s), 0)} ${s.source}`;
  const [top, ...rest] = sorted;
  return { value: pct(top!), sub: rest.map(pct).join(" · ") };
}

/** The UTC day (`YYYY-MM-DD`) `days - 1` days before `nowMs` (a window of `days` days, today included). */
export function sinceDay(days: number, nowMs: number): string {
  const d = new Date(nowMs - (Math.max(1, days) - 1) * 86_400_000);
  return d.toISOString().slice(0, 10);
}

/** The file name of a download: `keyhaven-calls-2026-11-24-to-2026-11-30.csv`. */
export function exportFileName(what: "calls" | "usage", since: string, until: string): string {
  return `keyhaven-${what}-${since}-to-${until}.csv`;
}
