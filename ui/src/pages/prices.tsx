// Prices: the price table in use (its version is recorded on every priced call) and each
// configured model's effective price, read-only. Overrides are `[[models]] price` in the config.
import { api, type PriceSource } from "../ipc";
import { Empty, View, useLoad } from "../ui";

const SOURCE_LABEL: Record<PriceSource, string> = {
  table: "price table",
  config: "config override",
  none: "no price",
};

export function Prices(_: { args: string[] }) {
  const res = useLoad(() => api().prices());
  return (
    <View res={res}>
      {(r) => (
        <>
          <p class="muted">
            Price table <strong>{r.version}</strong> ({r.currency} per million tokens). Each call keeps the cost and the table version it was recorded
            with; a change here never re-prices history. Override a model's price with <code>price = {"{ input = \"…\", output = \"…\" }"}</code> in its{" "}
            <code>[[models]]</code> entry.
          </p>
          {r.models.length === 0 ? (
            <Empty title="No models configured.">
              <p>
                <a href="#/providers">Add a provider and a model</a> to see its price.
              </p>
            </Empty>
          ) : (
            <table class="table">
              <thead>
                <tr>
                  <th scope="col">Model</th>
                  <th scope="col">Provider</th>
                  <th scope="col">Upstream</th>
                  <th scope="col">Source</th>
                  <th scope="col" class="num">Input</th>
                  <th scope="col" class="num">Output</th>
                  <th scope="col" class="num">Cache read</th>
                  <th scope="col" class="num">Cache write</th>
                </tr>
              </thead>
              <tbody>
                {r.models.map((m) => (
                  <tr key={m.name}>
                    <td>{m.name}</td>
                    <td>{m.provider}</td>
                    <td>
                      <code>{m.upstream}</code>
                    </td>
                    <td title={m.note ?? undefined}>{SOURCE_LABEL[m.source]}</td>
                    <td class="num">{m.perMtok?.input ?? "—"}</td>
                    <td class="num">{m.perMtok?.output ?? "—"}</td>
                    <td class="num">{m.perMtok?.cacheRead ?? "—"}</td>
                    <td class="num">{m.perMtok?.cacheWrite ?? "—"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </View>
  );
}
