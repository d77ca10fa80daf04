// Budgets: spend per budget this period (finished calls from the ledger plus estimates of calls in
// flight), and `[[budgets]]` edits written to the config file by the engine.
import { useState } from "preact/hooks";
import { api, type Budget, type BudgetReport } from "../ipc";
import { EMPTY_BUDGET, PERIODS, SCOPES, actionText, bannerLines, budgetInput, scopeText, spendText, toBudgetForm, validateBudget, type BudgetForm } from "../budgets";
import { formatCost, formatTime } from "../format";
import { ConfirmButton, Empty, ErrorNotice, Field, View, useAction, useLoad } from "../ui";

function BudgetFields({ form, setForm, show, prefix }: { form: BudgetForm; setForm: (f: BudgetForm) => void; show: Partial<Record<keyof BudgetForm, string>>; prefix: string }) {
  const text = (key: keyof BudgetForm, label: string, hint?: string, inputMode?: "decimal" | "numeric") => (
    <Field label={label} id={`${prefix}-${key}`} error={show[key]} hint={hint}>
      <input id={`${prefix}-${key}`} inputMode={inputMode} value={form[key]} onInput={(e) => setForm({ ...form, [key]: e.currentTarget.value })} />
    </Field>
  );
  return (
    <>
      {text("name", "Name")}
      <Field label="Limits" id={`${prefix}-scope`}>
        <select id={`${prefix}-scope`} value={form.scope} onChange={(e) => setForm({ ...form, scope: e.currentTarget.value as BudgetForm["scope"] })}>
          {SCOPES.map((s) => (
            <option key={s.value} value={s.value}>
              {s.label}
            </option>
          ))}
        </select>
      </Field>
      {form.scope !== "all" && text("target", form.scope === "model" ? "Model or group" : form.scope === "client" ? "Client" : "Provider")}
      <Field label="Period" id={`${prefix}-period`} hint="In the time zone of the config's time_zone (the system's by default).">
        <select id={`${prefix}-period`} value={form.period} onChange={(e) => setForm({ ...form, period: e.currentTarget.value as BudgetForm["period"] })}>
          {PERIODS.map((p) => (
            <option key={p.value} value={p.value}>
              {p.label}
            </option>
          ))}
        </select>
      </Field>
      {text("limitUsd", "Limit (USD)", undefined, "decimal")}
      {text("softPercent", "Warn at (%)", "A banner here, a line in the log and a tray notice.", "numeric")}
      <Field label="At the limit" id={`${prefix}-onLimit`}>
        <select id={`${prefix}-onLimit`} value={form.onLimit} onChange={(e) => setForm({ ...form, onLimit: e.currentTarget.value as BudgetForm["onLimit"] })}>
          <option value="refuse">Refuse new calls (429 budget_exceeded)</option>
          <option value="downgrade">Send new conversations to a cheaper model</option>
        </select>
      </Field>
      {form.onLimit === "downgrade" &&
        text("downgradeTo", "Cheaper model or group", "Conversations under way keep their model (switching would lose the prompt cache).")}
    </>
  );
}

