import { api } from "../ipc";
import { formatCost, formatDuration, formatMs, formatPercent, formatTokens, plural, usageBars, type Bar } from "../format";
import { Empty, Stat, View, useLoad } from "../ui";

export function Bars({ bars, label }: { bars: Bar[]; label: string }) {
  if (bars.length === 0) return <p class="muted">Nothing yet.</p>;
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

export function Overview(_: { args: string[] }) {
  const status = useLoad(() => api().status());
  const today = useLoad(() => api().usage({ days: 1, groupBy: "model" }));
  const week = useLoad(() => api().usage({ days: 7, groupBy: "day" }));
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
      <h2>Today (UTC)</h2>
      <View res={today}>
        {(u) => {
          const t = u.totals;
          if (t.calls === 0)
            return (
              <Empty title="No calls today yet.">
                <p>
                  Point a client at the gateway (<a href="#/providers">add a provider and a model</a> first), then its
                  calls, tokens and cost show up here.
                </p>
              </Empty>
            );
          return (
            <>
              <div class="stats">
                <Stat label="Spend" value={formatCost(t.costMicros)} sub={plural(t.calls, "call")} />
                <Stat label="Tokens" value={formatTokens(t.inputTokens + t.outputTokens)} sub={`${formatTokens(t.inputTokens)} in · ${formatTokens(t.outputTokens)} out`} />
                <Stat label="Latency p50 / p95 / p99" value={formatMs(t.latency.p50Ms)} sub={`${formatMs(t.latency.p95Ms)} · ${formatMs(t.latency.p99Ms)}`} />
                <Stat label="Error rate" value={formatPercent(t.errorRate)} sub={plural(t.errors, "error")} />
                <Stat label="Cache hit rate" value={formatPercent(t.cacheHitRate)} sub={`${formatTokens(t.cacheReadTokens)} cached tokens`} />
              </div>
              <div class="cols">
                <section>
                  <h3>Cost by model</h3>
                  <Bars label="Cost by model" bars={usageBars(u, (s) => s.costMicros, formatCost)} />
                </section>
                <section>
                  <h3>Tokens by model</h3>
                  <Bars label="Tokens by model" bars={usageBars(u, (s) => s.inputTokens + s.outputTokens, formatTokens)} />
                </section>
              </div>
            </>
          );
        }}
      </View>
      <h2>Last 7 days</h2>
      <View res={week}>
        {(u) =>
          u.totals.calls === 0 ? (
            <p class="muted">No calls in the last 7 days.</p>
          ) : (
            <>
              <p class="muted">
                {formatCost(u.totals.costMicros)} over {plural(u.totals.calls, "call")} ({u.since} – {u.until})
              </p>
              <div class="cols">
                <section>
                  <h3>Cost by day</h3>
                  <Bars label="Cost by day" bars={usageBars(u, (s) => s.costMicros, formatCost).sort((a, b) => a.label.localeCompare(b.label))} />
                </section>
                <section>
                  <h3>Calls by day</h3>
                  <Bars label="Calls by day" bars={usageBars(u, (s) => s.calls, String).sort((a, b) => a.label.localeCompare(b.label))} />
                </section>
              </div>
            </>
          )
        }
      </View>
    </>
  );
}
