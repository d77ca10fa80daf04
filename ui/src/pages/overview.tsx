import { useState } from "preact/hooks";
import { api, type UsageGroupBy, type UsageReport } from "../ipc";
import {
  COST_SOURCE_LABEL,
  costSourceSplit,
  exportFileName,
  formatCost,
  formatDuration,
  formatMs,
  formatPercent,
  formatTokens,
  plural,
  sinceDay,
  usageBars,
  type Bar,
} from "../format";
import { dailyColumns, dayRange, stackPoints } from "../charts";
import { ColumnChart } from "../chart";
import { DownloadButton, Empty, Stat, View, useLoad } from "../ui";
import { BudgetBanner } from "./budgets";
import { CursorGuardBanner } from "./cursor";

export function Bars({ bars, label, none = "Nothing yet." }: { bars: Bar[]; label: string; none?: string }) {
  if (bars.length === 0) return <p class="muted">{none}</p>;
  return (
    <table class="bars" aria-label={label}>
      <tbody>
        {bars.map((b) => (
          <tr key={b.label}>
            <th scope="row">{b.label}</th>
            <td class="bar-cell">
              <span class="bar" style={{ width: `${Math.max(1, b.fraction * 100)}%` }} />
            </td>
            <td class="num">{b.display}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

type Split = Exclude<UsageGroupBy, "day">;
const SPLITS: { value: Split; label: string }[] = [
  { value: "model", label: "model" },
  { value: "provider", label: "provider" },
  { value: "client", label: "client" },
];
const WINDOWS = [7, 14, 30, 90];

function Controls({ split, setSplit, days, setDays }: { split: Split; setSplit: (s: Split) => void; days: number; setDays: (d: number) => void }) {
  return (
    <div class="toolbar" role="group" aria-label="Chart options">
      <label>
        Split by{" "}
        <select id="ov-split" value={split} onChange={(e) => setSplit(e.currentTarget.value as Split)}>
          {SPLITS.map((s) => (
            <option key={s.value} value={s.value}>
              {s.label}
            </option>
          ))}
        </select>
      </label>
      <label>
        Window{" "}
        <select id="ov-days" value={days} onChange={(e) => setDays(Number(e.currentTarget.value))}>
          {WINDOWS.map((d) => (
            <option key={d} value={d}>
              last {d} days
            </option>
          ))}
        </select>
      </label>
    </div>
  );
}

function Today({ split }: { split: Split }) {
  // Today since midnight in the budgets' time zone (the config's `time_zone`), not the UTC day.
  const today = useLoad(() => api().usage({ days: 1, groupBy: split, localToday: true }), [split]);
  return (
    <View res={today}>
      {(u) => <TodayBody u={u} split={split} />}
    </View>
  );
}

function TodayBody({ u, split }: { u: UsageReport; split: Split }) {
  return (
    <>
      <p class="muted" data-today-zone>
        Since midnight, {u.timeZone} (the budgets' time zone, <code>time_zone</code> in the config)
      </p>
      <TodayStats u={u} split={split} />
    </>
  );
}

function TodayStats({ u, split }: { u: UsageReport; split: Split }) {
  const t = u.totals;
  if (t.calls === 0)
    return (
      <Empty title="No calls today yet.">
        <p>
          Point a client at the gateway (<a href="#/providers">add a provider and a model</a>, then route a client on the{" "}
          <a href="#/clients">Clients</a> page); its calls, tokens and cost show up here.
        </p>
      </Empty>
    );
  const sources = costSourceSplit(u.costSources);
  return (
    <>
      <div class="stats">
        <Stat label="Today's spend" value={formatCost(t.costMicros)} sub={plural(t.calls, "call")} />
        {sources && (
          <div title={u.costSources.map((s) => `${s.source}: ${COST_SOURCE_LABEL[s.source]}, ${plural(s.calls, "call")}, ${formatCost(s.costMicros)}`).join("\n")}>
            <Stat label="Cost source" value={sources.value} sub={sources.sub} />
          </div>
        )}
        <Stat label="Tokens" value={formatTokens(t.inputTokens + t.outputTokens)} sub={`${formatTokens(t.inputTokens)} in · ${formatTokens(t.outputTokens)} out`} />
        <Stat label="Latency p50 / p95 / p99" value={formatMs(t.latency.p50Ms)} sub={`${formatMs(t.latency.p95Ms)} · ${formatMs(t.latency.p99Ms)}`} />
        <Stat label="Errors" value={formatPercent(t.errorRate)} sub={plural(t.errors, "error")} />
        <Stat label="Cache hit rate" value={formatPercent(t.cacheHitRate)} sub={`${formatTokens(t.cacheReadTokens)} cached tokens`} />
      </div>
      <div class="cols">
        <section>
          <h3>Cost by {split}</h3>
          <Bars label={`Cost by ${split} today`} bars={usageBars(u, (s) => s.costMicros, formatCost)} />
        </section>
        <section>
          <h3>Tokens by {split}</h3>
          <Bars label={`Tokens by ${split} today`} bars={usageBars(u, (s) => s.inputTokens + s.outputTokens, formatTokens)} />
        </section>
        <section>
          <h3>Latency p95 by {split}</h3>
          <Bars label={`Latency p95 by ${split} today`} bars={usageBars(u, (s) => s.latency.p95Ms ?? 0, formatMs)} />
        </section>
        <section>
          <h3>Errors by {split}</h3>
          <Bars label={`Errors by ${split} today`} bars={usageBars(u, (s) => s.errors, String)} none="No errors today." />
        </section>
      </div>
    </>
  );
}

function OverTime({ split, days }: { split: Split; days: number }) {
  const series = useLoad(() => api().usageSeries({ days, splitBy: split }), [split, days]);
  const daily = useLoad(() => api().usage({ days, groupBy: "day" }), [days]);
  return (
    <>
      <View res={series}>
        {(s) => {
          const range = dayRange(s.since, s.until);
          if (s.points.length === 0) return <p class="muted">No calls in the last {days} days.</p>;
          return (
            <div class="cols">
              <section>
                <h3>Cost per day by {split}</h3>
                <ColumnChart title={`Cost per day by ${split}`} data={stackPoints(s.points, range, (p) => p.costMicros)} format={formatCost} />
              </section>
              <section>
                <h3>Tokens per day by {split}</h3>
                <ColumnChart title={`Tokens per day by ${split}`} data={stackPoints(s.points, range, (p) => p.inputTokens + p.outputTokens)} format={formatTokens} />
              </section>
            </div>
          );
        }}
      </View>
      <View res={daily}>
        {(u) => {
          if (u.totals.calls === 0) return null;
          const range = dayRange(u.since, u.until);
          return (
            <>
              <p class="muted">
                {formatCost(u.totals.costMicros)} over {plural(u.totals.calls, "call")} ({u.since} – {u.until}), {plural(u.totals.errors, "error")}, p95 {formatMs(u.totals.latency.p95Ms)}
              </p>
              <div class="cols">
                <section>
                  <h3>Latency per day</h3>
                  <ColumnChart
                    title="Latency per day"
                    grouped
                    data={dailyColumns(u, range, [
                      { key: "p50", of: (x) => x.latency.p50Ms },
                      { key: "p95", of: (x) => x.latency.p95Ms },
                    ])}
                    format={formatMs}
                  />
                </section>
                <section>
                  <h3>Calls and errors per day</h3>
                  <ColumnChart
                    title="Calls and errors per day"
                    grouped
                    data={dailyColumns(u, range, [
                      { key: "calls", of: (x) => x.calls },
                      { key: "errors", of: (x) => x.errors },
                    ])}
                    format={(v) => (Number.isInteger(v) ? String(v) : v.toFixed(1))}
                  />
                </section>
              </div>
            </>
          );
        }}
      </View>
    </>
  );
}

export function Overview(_: { args: string[] }) {
  const status = useLoad(() => api().status());
  const budgets = useLoad(() => api().budgets());
  const guard = useLoad(() => api().cursorVersions());
  const [split, setSplit] = useState<Split>("model");
  const [days, setDays] = useState(7);
  return (
    <>
      <View res={status}>
        {(s) => (
          <p class="muted">
            Keyhaven {s.version} · up {formatDuration(s.uptimeMs)} · gateway <code>{s.gatewayUrl}/v1</code>
            {s.proxyAddr && <> · proxy <code>{s.proxyAddr}</code></>} · {s.providerCount} providers, {s.modelCount} models
            {s.recorderDrops > 0 && <strong class="warn-text"> · {s.recorderDrops} call records dropped</strong>}
          </p>
        )}
      </View>
      <View res={budgets}>{(r) => <BudgetBanner report={r} />}</View>
      <View res={guard}>{(r) => <CursorGuardBanner report={r} />}</View>
      <Controls split={split} setSplit={setSplit} days={days} setDays={setDays} />
      <h2>Today</h2>
      <Today split={split} />
      <h2>Over time</h2>
      <p>
        <DownloadButton
          label={`Download usage CSV (last ${days} days)`}
          load={() => api().exportUsage({ format: "csv", since: sinceDay(days, Date.now()), until: null })}
          name={() => exportFileName("usage", sinceDay(days, Date.now()), sinceDay(1, Date.now()))}
        />
      </p>
      <OverTime split={split} days={days} />
    </>
  );
}