function BudgetEditor({ initial, title, onSave, onCancel }: { initial: BudgetForm; title: string; onSave: (f: BudgetForm) => Promise<BudgetReport | undefined>; onCancel?: () => void }) {
  const [form, setForm] = useState(initial);
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateBudget(form);
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (Object.keys(errors).length) return;
    const r = await act.run(() => onSave(form));
    if (r) {
      setForm(initial);
      setTouched(false);
    }
  };
  return (
    <form class="panel" onSubmit={submit} noValidate aria-label={title}>
      <h3>{title}</h3>
      <BudgetFields form={form} setForm={setForm} show={touched ? errors : {}} prefix={title.replace(/\W+/g, "-").toLowerCase()} />
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Save budget
        </button>
        {onCancel && (
          <button type="button" onClick={onCancel}>
            Cancel
          </button>
        )}
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function BudgetRow({ b, onReport }: { b: Budget; onReport: (r: BudgetReport) => void }) {
  const [editing, setEditing] = useState(false);
  const act = useAction();
  return (
    <>
      <tr data-budget={b.name} data-level={b.level}>
        <td>
          <strong>{b.name}</strong>
          <div class="muted">{scopeText(b)}</div>
        </td>
        <td>{b.period}</td>
        <td>
          <meter min={0} max={100} low={b.softPercent} high={b.softPercent} optimum={0} value={Math.min(b.percent, 100)} aria-label={`${b.name} used`} />{" "}
          <span class={b.level === "ok" ? "" : "warn-text"}>{spendText(b)}</span>
          {b.inFlightMicros > 0 && <div class="muted">{formatCost(b.inFlightMicros)} of it in calls still running</div>}
        </td>
        <td>{actionText(b)}</td>
        <td>{formatTime(b.resetMs)}</td>
        <td>
          <div class="actions">
            <button type="button" aria-expanded={editing} onClick={() => setEditing(!editing)}>
              Edit
            </button>
            <ConfirmButton label="Delete" question={`Delete budget ${b.name}?`} confirmLabel="Delete budget" disabled={act.busy} onConfirm={() => void act.run(() => api().deleteBudget(b.name)).then((r) => r && onReport(r))} />
          </div>
          {act.error && <ErrorNotice error={act.error} />}
        </td>
      </tr>
      {editing && (
        <tr class="editing">
          <td colSpan={6}>
            <BudgetEditor
              initial={toBudgetForm(b)}
              title={`Edit budget ${b.name}`}
              onCancel={() => setEditing(false)}
              onSave={async (f) => {
                const r = await api().updateBudget(b.name, budgetInput(f));
                setEditing(false);
                onReport(r);
                return r;
              }}
            />
          </td>
        </tr>
      )}
    </>
  );
}

/** Budgets at or past their warning threshold (the Overview shows it too). */
export function BudgetBanner({ report }: { report: BudgetReport }) {
  const lines = bannerLines(report, formatTime);
  if (lines.length === 0) return null;
  return (
    <>
      {lines.map((l) => (
        <div key={l.text} class={`notice ${l.level === "exceeded" ? "error" : "warn"}`} role="status" data-budget-banner={l.level}>
          {l.text} <a href="#/budgets">Budgets</a>
        </div>
      ))}
    </>
  );
}

export function Budgets(_: { args: string[] }) {
  const [version, setVersion] = useState(0);
  const res = useLoad(() => api().budgets(), [version]);
  const [report, setReport] = useState<BudgetReport>();
  const onReport = (r: BudgetReport) => setReport(r);
  return (
    <View res={res}>
      {(loaded) => {
        const r = report ?? loaded;
        return (
          <>
            <p class="muted">
              Today {formatCost(r.todayMicros)} · time zone <code>{r.timeZone}</code> (UTC{r.utcOffsetS >= 0 ? "+" : "−"}
              {Math.floor(Math.abs(r.utcOffsetS) / 3600)}
              {Math.abs(r.utcOffsetS) % 3600 ? `:${String((Math.abs(r.utcOffsetS) % 3600) / 60).padStart(2, "0")}` : ""}) ·{" "}
              <button type="button" onClick={() => { setReport(undefined); setVersion(version + 1); }}>
                Refresh
              </button>
            </p>
            <BudgetBanner report={r} />
            {r.budgets.length === 0 ? (
              <Empty title="No budgets yet.">
                <p>A budget limits what a period may cost: everything, one client, one provider, or one model or group.</p>
              </Empty>
            ) : (
              <table class="table" aria-label="Budgets">
                <thead>
                  <tr>
                    <th>Budget</th>
                    <th>Period</th>
                    <th>Spent</th>
                    <th>At the limit</th>
                    <th>Resets</th>
                    <th />
                  </tr>
                </thead>
                <tbody>
                  {r.budgets.map((b) => (
                    <BudgetRow key={b.name} b={b} onReport={onReport} />
                  ))}
                </tbody>
              </table>
            )}
            <BudgetEditor initial={EMPTY_BUDGET} title="Add a budget" onSave={async (f) => { const n = await api().createBudget(budgetInput(f)); onReport(n); return n; }} />
          </>
        );
      }}
    </View>
  );
}
