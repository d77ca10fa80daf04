import { useState } from "preact/hooks";
import { api, type ConnectionTest, type Model, type Provider } from "../ipc";
import { formatMs } from "../format";
import {
  KINDS,
  PRESETS,
  hasErrors,
  modelInput,
  presetForm,
  providerInput,
  validateModel,
  validateProvider,
  type ModelForm,
  type ProviderForm,
  type ProviderPreset,
} from "../presets";
import { Empty, ErrorNotice, Field, View, useAction, useLoad } from "../ui";

function TestResult({ t }: { t: ConnectionTest }) {
  return (
    <div class={`notice ${t.ok ? "ok" : "error"}`} role="status">
      {t.ok ? "Works" : `Failed${t.errorKind ? ` (${t.errorKind})` : ""}`}: {t.message} · {t.model} via {t.provider} in {formatMs(t.latencyMs)} ·{" "}
      <a href={`#/calls/${encodeURIComponent(t.callId)}`}>see the call</a>
    </div>
  );
}

function KeyForm({ p, onDone }: { p: Provider; onDone: () => void }) {
  const [value, setValue] = useState("");
  const act = useAction();
  const id = `key-${p.name}`;
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!value.trim()) return;
    const r = await act.run(() => api().setKey(p.name, value.trim()));
    setValue("");
    if (r) onDone();
  };
  return (
    <form class="inline" onSubmit={submit}>
      <label for={id}>API key for {p.name}</label>
      <input id={id} type="password" autoComplete="off" spellcheck={false} value={value} placeholder={p.key?.hasKey ? "replace the stored key" : "paste the key"} onInput={(e) => setValue(e.currentTarget.value)} />
      <button type="submit" disabled={act.busy || !value.trim()}>
        Save key
      </button>
      {p.key?.hasKey && (
        <button type="button" class="danger" disabled={act.busy} onClick={() => void act.run(() => api().deleteKey(p.name)).then((r) => r && onDone())}>
          Remove key
        </button>
      )}
      <small class="muted">Write-only: the key goes to the OS keyring and is never shown again.</small>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function ProviderRow({ p, onChange }: { p: Provider; onChange: () => void }) {
  const act = useAction();
  const [test, setTest] = useState<ConnectionTest>();
  const [keyOpen, setKeyOpen] = useState(false);
  const h = p.health;
  return (
    <li class="card">
      <div class="card-head">
        <div>
          <strong>{p.name}</strong> <span class="tag">{p.kind}</span> <code>{p.baseUrl}</code>
          <div class="muted">
            {p.modelCount} models ·{" "}
            {p.key === null ? "no key" : p.key.hasKey ? `key in ${p.key.source} (${p.key.name})` : <span class="warn-text">key missing ({p.key.source} {p.key.name})</span>}
            {h && (h.coolingDown ? <span class="warn-text"> · cooling down ({formatMs(h.cooldownRemainingMs)})</span> : ` · ${h.totalSuccesses} ok / ${h.totalFailures} failed`)}
          </div>
          {h?.lastError && <div class="muted">Last error: {h.lastError}</div>}
        </div>
        <div class="actions">
          <button type="button" disabled={act.busy || p.modelCount === 0} title={p.modelCount === 0 ? "Add a model first" : undefined} onClick={() => void act.run(() => api().testProvider(p.name)).then((t) => t && setTest(t))}>
            {act.busy ? "Testing…" : "Test"}
          </button>
          {p.key && (
            <button type="button" aria-expanded={keyOpen} onClick={() => setKeyOpen(!keyOpen)}>
              Set key
            </button>
          )}
          <button
            type="button"
            class="danger"
            disabled={act.busy}
            onClick={() => confirm(`Delete provider ${p.name}?`) && void act.run(() => api().deleteProvider(p.name)).then(onChange)}
          >
            Delete
          </button>
        </div>
      </div>
      {keyOpen && <KeyForm p={p} onDone={() => { setKeyOpen(false); onChange(); }} />}
      {test && <TestResult t={test} />}
      {act.error && <ErrorNotice error={act.error} />}
    </li>
  );
}

function AddProvider({ existing, onDone }: { existing: string[]; onDone: () => void }) {
  const [preset, setPreset] = useState<ProviderPreset | undefined>(PRESETS[0]);
  const [form, setForm] = useState<ProviderForm>(presetForm(PRESETS[0]!));
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateProvider(form, existing);
  const show = touched ? errors : {};
  const set = (k: keyof ProviderForm) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
  const choose = (id: string) => {
    const p = PRESETS.find((x) => x.id === id);
    setPreset(p);
    if (p) setForm(presetForm(p));
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (hasErrors(errors)) return;
    const r = await act.run(() => api().createProvider(providerInput(form, preset)));
    if (r) onDone();
  };
  return (
    <form class="panel" onSubmit={submit} noValidate>
      <h3>Add a provider</h3>
      <Field label="Preset" id="p-preset" hint={preset?.example ? `e.g. model ${preset.example}` : undefined}>
        <select id="p-preset" value={preset?.id ?? "custom"} onChange={(e) => choose(e.currentTarget.value)}>
          {PRESETS.map((p) => (
            <option key={p.id} value={p.id}>
              {p.label}
            </option>
          ))}
          <option value="custom">Custom</option>
        </select>
      </Field>
      <Field label="Name" id="p-name" error={show.name}>
        <input id="p-name" value={form.name} onInput={set("name")} aria-invalid={!!show.name} aria-describedby={show.name ? "p-name-error" : undefined} />
      </Field>
      <Field label="Kind" id="p-kind">
        <select id="p-kind" value={form.kind} onChange={set("kind")}>
          {KINDS.map((k) => (
            <option key={k}>{k}</option>
          ))}
        </select>
      </Field>
      <Field label="Base URL" id="p-url" error={show.baseUrl}>
        <input id="p-url" type="url" value={form.baseUrl} onInput={set("baseUrl")} aria-invalid={!!show.baseUrl} aria-describedby={show.baseUrl ? "p-url-error" : undefined} />
      </Field>
      <Field label="Key" id="p-keysource" hint="Set the key itself afterwards with “Set key” (keyring) or in the environment.">
        <select id="p-keysource" value={form.keySource} onChange={set("keySource")}>
          <option value="keyring">OS keyring</option>
          <option value="env">Environment variable</option>
          <option value="none">No key (local server)</option>
        </select>
      </Field>
      {form.keySource !== "none" && (
        <Field label={form.keySource === "env" ? "Variable name" : "Keyring entry"} id="p-keyname" error={show.keyName}>
          <input id="p-keyname" value={form.keyName} onInput={set("keyName")} aria-invalid={!!show.keyName} aria-describedby={show.keyName ? "p-keyname-error" : undefined} />
        </Field>
      )}
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Add provider
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function AddModel({ providers, existing, onDone }: { providers: string[]; existing: string[]; onDone: () => void }) {
  const empty: ModelForm = { name: "", provider: providers[0] ?? "", upstream: "", aliases: "", contextWindow: "", maxOutputTokens: "" };
  const [form, setForm] = useState<ModelForm>(empty);
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateModel(form, providers, existing);
  const show = touched ? errors : {};
  const set = (k: keyof ModelForm) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (hasErrors(errors)) return;
    const r = await act.run(() => api().createModel(modelInput(form)));
    if (r) {
      setForm(empty);
      setTouched(false);
      onDone();
    }
  };
  const text = (k: keyof ModelForm, label: string, hint?: string, inputMode?: "numeric") => (
    <Field label={label} id={`m-${k}`} error={show[k]} hint={hint}>
      <input id={`m-${k}`} value={form[k]} inputMode={inputMode} onInput={set(k)} aria-invalid={!!show[k]} aria-describedby={show[k] ? `m-${k}-error` : undefined} />
    </Field>
  );
  return (
    <form class="panel" onSubmit={submit} noValidate>
      <h3>Add a model</h3>
      {text("name", "Name", "What clients ask for, e.g. sonnet.")}
      <Field label="Provider" id="m-provider" error={show.provider}>
        <select id="m-provider" value={form.provider} onChange={set("provider")}>
          {providers.map((p) => (
            <option key={p}>{p}</option>
          ))}
        </select>
      </Field>
      {text("upstream", "Upstream model id", "The provider's name for it, e.g. claude-sonnet-4-5.")}
      {text("aliases", "Aliases", "Comma-separated, optional.")}
      {text("contextWindow", "Context window (tokens)", "Optional.", "numeric")}
      {text("maxOutputTokens", "Max output tokens", "Optional.", "numeric")}
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy || providers.length === 0}>
          Add model
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function ModelRow({ m, onChange }: { m: Model; onChange: () => void }) {
  const act = useAction();
  const [test, setTest] = useState<ConnectionTest>();
  const caps = [m.capabilities.tools && "tools", m.capabilities.vision && "vision", m.capabilities.thinking && "thinking"].filter(Boolean).join(", ");
  return (
    <tr>
      <td>
        <strong>{m.name}</strong>
        {m.aliases.length > 0 && <div class="muted">also {m.aliases.join(", ")}</div>}
        {test && <TestResult t={test} />}
        {act.error && <ErrorNotice error={act.error} />}
      </td>
      <td>{m.provider}</td>
      <td>
        <code>{m.upstream}</code>
      </td>
      <td>{caps || "—"}</td>
      <td>{m.priced ? "yes" : <span class="warn-text">no price</span>}</td>
      <td>
        <div class="actions">
        <button type="button" disabled={act.busy} onClick={() => void act.run(() => api().testModel(m.name)).then((t) => t && setTest(t))}>
          {act.busy ? "Testing…" : "Test"}
        </button>
        <button type="button" class="danger" disabled={act.busy} onClick={() => confirm(`Delete model ${m.name}?`) && void act.run(() => api().deleteModel(m.name)).then(onChange)}>
          Delete
        </button>
        </div>
      </td>
    </tr>
  );
}

export function Providers(_: { args: string[] }) {
  const providers = useLoad(() => api().providers());
  const models = useLoad(() => api().models());
  const [adding, setAdding] = useState<"provider" | "model" | undefined>();
  const reload = () => {
    providers.reload();
    models.reload();
  };
  const names = providers.data?.map((p) => p.name) ?? [];
  return (
    <>
      <div class="toolbar">
        <button type="button" aria-expanded={adding === "provider"} onClick={() => setAdding(adding === "provider" ? undefined : "provider")}>
          Add provider
        </button>
        <button type="button" aria-expanded={adding === "model"} disabled={names.length === 0} onClick={() => setAdding(adding === "model" ? undefined : "model")}>
          Add model
        </button>
      </div>
      {adding === "provider" && <AddProvider existing={names} onDone={() => { setAdding(undefined); reload(); }} />}
      {adding === "model" && <AddModel providers={names} existing={models.data?.map((m) => m.name) ?? []} onDone={() => { setAdding(undefined); reload(); }} />}
      <h2>Providers</h2>
      <View res={providers}>
        {(ps) =>
          ps.length === 0 ? (
            <Empty title="No providers yet.">
              <p>Choose “Add provider” and pick a preset (OpenAI, Anthropic, DeepSeek, Ollama, …), then set its key and add a model.</p>
            </Empty>
          ) : (
            <ul class="cards">
              {ps.map((p) => (
                <ProviderRow key={p.name} p={p} onChange={reload} />
              ))}
            </ul>
          )
        }
      </View>
      <h2>Models</h2>
      <View res={models}>
        {(ms) =>
          ms.length === 0 ? (
            <Empty title="No models yet.">
              <p>{names.length ? "Choose “Add model” to name a model clients can ask for." : "Add a provider first, then a model on it."}</p>
            </Empty>
          ) : (
            <table class="table">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Provider</th>
                  <th scope="col">Upstream</th>
                  <th scope="col">Capabilities</th>
                  <th scope="col">Priced</th>
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {ms.map((m) => (
                  <ModelRow key={m.id} m={m} onChange={reload} />
                ))}
              </tbody>
            </table>
          )
        }
      </View>
    </>
  );
}
