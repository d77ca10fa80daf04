// Prices: the price table in use (its version is recorded on every priced call), each configured
// model's effective price and the version new calls are recorded with, and per-model overrides
// (written as the model's `[[models]] price` with a version of their own; history is never
// re-priced).
import { useState } from "preact/hooks";
import { api, type ModelPrice, type PriceReport } from "../ipc";
import { priceInput, sourceText, toPriceForm, validatePrice, type PriceForm } from "../prices";
import { ConfirmButton, Empty, ErrorNotice, Field, View, useAction, useLoad } from "../ui";

function PriceEditor({ m, onReport, onCancel }: { m: ModelPrice; onReport: (r: PriceReport) => void; onCancel: () => void }) {
  const [form, setForm] = useState<PriceForm>(toPriceForm(m));
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validatePrice(form);
  const show = touched ? errors : {};
  const prefix = `price-${m.name.replace(/\W+/g, "-")}`;
  const field = (key: keyof PriceForm, label: string, hint?: string) => (
    <Field label={label} id={`${prefix}-${key}`} error={show[key]} hint={hint}>
      <input id={`${prefix}-${key}`} inputMode="decimal" value={form[key]} onInput={(e) => setForm({ ...form, [key]: e.currentTarget.value })} />
    </Field>
  );
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (Object.keys(errors).length) return;
    const r = await act.run(() => api().setPrice(m.name, priceInput(form)));
    if (r) onReport(r);
  };
  return (
    <form class="panel" onSubmit={submit} noValidate aria-label={`Override the price of ${m.name}`}>
      <h3>Override the price of {m.name}</h3>
      <p class="muted">USD per million tokens. New calls use it; calls already recorded keep their cost and price version.</p>
      {field("input", "Input")}
      {field("output", "Output")}
      {field("cacheRead", "Cache read", "Empty: the price table's.")}
      {field("cacheWrite", "Cache write", "Empty: the price table's.")}
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Save override
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function PriceRow({ m, onReport }: { m: ModelPrice; onReport: (r: PriceReport) => void }) {
  const [editing, setEditing] = useState(false);
  const act = useAction();
  return (
    <>
      <tr key={m.name} data-model={m.name}>
        <td>{m.name}</td>
        <td>{m.provider}</td>
        <td>
          <code>{m.upstream}</code>
        </td>
        <td title={m.note ?? undefined}>{sourceText(m)}</td>
        <td class="num">{m.perMtok?.input ?? "—"}</td>
        <td class="num">{m.perMtok?.output ?? "—"}</td>
        <td class="num">{m.perMtok?.cacheRead ?? "—"}</td>
        <td class="num">{m.perMtok?.cacheWrite ?? "—"}</td>
        <td>
          <code>{m.version ?? "—"}</code>
        </td>
        <td>
          <div class="actions">
            <button type="button" aria-expanded={editing} onClick={() => setEditing(!editing)}>
              Override
            </button>
            {m.source === "config" && (
              <ConfirmButton
                label="Remove override"
                question={`Price new calls of ${m.name} with the price table again?`}
                confirmLabel="Remove override"
                disabled={act.busy}
                onConfirm={() => void act.run(() => api().unsetPrice(m.name)).then((r) => r && onReport(r))}
              />
            )}
          </div>
          {act.error && <ErrorNotice error={act.error} />}
        </td>
      </tr>
      {editing && (
        <tr class="editing">
          <td colSpan={10}>
            <PriceEditor
              m={m}
              onCancel={() => setEditing(false)}
              onReport={(r) => {
                setEditing(false);
                onReport(r);
              }}
            />
          </td>
        </tr>
      )}
    </>
  );
}

export function Prices(_: { args: string[] }) {
  const res = useLoad(() => api().prices());
  const [report, setReport] = useState<PriceReport>();
  return (
    <View res={res}>
      {(loaded) => {
        const r = report ?? loaded;
        return (
          <>
            <p class="muted">
              Price table <strong>{r.version}</strong> ({r.currency} per million tokens). Each call keeps the cost and the price version it was recorded
              with; an override applies to new calls only and has a version of its own (<code>override-…</code>), so history is never re-priced. Overrides
              are written to the model's <code>[[models]] price</code> in the config file (also <code>keyhaven prices set</code>).
            </p>
            {r.models.length === 0 ? (
              <Empty title="No models configured.">
                <p>
                  <a href="#/providers">Add a provider and a model</a> to see its price.
                </p>
              </Empty>
            ) : (
              <table class="table" aria-label="Prices">
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
                    <th scope="col">Version</th>
                    <th scope="col" />
                  </tr>
                </thead>
                <tbody>
                  {r.models.map((m) => (
                    <PriceRow key={m.name} m={m} onReport={setReport} />
                  ))}
                </tbody>
              </table>
            )}
          </>
        );
      }}
    </View>
  );
}
